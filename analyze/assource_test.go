package analyze

import (
	"encoding/json"
	"math"
	"os"
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

// TestAsSourceGuideLLM reproduces GuideLLM's TTFT and request-latency
// summaries of the real fixture — its measurement window, its sample-value
// percentiles — and checks the default view differs where the rules do
// (numpy-linear percentiles over every successful request).
func TestAsSourceGuideLLM(t *testing.T) {
	path := shareddata.Path(t, "formats/guidellm/danielkorat_guidellm-bench_Qwen_Qwen3-4B-Thinking-2507_tp2_quant-fp8_benchmarks.json")
	runs, reqs := loadFormat(t, path)
	raw, _ := os.ReadFile(path)
	type dist struct {
		Successful struct {
			Mean, Median, Min, Max float64
			StdDev                 float64 `json:"std_dev"`
			Count                  int
			Percentiles            map[string]float64
		} `json:"successful"`
	}
	var file struct {
		Benchmarks []struct {
			Metrics struct {
				TTFT    dist `json:"time_to_first_token_ms"`
				Latency dist `json:"request_latency"`
			} `json:"metrics"`
		} `json:"benchmarks"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	printed := map[string]dist{"time_to_first_token_ms": file.Benchmarks[0].Metrics.TTFT, "request_latency": file.Benchmarks[0].Metrics.Latency}
	v, err := AsSource(runs[0], reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"time_to_first_token_ms", "request_latency"} {
		want, got := printed[name].Successful, metricOf(v, name)
		if got == nil {
			t.Fatalf("%s not in the view", name)
		}
		if got.Count != want.Count || !near(got.Mean, want.Mean) || !near(got.Median, want.Median) || !near(got.Std, want.StdDev) ||
			!near(got.Min, want.Min) || !near(got.Max, want.Max) {
			t.Errorf("%s: got n=%d mean=%v median=%v std=%v min=%v max=%v; GuideLLM n=%d mean=%v median=%v std=%v min=%v max=%v",
				name, got.Count, got.Mean, got.Median, got.Std, got.Min, got.Max, want.Count, want.Mean, want.Median, want.StdDev, want.Min, want.Max)
		}
		for _, p := range got.Percentiles {
			if !near(p.Value, want.Percentiles[p.Key]) {
				t.Errorf("%s %s = %v, GuideLLM printed %v", name, p.Key, p.Value, want.Percentiles[p.Key])
			}
		}
	}
	// The default view: every successful request, numpy-linear.
	s := Summarize(runs[0], reqs)
	if s.TTFT.N() != 30 || near(s.TTFT.Percentile(90)*1000, printed["time_to_first_token_ms"].Successful.Percentiles["p90"]) {
		t.Errorf("default view: %d TTFTs, p90 %v ms equals GuideLLM's window/sample-value p90", s.TTFT.N(), s.TTFT.Percentile(90)*1000)
	}
	if _, err := AsSource(trace.Run{Source: "mooncake"}, nil); err == nil {
		t.Error("a source view for mooncake")
	}
}
