package replay

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// stepLog records every step a replay observes, per worker, as text.
type stepLog [][]string

func (l stepLog) observe(s *Step) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d-%d r%d w%d p%d free%d", s.Start, s.End, s.Running, s.Waiting, s.Preempted, s.KV.NumFree())
	for _, c := range s.Batch.Prefill {
		fmt.Fprintf(&b, " P%d+%d", c.Context, c.Tokens)
	}
	for _, c := range s.Batch.Decode {
		fmt.Fprintf(&b, " D%d", c)
	}
	l[s.Worker] = append(l[s.Worker], b.String())
	return nil
}

// runWith replays with fast-forward and routing in advance on or off and
// returns the emitted records, the stats (per-second ones included) and
// every worker's steps.
func runWith(t *testing.T, cfg Config, cost model.StepModel, blocks int64, reqs []*trace.Request, fast bool) (string, Stats, stepLog) {
	t.Helper()
	steps := make(stepLog, max(cfg.Workers, 1))
	var all []*trace.Request
	v := newValidator(t, cfg, reqs)
	st, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		return v.output(r)
	}, Options{PerSecond: true, test: testSwitches{noFastForward: !fast, noPreRoute: !fast, noLoneMemo: !fast}, Observe: func(s *Step) error {
		if err := v.step(s); err != nil {
			return err
		}
		return steps.observe(s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	v.finish(all)
	return dump(all), st, steps
}

// runPlain replays with fast-forward and no per-step hooks, so that its
// inner loop (steadySteps) runs, and returns the records, the stats, and
// how many of the inner loop's runs on vLLM workers had a waiting front
// that did not fit (vllm.stuck).
func runPlain(t *testing.T, cfg Config, cost model.StepModel, blocks int64, reqs []*trace.Request) (string, Stats, int) {
	t.Helper()
	checks, stuck := 0, 0
	checkSteady := func(w *worker, grownAhead bool) {
		checks++
		v, ok := w.s.(*vllm)
		if ok && w.waiting.Len() > 0 && len(w.running) < v.maxSeq {
			if !v.stuck {
				t.Fatalf("worker %d: steady steps with %d waiting, %d of %d sequences running, and the front not stuck", w.id, w.waiting.Len(), len(w.running), v.maxSeq)
			}
			stuck++
		}
		if !ok {
			if checks%50 == 0 {
				if err := w.s.(*sglang).tree.Check(); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		for _, r := range w.running {
			// Exactly the blocks its computed tokens fill, and the
			// hashes of its full blocks committed.
			want := ceilDiv(r.computed, v.bs)
			if grownAhead && int64(len(r.blocks)) == ceilDiv(r.computed+1, v.bs) {
				want = int64(len(r.blocks))
			}
			if int64(len(r.blocks)) != want {
				t.Fatalf("worker %d: request %d has %d blocks for %d computed tokens, want %d", w.id, r.idx, len(r.blocks), r.computed, want)
			}
			if v.prefix && r.hashed != r.computed/v.bs && !grownAhead {
				t.Fatalf("worker %d: request %d has %d hashed blocks for %d computed tokens", w.id, r.idx, r.hashed, r.computed)
			}
		}
		if checks%50 == 0 {
			if err := v.kv.Check(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var all []*trace.Request
	st, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		return nil
	}, Options{test: testSwitches{checkSteady: checkSteady}})
	if err != nil {
		t.Fatal(err)
	}
	if checks == 0 {
		t.Fatal("fast-forward's inner loop never ran")
	}
	return dump(all), st, stuck
}

// Fast-forward (and routing in advance, which it relies on, and the price
// table of lone decodes, which makes it fast) gives the same
// records, stats and steps as stepping one event at a time, in every
// configuration that changes what a window may contain: chunked prefills,
// preemptions, prefix hits, both routers, both loops, simultaneous events.
func TestFastForwardSameResults(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(21, 300, 60)
	for i, r := range reqs { // sessions for the sessions mode; the others ignore them
		r.Session, r.Turn = "s"+strconv.Itoa(i%25), trace.Some(int64(i/25))
		r.ThinkSec = trace.Some(0.01 * float64(i%7))
	}
	// Equal step costs on every worker make simultaneous step ends.
	tie := linearCost{Base: 2 * ms}
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}
	roofline, _ := llama8BOnH100(t)
	for i, c := range []struct {
		cfg    Config
		cost   model.StepModel
		blocks int64
	}{
		{Config{Workers: 1}, cost, 1000},
		{Config{Workers: 1, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 8}}, cost, 100},
		{Config{Workers: 3, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 512, MaxNumSeqs: 8}}, cost, 60},
		{Config{Workers: 4, Router: RouterRandom, Seed: 5}, cost, 80},
		{Config{Workers: 3}, tie, 200},
		{Config{Workers: 3, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 10}}, tie, 80},
		{Config{Workers: 2, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 7}}, cost, 60},
		{Config{Workers: 2, Workload: WorkloadConfig{TimeScale: 0.3}}, cost, 60},
		{Config{Workers: 3, Scheduler: SchedulerConfig{StreamInterval: 4}, Client: ClientConfig{LatencySec: 0.003}}, cost, 100},
		{Config{Workers: 2, Client: ClientConfig{LatencySec: 0.001}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 9}}, tie, 100},
		{Config{Workers: 2, Scheduler: SchedulerConfig{MaxNumSeqs: 4}, Client: ClientConfig{TimeoutSec: 0.1, LatencySec: 0.002}}, cost, 100},
		{Config{Workers: 2, Client: ClientConfig{TimeoutSec: 0.3}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 20}}, cost, 60},
		{Config{Workers: 3, Workload: WorkloadConfig{Mode: ModeSessions}}, cost, 80},
		{Config{Workers: 2, Client: ClientConfig{LatencySec: 0.002}, Workload: WorkloadConfig{Mode: ModeSessions, Sessions: 6}}, tie, 80},
		// The roofline prices decode batches by their contexts' sum.
		{Config{Workers: 2, Scheduler: SchedulerConfig{MaxNumSeqs: 6}}, roofline, 100},
		{Config{Workers: 1, Scheduler: SchedulerConfig{StreamInterval: 3}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 12}}, roofline, 200},
		// SGLang's scheduler: a pool that fills (evictions), one so small
		// that decodes retract, the FCFS queue, mixed chunks, no radix
		// cache, both loops, timeouts, and the roofline's sum pricing.
		{Config{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 6000}}, cost, 1},
		{Config{Workers: 1, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1500, SGLangConfig: SGLangConfig{ChunkedPrefillSize: 256}}}, cost, 1},
		{Config{Workers: 3, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 4000, SGLangConfig: SGLangConfig{SchedulePolicy: PolicyFCFS, EnableMixedChunk: true}}}, tie, 1},
		{Config{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 5000, SGLangConfig: SGLangConfig{DisableRadixCache: true}}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 9}}, cost, 1},
		{Config{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 8000, StreamInterval: 2}, Client: ClientConfig{TimeoutSec: 0.3, LatencySec: 0.001}}, roofline, 1},
		// Prefill/decode disaggregation (disagg.go): load-blind, with
		// timeouts and preemptions, in the closed loop, cache-aware.
		{Config{Workers: 3, Disaggregation: pdConfig(1)}, cost, 100},
		{Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: SchedulerConfig{MaxNumSeqs: 6}, Client: ClientConfig{TimeoutSec: 0.3, LatencySec: 0.002}}, cost, 40},
		{Config{Workers: 3, Router: RouterLeastRequests, Disaggregation: pdConfig(1), Workload: WorkloadConfig{Mode: ModeClosed, Clients: 10}}, roofline, 100},
		{Config{Workers: 4, Router: RouterDynamo, Disaggregation: pdConfig(2)}, cost, 60},
		{Config{Workers: 3, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 3000}, Client: ClientConfig{TimeoutSec: 0.04, LatencySec: 0.001}}, cost, 1},
		{Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1500, SGLangConfig: SGLangConfig{DisableRadixCache: true}}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 12}}, roofline, 1},
		// vLLM's decode requests through the decode workers' API
		// servers, clients giving up meanwhile.
		{Config{Workers: 4, Disaggregation: pdConfig(1), Client: ClientConfig{APIServerRequestSec: 0.004, TimeoutSec: 0.25}}, cost, 60},
		// The open loop's own window bound (disagg.bound): decode
		// workers fast-forwarded between hand-overs, prefill workers
		// short of blocks, SGLang's decode servers.
		{Config{Workers: 5, Router: RouterLeastRequests, Disaggregation: pdConfig(2)}, roofline, 40},
		{Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 2500}}, cost, 1},
		// The decode worker chosen by its load when the prefill ends
		// (DecodeLeastRequests): open and closed loops, timeouts, an
		// API server pass, SGLang.
		{Config{Workers: 5, Disaggregation: pdLeast(1)}, roofline, 40},
		{Config{Workers: 4, Disaggregation: pdLeast(1), Scheduler: SchedulerConfig{MaxNumSeqs: 6}, Client: ClientConfig{TimeoutSec: 0.3, APIServerRequestSec: 0.002}}, cost, 40},
		{Config{Workers: 5, Router: RouterLeastRequests, Disaggregation: pdLeast(2), Workload: WorkloadConfig{Mode: ModeClosed, Clients: 10}}, roofline, 100},
		{Config{Workers: 4, Disaggregation: pdLeast(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 2500}}, cost, 1},
		{Config{Workers: 5, Disaggregation: pdLeast(2), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 3000}, Client: ClientConfig{TimeoutSec: 0.02, APIServerRequestSec: 0.001}}, cost, 1},
		// vLLM's decode workers short of blocks: loads wait for room,
		// preemptions behind loaded requests (disagg.unstall).
		{Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: SchedulerConfig{MaxNumSeqs: 3}}, cost, 40},
		{Config{Workers: 3, Disaggregation: pdLeast(1), Client: ClientConfig{TimeoutSec: 0.3}}, cost, 30},
		// The seeded decode routers.
		{Config{Workers: 5, Disaggregation: DisaggregationConfig{PrefillWorkers: 2, KVBytesPerToken: 1000, TransferGBps: 1, TransferLatencySec: 0.001, DecodeRouter: DecodeRandom}, Seed: 9}, cost, 60},
		{Config{Workers: 5, Disaggregation: DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: 1000, TransferGBps: 1, TransferLatencySec: 0.001, DecodeRouter: DecodePowerOfTwo}, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 2500}, Seed: 4}, cost, 1},
		// SGLang's decode servers short of tokens: prefills held back
		// for their pre-allocation, with and without timeouts.
		{Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1200}}, cost, 1},
		{Config{Workers: 3, Disaggregation: pdLeast(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1000}, Client: ClientConfig{TimeoutSec: 0.1}}, roofline, 1},
	} {
		a, sa, la := runWith(t, c.cfg, c.cost, c.blocks, reqs, false)
		b, sb, lb := runWith(t, c.cfg, c.cost, c.blocks, reqs, true)
		if a != b {
			t.Errorf("config %d: records differ with fast-forward", i)
		}
		c, sc, stuck := runPlain(t, c.cfg, c.cost, c.blocks, reqs)
		if a != c {
			t.Errorf("config %d: records differ with fast-forward's inner loop", i)
		}
		stepping, events := sa.Events, sb.Events
		sa.Events, sb.Events, sc.Events = 0, 0, 0
		if secs := sa.Seconds; sc.Seconds != nil || secs == nil {
			t.Errorf("config %d: per-second statistics asked and not given, or not asked and given", i)
		} else if sc.Seconds = secs; !reflect.DeepEqual(sa, sc) {
			t.Errorf("config %d: stats differ with fast-forward's inner loop:\n%+v\n%+v", i, sa, sc)
		}
		if !reflect.DeepEqual(sa, sb) {
			t.Errorf("config %d: stats differ:\n%+v\n%+v", i, sa, sb)
		}
		for w := range la {
			if !slices.Equal(la[w], lb[w]) {
				t.Errorf("config %d: worker %d's steps differ", i, w)
			}
		}
		t.Logf("config %d: %d steps, %d events stepping, %d with fast-forward; %d preemptions, %d evictions, %d timed out, %d cached tokens; %d steady runs behind a stuck front", i, sa.Steps, stepping, events, sa.Preemptions, sa.Evictions, sa.TimedOut, sa.CachedTokens, stuck)
		if events >= stepping {
			t.Errorf("config %d: fast-forward saved no events", i)
		}
		if (i == 10 || i == 11) && (sa.TimedOut == 0 || sa.Completed == 0) {
			t.Errorf("config %d should time some requests out and complete others: %+v", i, sa)
		}
		if i == 1 && (sa.Preemptions == 0 || sa.CachedTokens == 0 || stuck == 0) {
			t.Errorf("config %d should preempt, hit, and run steady steps behind a front that does not fit (%d): %+v", i, stuck, sa)
		}
		if i == 25 && (sa.TimedOut == 0 || sa.Completed == 0) {
			t.Errorf("config %d (disaggregated, SGLang) should time some requests out and complete others: %+v", i, sa)
		}
		if i == 22 && (sa.TimedOut == 0 || sa.Completed == 0 || sa.Preemptions == 0) {
			t.Errorf("config %d (disaggregated) should time some requests out, complete others, and preempt: %+v", i, sa)
		}
		if i == 16 && (sa.Evictions == 0 || sa.CachedTokens == 0) || i == 17 && sa.Preemptions == 0 || i == 20 && (sa.TimedOut == 0 || sa.Completed == 0) {
			t.Errorf("config %d (SGLang) should evict and hit, retract, or time some requests out and complete others: %+v", i, sa)
		}
	}
}

// An SGLang decode server keeps back tokens for the decodes of the
// requests it holds (engine.preallocate) and so retracts none on the
// trace above: here replies longer than that reserve make it retract, and
// fast-forward still gives what stepping gives.
func TestFastForwardSGLangDecodeRetracts(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}
	var reqs []*trace.Request
	for i := range 8 {
		reqs = append(reqs, req(string(rune('a'+i)), time.Duration(i)*20*ms, 200, 1000))
	}
	cfg := Config{Workers: 3, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 3000}}
	a, sa, _ := runWith(t, cfg, cost, 1, reqs, false)
	b, _, _ := runWith(t, cfg, cost, 1, reqs, true)
	c, _, _ := runPlain(t, cfg, cost, 1, reqs)
	if a != b || a != c {
		t.Error("records differ with fast-forward")
	}
	if sa.Preemptions == 0 || sa.Completed != len(reqs) {
		t.Errorf("want retractions and every request completed: %+v", sa)
	}
}
