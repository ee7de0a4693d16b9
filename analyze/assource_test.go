package analyze

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

func loadFormat(t *testing.T, path string) ([]trace.Run, []*trace.Request) {
	t.Helper()
	var reqs []*trace.Request
	runs, _, err := ingest.Files([]string{path}, ingest.Options{},
		func(r *trace.Request) error { reqs = append(reqs, r.Clone()); return nil },
		func(e *ingest.SyntaxError) { t.Errorf("%v", e) })
	if err != nil {
		t.Fatal(err)
	}
	return runs, reqs
}

// near is agreement to a relative 1e-9 (values that went through a unit
// conversion in ingest, ms → s → ms, differ in the last bits).
func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

func metricOf(v *SourceView, name string) *SourceMetric {
	for i := range v.Metrics {
		if v.Metrics[i].Name == name {
			return &v.Metrics[i]
		}
	}
	return nil
}

// TestAsSourceAIPerf reproduces every statistic of every latency metric and
// the duration and throughputs of AIPerf's own aggregate export of the
// real fixture, from the per-record export.
func TestAsSourceAIPerf(t *testing.T) {
	dir := "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export"
	runs, reqs := loadFormat(t, shareddata.Path(t, dir+".jsonl"))
	raw, err := os.ReadFile(shareddata.Path(t, dir+"_aiperf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var agg struct {
		Records map[string]map[string]any `json:"records"`
	}
	if err := json.Unmarshal(raw, &agg); err != nil {
		t.Fatal(err)
	}
	v, err := AsSource(runs[0], reqs)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range []string{"ttft", "inter_token_latency", "inter_chunk_latency", "request_latency"} {
		want, got := agg.Records[name], metricOf(v, name)
		if got == nil {
			t.Errorf("%s: not in the view", name)
			continue
		}
		fields := map[string]float64{"avg": got.Mean, "std": got.Std, "min": got.Min, "max": got.Max, "count": float64(got.Count)}
		for _, p := range got.Percentiles {
			fields[p.Key] = p.Value
		}
		for k, g := range fields {
			w, ok := want[k].(float64)
			if !ok {
				t.Errorf("%s.%s: AIPerf has no such field", name, k)
				continue
			}
			checked++
			if !near(g, w) {
				t.Errorf("%s.%s = %v, AIPerf printed %v", name, k, g, w)
			}
		}
	}
	for _, sv := range v.Values {
		w, ok := agg.Records[sv.Name]["avg"].(float64)
		if !ok {
			t.Errorf("%s: AIPerf has no such record", sv.Name)
			continue
		}
		checked++
		if !near(sv.Value, w) {
			t.Errorf("%s = %v, AIPerf printed %v", sv.Name, sv.Value, w)
		}
	}
	if want := agg.Records["request_count"]["avg"].(float64); float64(v.N) != want {
		t.Errorf("request_count %d, AIPerf %v", v.N, want)
	}
	if checked != 4*13+5 {
		t.Errorf("checked %d fields", checked)
	}
}

// guideLLMDist is one of GuideLLM's printed DistributionSummary objects.
type guideLLMDist struct {
	Mean, Median, Mode, Variance, Min, Max float64
	StdDev                                 float64 `json:"std_dev"`
	Count                                  int
	TotalSum                               float64 `json:"total_sum"`
	Percentiles                            map[string]float64
}

// guideLLMReproduced are the metrics of GuideLLM's benchmarks[].metrics
// that --as-source reproduces; the rest are in GuideLLMNotReproduced.
var guideLLMReproduced = []string{"requests_per_second", "request_concurrency", "request_latency",
	"request_streaming_iterations_count", "output_tokens_per_second", "tokens_per_second",
	"output_tokens_per_iteration", "iter_tokens_per_iteration",
	"prompt_token_count", "output_token_count", "total_token_count", "time_to_first_token_ms",
	"time_per_output_token_ms", "inter_token_latency_ms", "prompt_tokens_per_second"}

// TestAsSourceGuideLLM reproduces every statistic GuideLLM printed for the
// successful requests of the real fixture — its measurement window, its
// weights, its sample-value percentiles — field by field, checks that
// every other metric of the file is named as not reproduced, and that the
// default view differs where the rules do (numpy-linear percentiles over
// every successful request).
func TestAsSourceGuideLLM(t *testing.T) {
	if guideLLMOriginKey != ingest.GuideLLMOriginKey {
		t.Fatalf("origin key %q, ingest writes %q", guideLLMOriginKey, ingest.GuideLLMOriginKey)
	}
	path := shareddata.Path(t, "formats/guidellm/danielkorat_guidellm-bench_Qwen_Qwen3-4B-Thinking-2507_tp2_quant-fp8_benchmarks.json")
	runs, reqs := loadFormat(t, path)
	raw, _ := os.ReadFile(path)
	var file struct {
		Benchmarks []struct {
			Metrics map[string]json.RawMessage `json:"metrics"`
		} `json:"benchmarks"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	metrics := file.Benchmarks[0].Metrics
	v, err := AsSource(runs[0], reqs)
	if err != nil {
		t.Fatal(err)
	}
	// Every metric in the file is either reproduced or named.
	named := map[string]bool{}
	for _, n := range GuideLLMNotReproduced {
		for _, k := range strings.Split(n.Name, ", ") {
			named[k] = true
		}
	}
	for _, k := range guideLLMReproduced {
		named[k] = true
	}
	named["request_totals"] = true
	for k := range metrics {
		if !named[k] {
			t.Errorf("GuideLLM metric %s neither reproduced nor named", k)
		}
	}
	var totals map[string]float64
	if err := json.Unmarshal(metrics["request_totals"], &totals); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, sv := range v.Values {
		k, ok := strings.CutPrefix(sv.Name, "request_totals.")
		if !ok {
			continue
		}
		checked++
		if sv.Value != totals[k] {
			t.Errorf("%s = %v, GuideLLM printed %v", sv.Name, sv.Value, totals[k])
		}
	}
	for _, name := range guideLLMReproduced {
		var st map[string]guideLLMDist
		if err := json.Unmarshal(metrics[name], &st); err != nil {
			t.Fatal(name, err)
		}
		want, got := st["successful"], metricOf(v, name)
		if got == nil {
			t.Errorf("%s not in the view", name)
			continue
		}
		fields := []struct {
			k    string
			g, w float64
		}{{"mean", got.Mean, want.Mean}, {"median", got.Median, want.Median}, {"mode", got.Mode, want.Mode},
			{"variance", got.Variance, want.Variance}, {"std_dev", got.Std, want.StdDev}, {"min", got.Min, want.Min},
			{"max", got.Max, want.Max}, {"count", float64(got.Count), float64(want.Count)}, {"total_sum", got.TotalSum, want.TotalSum}}
		for _, p := range got.Percentiles {
			w, ok := want.Percentiles[p.Key]
			if !ok {
				t.Errorf("%s: GuideLLM has no %s", name, p.Key)
			}
			fields = append(fields, struct {
				k    string
				g, w float64
			}{p.Key, p.Value, w})
		}
		for _, f := range fields {
			checked++
			// Bit for bit: the view repeats GuideLLM's float operations.
			if f.g != f.w {
				t.Errorf("%s.%s = %v, GuideLLM printed %v", name, f.k, f.g, f.w)
			}
		}
	}
	if want := 4 + len(guideLLMReproduced)*(9+11); checked != want {
		t.Errorf("checked %d fields, want %d", checked, want)
	}
	// Without the iteration counts (files before GuideLLM 0.4) the five
	// iteration metrics are named, not computed from a made-up 0.
	var stripped []*trace.Request
	for _, r := range reqs {
		c := r.Clone()
		c.TokenEvents = trace.Opt[int64]{}
		stripped = append(stripped, c)
	}
	v2, err := AsSource(runs[0], stripped)
	if err != nil {
		t.Fatal(err)
	}
	if len(v2.Metrics) != len(v.Metrics)-len(guideLLMIterationMetrics) || len(v2.NotReproduced) != len(GuideLLMNotReproduced)+len(guideLLMIterationMetrics) {
		t.Errorf("without token_events: %d metrics, %d not reproduced", len(v2.Metrics), len(v2.NotReproduced))
	}
	for _, n := range guideLLMIterationMetrics {
		if metricOf(v2, n.Name) != nil {
			t.Errorf("without token_events: %s computed", n.Name)
		}
	}
	// The default view: every successful request, numpy-linear.
	s := Summarize(runs[0], reqs)
	var ttft map[string]guideLLMDist
	_ = json.Unmarshal(metrics["time_to_first_token_ms"], &ttft)
	if s.TTFT.N() != 30 || near(s.TTFT.Percentile(90)*1000, ttft["successful"].Percentiles["p90"]) {
		t.Errorf("default view: %d TTFTs, p90 %v ms equals GuideLLM's window/sample-value p90", s.TTFT.N(), s.TTFT.Percentile(90)*1000)
	}
	if _, err := AsSource(trace.Run{Source: "mooncake"}, nil); err == nil {
		t.Error("a source view for mooncake")
	}
}
