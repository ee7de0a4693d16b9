package replay

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// placedAs returns copies of reqs, each naming the worker out (a replay's
// records) says served it, and, disaggregated, its prefill worker.
func placedAs(t testing.TB, reqs, out []*trace.Request) []*trace.Request {
	t.Helper()
	by := map[string]*trace.Request{}
	for _, r := range out {
		by[r.RequestID] = r
	}
	placed := make([]*trace.Request, len(reqs))
	for i, r := range reqs {
		c := *r
		if o := by[r.RequestID]; o != nil {
			c.Worker, c.PrefillWorker = o.Worker, o.PrefillWorker
		}
		if c.Worker == "" {
			t.Fatalf("request %s: no worker in the records", r.RequestID)
		}
		placed[i] = &c
	}
	return placed
}

// withWorkers returns copies of reqs that name one of workers serving
// them, spread unevenly, for the recorded router.
func withWorkers(reqs []*trace.Request, workers int) []*trace.Request {
	c := make([]*trace.Request, len(reqs))
	for i, r := range reqs {
		k := *r
		k.Worker = "gpu-" + strconv.Itoa((i*5+i/3)%workers)
		c[i] = &k
	}
	return c
}

// unscored returns the records' dump with their router scores left out,
// which the recorded router does not give.
func unscored(rs []*trace.Request) string {
	c := make([]*trace.Request, len(rs))
	for i, r := range rs {
		k := *r
		k.RouterScore = trace.Opt[float64]{}
		c[i] = &k
	}
	return dump(c)
}

// A replay's requests, each sent to the worker the replay's records name,
// give that replay's records again (router scores aside) and its
// figures, whatever router placed them: load-aware, sticky, cache-aware,
// with a stale view; on a vLLM scheduler and on SGLang's. So a placement
// read from a trace is replayed as it was made, and the engine's time on
// it is what the placement costs without the router's decisions.
func TestRecordedReplaysRouter(t *testing.T) {
	t.Parallel()
	reqs := append(randomTrace(23, 300, 60), conversationTrace(7, 80)...)
	for i, r := range reqs {
		r.Session = []string{"a", "b", "c", ""}[i%4]
	}
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, name := range []string{RouterLeastRequests, RouterPowerOfTwo, RouterSession, RouterSGLang, RouterLLMD, RouterDynamo, RouterMaxPrefix, "stale", "sglang"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Workers: 4, Router: name, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 16}}
			switch name {
			case "stale":
				cfg.Router, cfg.RouterConfig.ViewIntervalSec = RouterLLMD, 0.5
			case "sglang":
				cfg.Router = RouterSGLang
				cfg.Scheduler = SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 70 * 16}
			}
			_, a, sa := replay(t, cfg, cost, 70, reqs)
			placed := placedAs(t, reqs, a)
			cfg.Router, cfg.RouterConfig = RouterRecorded, RouterConfig{}
			_, b, sb := replay(t, cfg, cost, 70, placed)
			if unscored(a) != unscored(b) {
				t.Errorf("the records differ from the router's")
			}
			sa.Events, sb.Events = 0, 0 // the router's arrivals at a view tick
			if !reflect.DeepEqual(sa, sb) {
				t.Errorf("figures %+v, the router's %+v", sb, sa)
			}
			if sa.CachedTokens == 0 || sa.Preemptions == 0 {
				t.Errorf("workload too easy: %+v", sa)
			}
		})
	}
}

// On the Mooncake conversation trace, 16 workers of Llama-3.1-8B on H100:
// llm_d's placement, read back from its records, replays to its records.
func TestRecordedReplaysMooncake(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(t)
	// Without the validator, which checks every worker's cache at every
	// step: minutes on the whole trace.
	run := func(cfg Config, reqs []*trace.Request) ([]*trace.Request, Stats) {
		var all []*trace.Request
		st, err := Run(cfg, cost, blocks, reqs, func(r *trace.Request) error {
			all = append(all, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return all, st
	}
	a, sa := run(Config{Workers: 16, Router: RouterLLMD}, reqs)
	b, sb := run(Config{Workers: 16, Router: RouterRecorded}, placedAs(t, reqs, a))
	if unscored(a) != unscored(b) {
		t.Errorf("the records differ from llm_d's")
	}
	if sa.CachedTokens != sb.CachedTokens || sa.Completed != sb.Completed || sa.End != sb.End {
		t.Errorf("figures %+v, llm_d's %+v", sb, sa)
	}
}

// The trace's names are the workers' slots in natural order, and the
// records name the workers as the trace does.
func TestRecordedNames(t *testing.T) {
	reqs := randomTrace(5, 60, 20)
	names := []string{"gpu-10", "gpu-2", "gpu-1"}
	for i, r := range reqs {
		r.Worker = names[i%3]
	}
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	byID, _, st := replay(t, Config{Workers: 4, Router: RouterRecorded}, cost, 400, reqs)
	if st.Completed != len(reqs) {
		t.Fatalf("%d of %d completed", st.Completed, len(reqs))
	}
	for _, r := range reqs {
		if got := byID[r.RequestID].Worker; got != r.Worker {
			t.Errorf("request %s served by %s, the trace says %s", r.RequestID, got, r.Worker)
		}
	}
	x := &recorded{}
	if err := x.assign(Requests(reqs), 4, 0); err != nil {
		t.Fatal(err)
	}
	if want := []string{"gpu-1", "gpu-2", "gpu-10"}; !slices.Equal(x.names, want) {
		t.Errorf("slots %v, want %v", x.names, want)
	}
}

// A request without a worker, more names than workers, a generated
// workload, autoscaling or disaggregation: a clear error, no replay.
func TestRecordedErrors(t *testing.T) {
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	run := func(cfg Config, in Inputs) error {
		_, err := RunInputs(cfg, cost, 400, in, func(*trace.Request) error {
			t.Error("a record written")
			return nil
		}, Options{})
		return err
	}
	reqs := randomTrace(3, 30, 20)
	for i, r := range reqs {
		r.Worker = "w" + strconv.Itoa(i%5)
	}
	reqs[7].Worker, reqs[12].Worker = "", ""
	reqs[12].SetPos("trace.jsonl", 13)
	cfg := Config{Workers: 5, Router: RouterRecorded}
	err := run(cfg, Requests(reqs))
	for _, want := range []string{"request 7: worker: absent", "trace.jsonl:13: worker: absent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	// Ten at most, then a line that says there are more.
	none := withWorkers(reqs, 5)
	for _, r := range none {
		r.Worker = ""
	}
	err = run(cfg, Requests(none))
	if err == nil || strings.Count(err.Error(), "worker: absent") != 10 || !strings.HasSuffix(err.Error(), "\ntoo many errors") {
		t.Errorf("error %v, want ten absent workers and too many errors", err)
	}
	reqs[7].Worker, reqs[12].Worker = "w0", "w1"
	cfg.Workers = 4
	if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), "names 5 workers (w0, w1, w2, w3 and 1 more), the deployment has 4: set workers to 5") {
		t.Errorf("error %v, want the count of names", err)
	}
	s, err := NewSampled("gen", 10, 1, [][2]int64{{100, 10}}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(cfg, s); err == nil || !strings.Contains(err.Error(), "a generated workload names no workers") {
		t.Errorf("error %v, want a generated workload's", err)
	}
	cfg.Workers = 5
	cfg.Autoscale = AutoscaleConfig{Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 5}
	if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), "recorded places requests as the trace did: not with autoscale") {
		t.Errorf("error %v, want autoscale's", err)
	}
	cfg.Autoscale = AutoscaleConfig{}
	cfg.Workers = 7
	cfg.Disaggregation = DisaggregationConfig{PrefillWorkers: 2, KVBytesPerToken: 131072, TransferGBps: 40}
	for i, r := range reqs {
		if i != 7 && i != 12 {
			r.PrefillWorker = "p" + strconv.Itoa(i%3)
		}
	}
	err = run(cfg, Requests(reqs))
	for _, want := range []string{"request 7: prefill_worker: absent", "trace.jsonl:13: prefill_worker: absent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	reqs[7].PrefillWorker, reqs[12].PrefillWorker = "p1", "p0"
	reqs[4].PrefillWorker = "w1" // also a decode worker's name
	if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), "the trace names 4 prefill workers (p0, p1, p2, w1), the deployment has 2: set disaggregation.prefill_workers to 4 and workers to 9") {
		t.Errorf("error %v, want the count of prefill workers", err)
	}
	cfg.Workers, cfg.Disaggregation.PrefillWorkers = 9, 4
	if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), "the trace names w1 as a prefill worker (prefill_worker) and as a decode worker (worker)") {
		t.Errorf("error %v, want a worker in both pools", err)
	}
	reqs[4].PrefillWorker = "p0"
	cfg.Workers, cfg.Disaggregation.PrefillWorkers = 7, 3
	if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), "the trace names 5 decode workers (w0, w1, w2, w3 and 1 more), the deployment has 4: set workers to 8") {
		t.Errorf("error %v, want the count of decode workers", err)
	}
	for _, c := range []struct {
		d    DisaggregationConfig
		want string
	}{
		{DisaggregationConfig{DecodeRouter: DecodeLeastRequests}, "disaggregation.decode_router: least_requests: router recorded sends each request to the decode worker its trace names (worker)"},
		{DisaggregationConfig{DecodeAutoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 5}}, "not with pools that an autoscaler or the planner sizes"},
		{DisaggregationConfig{Planner: PlannerConfig{Policy: PlannerDynamoSLA, TTFTSec: 1, ITLSec: 0.05}}, "not with pools that an autoscaler or the planner sizes"},
	} {
		cfg := Config{Workers: 8, Router: RouterRecorded, Disaggregation: c.d}
		cfg.Disaggregation.PrefillWorkers, cfg.Disaggregation.KVBytesPerToken, cfg.Disaggregation.TransferGBps = 3, 131072, 40
		if err := run(cfg, Requests(reqs)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.d, err, c.want)
		}
	}
}

// A disaggregated replay's requests, each sent to the prefill worker and
// the decode worker its records name, give that replay's records again
// (router scores aside) and its figures, whatever routers placed them:
// the cluster's (load-aware, cache-aware) and the decode pool's (in
// turn, by load, at random, Dynamo's); under vLLM, whose proxy chooses
// the decode worker when the prefill ends, and SGLang, whose router
// chooses the pair at arrival; with a KV tier on the prefill pool.
func TestRecordedReplaysDisaggregated(t *testing.T) {
	t.Parallel()
	reqs := append(randomTrace(29, 240, 60), conversationTrace(11, 60)...)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	sglang := SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 70 * 16}
	for _, c := range []struct {
		name   string
		router string
		decode string
		sched  SchedulerConfig
		tier   bool // a CPU tier on the prefill pool
	}{
		{"least_requests", RouterLeastRequests, DecodeRoundRobin, SchedulerConfig{}, false},
		{"llm_d+least", RouterLLMD, DecodeLeastRequests, SchedulerConfig{}, false},
		{"power_of_two+random", RouterPowerOfTwo, DecodeRandom, SchedulerConfig{}, false},
		{"dynamo", RouterDynamo, "", SchedulerConfig{}, false},
		{"dynamo+tier", RouterDynamo, DecodeRandom, SchedulerConfig{}, true},
		{"sglang", RouterSGLang, DecodePowerOfTwo, sglang, false},
		{"sglang+least", RouterLeastRequests, DecodeLeastRequests, sglang, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Workers: 5, Router: c.router, Scheduler: c.sched, Seed: 3}
			if cfg.Scheduler.Engine == "" {
				cfg.Scheduler = SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 16}
			}
			cfg.Disaggregation = pdConfig(2)
			cfg.Disaggregation.DecodeRouter = c.decode
			var off *Offload
			if c.tier {
				off = tierSpec(t, 200, 0, 0)
			}
			replay := func(cfg Config, reqs []*trace.Request) ([]*trace.Request, Stats) {
				var all []*trace.Request
				v := newValidator(t, cfg, reqs)
				st, err := RunInputs(cfg, cost, 70, Requests(reqs), func(r *trace.Request) error {
					all = append(all, r)
					return v.output(r)
				}, Options{Offload: off, Observe: v.step})
				if err != nil {
					t.Fatal(err)
				}
				v.finish(all)
				return all, st
			}
			a, sa := replay(cfg, reqs)
			placed := placedAs(t, reqs, a)
			for _, r := range placed {
				if r.PrefillWorker == "" {
					t.Fatalf("request %s: no prefill worker in the records", r.RequestID)
				}
			}
			cfg.Router, cfg.RouterConfig, cfg.Disaggregation.DecodeRouter = RouterRecorded, RouterConfig{}, ""
			b, sb := replay(cfg, placed)
			if unscored(a) != unscored(b) {
				t.Errorf("the records differ from the routers'")
			}
			sa.Events, sb.Events = 0, 0
			if !reflect.DeepEqual(sa, sb) {
				t.Errorf("figures %+v, the routers' %+v", sb, sa)
			}
			var host int64
			for _, r := range a {
				host += r.HostHitTokens.V
			}
			if sa.CachedTokens == 0 || sa.Preemptions == 0 && c.sched.Engine == "" || c.tier && host == 0 {
				t.Errorf("workload too easy: %+v, %d tokens hit in the CPU tier", sa, host)
			}
		})
	}
}

// Columns keeps each request's worker and prefill worker, so that a
// trace read from a file replays its placement.
func TestColumnsKeepWorker(t *testing.T) {
	var c Columns
	for i, r := range randomTrace(9, 20, 20) {
		r.Worker = "node-" + strconv.Itoa(i%3)
		if i%4 != 0 {
			r.PrefillWorker = "pre-" + strconv.Itoa(i%2)
		}
		c.Add(r)
		if got := c.Request(i); got.Worker != r.Worker || got.PrefillWorker != r.PrefillWorker {
			t.Fatalf("row %d: worker %q, prefill worker %q; added %q, %q", i, got.Worker, got.PrefillWorker, r.Worker, r.PrefillWorker)
		}
	}
}

// Slots no request names take names the trace did not: no two workers
// share a name.
func TestWorkerNames(t *testing.T) {
	for _, c := range []struct {
		given []string
		slots int
		want  []string
	}{
		{nil, 3, []string{"w0", "w1", "w2"}},
		{[]string{"w2", "w3"}, 4, []string{"w2", "w3", "w0", "w1"}},
		{[]string{"w0", "gpu-1"}, 4, []string{"w0", "gpu-1", "w1", "w2"}},
		{[]string{"a", "b"}, 2, []string{"a", "b"}},
		// Disaggregated: a pool's slots the trace names no worker of.
		{[]string{"w2", "", "w3", ""}, 4, []string{"w2", "w0", "w3", "w1"}},
		{[]string{"p1", "", "w0", "d2", ""}, 6, []string{"p1", "w1", "w0", "d2", "w2", "w3"}},
	} {
		if got := workerNames(c.given, c.slots); !slices.Equal(got, c.want) {
			t.Errorf("workerNames(%v, %d) = %v, want %v", c.given, c.slots, got, c.want)
		}
	}
}
