package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// statsGolden runs stats with args and compares stdout with a golden file.
func statsGolden(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, stderr, err := opaltrace(t, append([]string{"stats"}, args...)...)
	if err != nil {
		t.Fatalf("stats %v: %v\n%s", args, err, stderr)
	}
	golden.Check(t, filepath.Join("testdata", name+".golden"), []byte(out))
	return out
}

func TestStatsGoldenVLLM(t *testing.T) {
	path := shareddata.Path(t, lambdaLabs)
	out := statsGolden(t, "stats_lambdalabs", "--percentiles", "50,90,99,99.9", "--goodput", "ttft:62.5", path)
	for _, want := range []string{"ITL unit:                                chunk", "Mean tokens per chunk:", "not computed (requests have no arrival"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	statsGolden(t, "stats_er0080", shareddata.Path(t, "formats/vllm_bench_serve/er0080_vllm-benchmarking_vllm_sweep_v0.25.1_run0.json"))
}

// TestStatsGoldenMooncakeCacheCurve prints the cache curve of the real
// Mooncake conversation trace; the curve's exactness is tested in analyze
// against brute-force LRU.
func TestStatsGoldenMooncakeCacheCurve(t *testing.T) {
	path := shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl")
	out := statsGolden(t, "stats_mooncake_cache_curve", "--cache-curve", path)
	if !strings.Contains(out, "not any engine's behaviour") {
		t.Error("the cache curve does not say it is the trace's theoretical reuse")
	}
}

// TestStatsGoodputLambdaLabs: the file has no per-request E2E, so TTFT is
// the only SLO goodput can use. vLLM counts a request good when TTFT ≤ SLO
// (6 of the file's 10 ttfts are ≤ 62.5 ms); the test counts them itself.
func TestStatsGoodputLambdaLabs(t *testing.T) {
	path := shareddata.Path(t, lambdaLabs)
	out, _, err := opaltrace(t, "stats", "--json", "--goodput", "ttft:62.5", path)
	if err != nil {
		t.Fatal(err)
	}
	var runs []map[string]any
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		TTFTs    []float64 `json:"ttfts"`
		Duration float64   `json:"duration"`
	}
	b, _ := os.ReadFile(path)
	json.Unmarshal(b, &raw)
	good := 0
	for _, v := range raw.TTFTs {
		if 62.5/1000 >= v {
			good++
		}
	}
	if runs[0]["good_requests"] != float64(good) || runs[0]["request_goodput"] != float64(good)/raw.Duration {
		t.Errorf("goodput %v (%v good), want %d good over %v s", runs[0]["request_goodput"], runs[0]["good_requests"], good, raw.Duration)
	}
	if _, _, err := opaltrace(t, "stats", "--goodput", "e2el:100", path); err != nil {
		t.Fatal(err)
	}
	out, _, _ = opaltrace(t, "stats", "--json", "--goodput", "e2el:100", path)
	if !strings.Contains(out, `"goodput_missing"`) {
		t.Error("goodput on E2E, which the file lacks, was not reported as missing")
	}
}

// simulatedParquet writes a small dataset with every server-side column,
// two workers and tier hits, as a replay or an SGLang server log has them.
func simulatedParquet(t *testing.T, scale float64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sim.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		q := 0.001 * float64(i%7)
		if i%50 == 0 {
			q = 0.5 // a few requests wait long in the queue
		}
		prefill := 0.02 + 0.0001*float64(i%13)
		ttft := (q + prefill + 0.003) * scale
		itl := []float64{0.01 * scale, 0.011 * scale, 0.012 * scale}
		r := &trace.Request{
			RequestID: "r" + string(rune('a'+i%26)), Run: "sim", Source: "simulated", Status: trace.StatusOK,
			Worker: []string{"w0", "w1"}[i%2], Model: "m",
			Arrival: trace.Some(trace.TimeFromSeconds(float64(i) * 0.05)), TTFTSec: trace.Some(ttft),
			ITLSec: itl, E2ESec: trace.Some(ttft + 0.033*scale),
			InputTokens: trace.Some(int64(1000)), OutputTokens: trace.Some(int64(4)),
			CachedTokens: trace.Some(int64(i % 3 * 256)), DeviceHitTokens: trace.Some(int64(i % 3 * 128)), HostHitTokens: trace.Some(int64(i % 3 * 128)),
			QueueSec: trace.Some(q), PrefillSec: trace.Some(prefill),
			ITLUnit: trace.ITLToken, E2EBasis: trace.E2ELastToken, TTFTBasis: trace.TTFTFirstChunk, OutputTokensSource: trace.OutputRequested,
		}
		if i == 7 {
			r.Status, r.TTFTSec, r.ITLSec, r.E2ESec = trace.StatusRejected, trace.Opt[float64]{}, nil, trace.Opt[float64]{}
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.SetRuns([]trace.Run{{Name: "sim", Source: "simulated"}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func TestStatsSectionsOnServerSideData(t *testing.T) {
	path := simulatedParquet(t, 1)
	out, stderr, err := opaltrace(t, "stats", "--series", "--goodput", "ttft:100", "--percentiles", "50,99", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{
		"  rejected:",
		"Peak concurrent requests:",
		"Request goodput (req/s):",
		"TTFT decomposition by TTFT percentile",
		"p99-100",
		"Cached prompt tokens:",
		"host ",
		"Per second",
		"Steady state (detected, not applied)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
	// The slowest 1% are the long queue waits: queue must dominate there.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "p99-100") && !strings.HasSuffix(line, "queue") {
			t.Errorf("p99-100 band not dominated by the queue: %s", line)
		}
		if strings.HasPrefix(line, "p0-50") && !strings.HasSuffix(line, "prefill") {
			t.Errorf("p0-50 band not dominated by prefill: %s", line)
		}
	}
	out, _, err = opaltrace(t, "stats", "--json", "--by", "worker", "--trim-warmup", "2", "--trim-cooldown", "1", path)
	if err != nil {
		t.Fatal(err)
	}
	var groups []map[string]any
	if err := json.Unmarshal([]byte(out), &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0]["run"] != "worker=w0" || groups[1]["run"] != "worker=w1" {
		t.Fatalf("--by worker gave %d groups", len(groups))
	}
	for _, g := range groups {
		if g["duration_basis"] != "trimmed" || g["trim"] == nil || g["ttft_decomposition"] == nil || g["kv_cache"] == nil {
			t.Errorf("group %v lacks trimming or sections", g["run"])
		}
	}
	// The text adds the load across workers: max over mean requests.
	out, _, err = opaltrace(t, "stats", "--json", "--by", "worker", path)
	if err != nil {
		t.Fatal(err)
	}
	groups = nil
	if err := json.Unmarshal([]byte(out), &groups); err != nil {
		t.Fatal(err)
	}
	r0, r1 := groups[0]["requests"].(float64), groups[1]["requests"].(float64)
	text, _, err := opaltrace(t, "stats", "--by", "worker", path)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%-40s %-10s\n", "Imbalance by requests (max/mean):", fmt.Sprintf("%.3f", max(r0, r1)/((r0+r1)/2)))
	if !strings.Contains(text, "Load across workers") || !strings.Contains(text, want) {
		t.Errorf("stats --by worker lacks %q:\n%s", want, text)
	}
	if _, _, err := opaltrace(t, "stats", "--by", "color", path); err == nil {
		t.Error("--by color accepted")
	}
}

func TestStatsCompare(t *testing.T) {
	a, same, slower := simulatedParquet(t, 1), simulatedParquet(t, 1), simulatedParquet(t, 1.5)
	verdicts := func(args ...string) map[string]any {
		out, stderr, err := opaltrace(t, append([]string{"stats", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var cs []struct {
			Metrics []map[string]any `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(out), &cs); err != nil || len(cs) != 1 {
			t.Fatalf("%v: %d comparisons of one run each\n%s", err, len(cs), out)
		}
		v := map[string]any{}
		for _, m := range cs[0].Metrics {
			v[m["metric"].(string)] = m["verdict"]
		}
		return v
	}
	// Against its copy nothing is outside; the tails of TTFT and E2E (2%
	// long queue waits in 400 requests) are too wide to call within 5%.
	v := verdicts("--compare", same, a)
	if v["itl"] != "within" || v["tpot"] != "within" || v["ttft"] == "outside" || v["e2el"] == "outside" {
		t.Errorf("a dataset against its copy: %v", v)
	}
	if v := verdicts("--compare", slower, a); v["ttft"] != "outside" || v["itl"] != "outside" {
		t.Errorf("a dataset against 1.5× slower: %v", v)
	}
	out, _, err := opaltrace(t, "stats", "--compare", slower, "--margin", "60%", a)
	if err != nil || !strings.Contains(out, "ITL: within") || strings.Contains(out, "outside") {
		t.Errorf("a 60%% margin does not cover a 50%% slowdown: %v\n%s", err, out)
	}
}

// TestStatsLowMemoryEqualsInMemory runs the summary by passes through the
// command line, by run and by worker, with goodput: every key it prints
// has the in-memory summary's value, and it prints every key but the
// sections that need the requests in memory.
func TestStatsLowMemoryEqualsInMemory(t *testing.T) {
	path := simulatedParquet(t, 1)
	for _, by := range []string{"run", "worker"} {
		args := []string{"stats", "--json", "--by", by, "--goodput", "ttft:30", "--percentiles", "50,99", path}
		outMem, stderr, err := opaltrace(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		outLow, stderr, err := opaltrace(t, append([]string{"stats", "--low-memory"}, args[1:]...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var mem, low []map[string]any
		if err := json.Unmarshal([]byte(outMem), &mem); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(outLow), &low); err != nil {
			t.Fatal(err)
		}
		if len(low) != len(mem) || len(mem) != map[string]int{"run": 1, "worker": 2}[by] {
			t.Fatalf("by %s: %d summaries by passes, %d in memory", by, len(low), len(mem))
		}
		for i := range mem {
			if low[i]["passes"] == nil {
				t.Errorf("by %s: no passes counted", by)
			}
			delete(low[i], "passes")
			if nc, _ := low[i]["not_computed"].([]any); len(nc) != 3 {
				t.Errorf("by %s: not_computed %v", by, low[i]["not_computed"])
			}
			delete(low[i], "not_computed")
			for k, v := range low[i] {
				if !reflect.DeepEqual(v, mem[i][k]) {
					t.Errorf("by %s: %s: by passes %v, in memory %v", by, k, v, mem[i][k])
				}
			}
			var missing []string
			for k := range mem[i] {
				if _, ok := low[i][k]; !ok {
					missing = append(missing, k)
				}
			}
			slices.Sort(missing)
			if want := []string{"kv_cache", "steady_state", "ttft_decomposition"}; !slices.Equal(missing, want) {
				t.Errorf("by %s: by passes lacks %v, want %v", by, missing, want)
			}
		}
	}
}

const (
	aiperfFile   = "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export.jsonl"
	guideLLMFile = "formats/guidellm/danielkorat_guidellm-bench_Qwen_Qwen3-4B-Thinking-2507_tp2_quant-fp8_benchmarks.json"
)

// TestStatsGoldenClientTools prints the default view and the source's own
// view of the real AIPerf and GuideLLM files; analyze's AsSource tests
// check the source view against the numbers the tools printed.
func TestStatsGoldenClientTools(t *testing.T) {
	a, g := shareddata.Path(t, aiperfFile), shareddata.Path(t, guideLLMFile)
	statsGolden(t, "stats_aiperf", "--percentiles", "50,90,99", a)
	statsGolden(t, "stats_aiperf_as_source", "--as-source", a)
	statsGolden(t, "stats_guidellm", "--percentiles", "50,90,99", g)
	statsGolden(t, "stats_guidellm_as_source", "--as-source", g)
	// vLLM OTel spans carry the server's queue and prefill times.
	out := statsGolden(t, "stats_otel_vllm_spans", "--percentiles", "50,99", shareddata.Path(t, "formats/otel/anud18_qwen36-vllm-aiperf-benchmark_sample_vllm_spans.jsonl"))
	if !strings.Contains(out, "TTFT decomposition") {
		t.Error("no TTFT decomposition for vLLM spans with queue and prefill times")
	}
	if _, _, err := opaltrace(t, "stats", "--as-source", shareddata.Path(t, lambdaLabs)); err == nil {
		t.Error("--as-source on a vllm-bench file succeeded; it has no source view")
	}
}
