package replay

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// readMooncake parses a Mooncake trace JSONL minimally ({"timestamp" ms,
// "input_length", "output_length", "hash_ids"} with 512-token blocks), so
// that this package's tests do not depend on package ingest.
func readMooncake(tb testing.TB, path string) []*trace.Request {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var reqs []*trace.Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for line := 1; sc.Scan(); line++ {
		var row struct {
			Timestamp    float64 `json:"timestamp"`
			InputLength  int64   `json:"input_length"`
			OutputLength int64   `json:"output_length"`
			HashIDs      []int64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			tb.Fatalf("%s:%d: %v", path, line, err)
		}
		r := &trace.Request{
			RequestID:    "mooncake/" + strconv.Itoa(line-1),
			Source:       "mooncake",
			Status:       trace.StatusOK,
			InputTokens:  trace.Some(row.InputLength),
			OutputTokens: trace.Some(row.OutputLength),
			BlockSize:    trace.Some(int64(512)),
			HashIDs:      row.HashIDs,
			Arrival:      trace.Some(trace.TimeFromSeconds(row.Timestamp / 1000)),
		}
		r.SetPos(path, line)
		reqs = append(reqs, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return reqs
}

// llama8BOnH100 is the roofline cost of Llama-3.1-8B on one H100 and its
// KV capacity in 16-token blocks at 90 % memory utilisation.
func llama8BOnH100(tb testing.TB) (model.StepModel, int64) {
	tb.Helper()
	return llama8BOn(tb, "h100")
}

// llama8BOn is llama8BOnH100 on another GPU preset.
func llama8BOn(tb testing.TB, gpu string) (model.StepModel, int64) {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	llm, err := model.LoadConfig(filepath.Join(filepath.Dir(file), "..", "samples", "models", "llama-3.1-8b", "config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	hw, err := model.HardwareByName(gpu)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := model.NewDeployment(hw, llm, 1)
	if err != nil {
		tb.Fatal(err)
	}
	tokens, err := d.KVCacheTokens(0.9)
	if err != nil {
		tb.Fatal(err)
	}
	return d, tokens / 16
}

// The first 2,000 Mooncake conversation requests on 4 workers, under the
// validator (without the O(blocks) cache recount per step): every
// request completes, requests of a conversation share prefixes, and the
// run is deterministic.
func TestMooncakeHead(t *testing.T) {
	t.Parallel()
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:2000]
	cost, blocks := llama8BOnH100(t)
	cfg := Config{Workers: 4}
	run := func() (string, Stats) {
		var all []*trace.Request
		v := newValidator(t, cfg, reqs)
		st, err := Run(cfg, cost, blocks, reqs, func(r *trace.Request) error {
			all = append(all, r)
			return v.output(r)
		})
		if err != nil {
			t.Fatal(err)
		}
		v.finish(all)
		return dump(all), st
	}
	a, st := run()
	b, _ := run()
	if a != b {
		t.Error("two replays of the Mooncake head differ")
	}
	if st.Completed != len(reqs) || st.CachedTokens == 0 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d blocks/worker; stats %+v; prefix hit rate %.3f", blocks, st, float64(st.CachedTokens)/float64(st.PromptTokens))
}

// BenchmarkReplayMooncake replays the whole Mooncake conversation trace
// (12,031 requests) on 16 workers of Llama-3.1-8B on H100.
func BenchmarkReplayMooncake(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	cfg := Config{Workers: 16}
	var st Stats
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		var err error
		st, err = Run(cfg, cost, blocks, reqs, func(*trace.Request) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(st.Steps), "steps/op")
	b.ReportMetric(float64(st.Events), "events/op")
	b.ReportMetric(float64(st.End)/float64(time.Second), "sim-s/op")
	b.ReportMetric(float64(st.Evictions), "evictions/op")
	b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "hit-rate")
}

// TestEngineworkRejectsBadCounts runs scripts/enginework, which times
// BenchmarkReplayMooncakeRouters, with rounds and iterations that are not
// whole numbers above 0: it must say so and exit 2 before it builds or
// runs anything.
func TestEngineworkRejectsBadCounts(t *testing.T) {
	for _, args := range [][]string{
		{"--time", "0", "llm_d"},
		{"--time", "x"},
		{"--time", "3", "--iterations", "0"},
		{"--time", "3", "--against", "HEAD", "--iterations", "2.5", "llm_d"},
	} {
		cmd := exec.Command("bash", append([]string{filepath.Join("..", "scripts", "enginework")}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("enginework %v: %v, want exit status 2; output:\n%s", args, err, out)
			continue
		}
		if want := "scripts/enginework: --time and --iterations need whole numbers above 0\n"; string(out) != want {
			t.Errorf("enginework %v printed %q, want %q", args, out, want)
		}
	}
}

// BenchmarkReplayMooncakeRouters is BenchmarkReplayMooncake through each
// router (an oracle view), to compare their engine time with
// round-robin's; round_robin_online is round-robin routed as the
// load-aware routers must be, at each arrival, not before the replay (so
// the engine cannot tell in advance which prefix blocks meet on a
// worker, and indexes every block that a request not arrived yet, or one
// on the same worker, shares: onlineSharing). autoscale is
// least_requests with TestAutoscaleAzure's queue-depth HPA (target 2,
// 1–16 replicas, 16 at the start), the fleet sized as the load goes.
// disaggregated is round-robin over 4 prefill workers, 12 decode workers
// taking their KV over H100 nodes' network (40 GB/s, 0.4 ms), Llama-3.1-8B's
// 131,072 bytes a token. llm_d_precise is llm_d with its precise prefix
// scorer (router_config.prefix_scorer). recorded_NAME replays router NAME's placement,
// read from its records (not timed), through the recorded router: the
// same replay as NAME's without its decisions, so that NAME's time over
// it is what its own decisions cost, and its time over round-robin's
// what the placement costs the engine (the recorded router places each
// request as it arrives, as NAME does, so its engine indexes shared
// blocks as NAME's does). no_prefix_cache_NAME is NAME with the
// workers' prefix caching off (enable_prefix_caching: false): NAME
// deciding by its rules (its choices differ where the workers' loads
// do) without the cache's hashing, lookups, hits, promotions and
// evictions of shared blocks, so that its time over
// no_prefix_cache_round_robin's is what the decisions and the placement
// cost apart from the prefix cache (NAME a router that decides by what
// it sent itself, not by the workers' KV events, which a worker without
// prefix caching does not publish).
func BenchmarkReplayMooncakeRouters(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	names := slices.DeleteFunc(routerNames(), func(s string) bool { return s == RouterRecorded }) // the trace names no workers
	names = append(names, "round_robin_online", "autoscale", "disaggregated", "llm_d_precise")
	for _, s := range []string{RouterRoundRobin, RouterSGLang, RouterLLMD, RouterDynamo, RouterMaxPrefix, "llm_d_precise"} {
		names = append(names, "recorded_"+s)
	}
	for _, s := range []string{RouterRoundRobin, RouterSGLang, RouterLLMD} {
		names = append(names, "no_prefix_cache_"+s)
	}
	// routerOf is the router configuration a name stands for.
	routerOf := func(name string) Config {
		cfg := Config{Workers: 16, Router: name}
		if name == "llm_d_precise" {
			cfg.Router, cfg.RouterConfig.PrefixScorer = RouterLLMD, LLMDPrecise
		}
		return cfg
	}
	for _, name := range names {
		b.Run(name, func(b *testing.B) {
			cfg := routerOf(name)
			var opts Options
			reqs := reqs
			if by, ok := strings.CutPrefix(name, "no_prefix_cache_"); ok {
				off := false
				cfg = routerOf(by)
				cfg.Scheduler.EnablePrefixCaching = &off
			}
			if by, ok := strings.CutPrefix(name, "recorded_"); ok {
				var out []*trace.Request
				if _, err := Run(routerOf(by), cost, blocks, reqs, func(r *trace.Request) error {
					out = append(out, r)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				cfg, reqs = Config{Workers: 16, Router: RouterRecorded}, placedAs(b, reqs, out)
				// The set-up's replay leaves the heap grown: its pages
				// go back, so that the timed replays fault theirs in
				// as the other configurations' do.
				out = nil
				debug.FreeOSMemory()
			}
			switch name {
			case "round_robin_online":
				cfg.Router, opts.test.noPreRoute = RouterRoundRobin, true
			case "disaggregated":
				cfg.Router = RouterRoundRobin
				cfg.Disaggregation = DisaggregationConfig{PrefillWorkers: 4, KVBytesPerToken: 131072, TransferGBps: 40, TransferLatencySec: 0.0004}
			case "autoscale":
				cfg.Router = RouterLeastRequests
				cfg.Autoscale = AutoscaleConfig{
					Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 16,
					ScaleDownStabilizationSec: ptr(60), ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2,
				}
			}
			var st Stats
			cpu0 := cpuTime()
			for b.Loop() {
				var err error
				st, err = RunInputs(cfg, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, opts)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(st.Events), "events/op")
			b.ReportMetric(float64(st.Steps), "steps/op")
			b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "hit-rate")
			if name == "autoscale" {
				b.ReportMetric(st.GPUHours, "gpu-hours")
			}
		})
	}
}
