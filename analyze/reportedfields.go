package analyze

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// ReportedFields returns the summary run's source reported
// (trace.Run.Reported) under vLLM's keys: "completed", "failed",
// "duration", "request_throughput", "output_throughput",
// "total_token_throughput", "total_input_tokens", "total_output_tokens",
// and the latency statistics in milliseconds as "mean_ttft_ms",
// "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms" (metrics ttft, tpot, itl,
// e2el). vLLM's and SGLang's summaries are returned as written (their
// keys are these, or read as these by ReportedStats); the other sources
// that report a summary of their own are translated, each statistic only
// where the source computes it as vLLM does:
//
//   - AIPerf's profile_export_aiperf.json (records by metric, each with
//     its unit): ttft; inter_token_latency, (latency − ttft)/(osl − 1)
//     per request, is vLLM's TPOT; inter_chunk_latency, the pooled gaps
//     between chunks, vLLM's ITL; request_latency the E2E; std is the
//     population's, as vLLM's.
//   - llmperf's *_summary.json (results_<metric>_s_{mean,quantiles_pNN}
//     in seconds): ttft and end_to_end_latency. Its inter_token_latency_s
//     counts the TTFT among the gaps (trace-formats.md §6.4) and its
//     stddev is the sample's, so neither is vLLM's and both are left out.
//   - inference-perf's stage_N_lifecycle_metrics.json (successes.latency
//     distributions in seconds): time_to_first_token; time_per_output_token,
//     (last token − first token)/(output tokens − 1), vLLM's TPOT;
//     request_latency the E2E. Its inter_token_latency pools the gaps
//     between re-tokenized tokens, those inside a chunk included, which is
//     not vLLM's per-chunk ITL: left out.
//
// A field the source did not report is absent; nil when run reported
// nothing that can be read.
func ReportedFields(run trace.Run) map[string]any {
	if len(run.Reported) == 0 {
		return nil
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(run.Reported, &raw) != nil {
		return nil
	}
	switch {
	case run.Source == "aiperf" && raw["records"] != nil:
		return aiperfFields(raw["records"])
	case run.Source == "llmperf":
		return llmperfFields(raw)
	case run.Source == "inference-perf" && raw["successes"] != nil:
		return inferencePerfFields(run.Reported)
	}
	var rep map[string]any
	if json.Unmarshal(run.Reported, &rep) != nil {
		return nil
	}
	return rep
}

// fields collects translated values, leaving out what is not a finite
// number.
type fields map[string]any

func (f fields) set(key string, v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		f[key] = v
	}
}

// setNum sets key from a JSON number (a string holding one, as llmperf
// writes some, too).
func (f fields) setNum(key string, m json.RawMessage) {
	if v, ok := jsonNumber(m); ok {
		f.set(key, v)
	}
}

func (f fields) orNil() map[string]any {
	if len(f) == 0 {
		return nil
	}
	return f
}

func jsonNumber(m json.RawMessage) (float64, bool) {
	var v any
	if len(m) == 0 || json.Unmarshal(m, &v) != nil {
		return 0, false
	}
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// msPer is how many milliseconds one of a source's time units is.
var msPer = map[string]float64{"ns": 1e-6, "us": 1e-3, "ms": 1, "sec": 1e3, "s": 1e3}

func aiperfFields(records json.RawMessage) map[string]any {
	var recs map[string]map[string]json.RawMessage
	if json.Unmarshal(records, &recs) != nil {
		return nil
	}
	f := fields{}
	unitOf := func(r map[string]json.RawMessage) string {
		var u string
		json.Unmarshal(r["unit"], &u)
		return u
	}
	for _, m := range []struct{ record, metric string }{
		{"ttft", "ttft"}, {"inter_token_latency", "tpot"}, {"inter_chunk_latency", "itl"}, {"request_latency", "e2el"},
	} {
		r := recs[m.record]
		scale, ok := msPer[unitOf(r)]
		if r == nil || !ok {
			continue
		}
		for _, s := range []struct{ from, to string }{
			{"avg", "mean"}, {"p50", "median"}, {"std", "std"}, {"p1", "p1"}, {"p5", "p5"}, {"p25", "p25"},
			{"p75", "p75"}, {"p90", "p90"}, {"p95", "p95"}, {"p99", "p99"},
		} {
			if v, ok := jsonNumber(r[s.from]); ok {
				f.set(s.to+"_"+m.metric+"_ms", v*scale)
			}
		}
	}
	for _, c := range []struct{ record, unit, key string }{
		{"request_count", "requests", "completed"}, {"error_request_count", "requests", "failed"},
		{"benchmark_duration", "sec", "duration"}, {"request_throughput", "requests/sec", "request_throughput"},
		{"output_token_throughput", "tokens/sec", "output_throughput"},
		{"total_isl", "tokens", "total_input_tokens"}, {"total_osl", "tokens", "total_output_tokens"},
	} {
		if r := recs[c.record]; r != nil && unitOf(r) == c.unit {
			f.setNum(c.key, r["avg"])
		}
	}
	return f.orNil()
}

func llmperfFields(raw map[string]json.RawMessage) map[string]any {
	f := fields{}
	for _, m := range []struct{ name, metric string }{{"ttft", "ttft"}, {"end_to_end_latency", "e2el"}} {
		pre := "results_" + m.name + "_s_"
		if v, ok := jsonNumber(raw[pre+"mean"]); ok {
			f.set("mean_"+m.metric+"_ms", v*1000)
		}
		for _, p := range []string{"p25", "p50", "p75", "p90", "p95", "p99"} {
			if v, ok := jsonNumber(raw[pre+"quantiles_"+p]); ok {
				key := p
				if p == "p50" {
					key = "median"
				}
				f.set(key+"_"+m.metric+"_ms", v*1000)
			}
		}
	}
	f.setNum("completed", raw["results_num_completed_requests"])
	f.setNum("failed", raw["results_number_errors"])
	// llmperf's overall output throughput: output tokens of the completed
	// requests over the run's wall time (token_benchmark_ray.py).
	f.setNum("output_throughput", raw["results_mean_output_throughput_token_per_s"])
	if v, ok := jsonNumber(raw["results_num_completed_requests_per_min"]); ok {
		f.set("request_throughput", v/60)
	}
	return f.orNil()
}

func inferencePerfFields(reported []byte) map[string]any {
	var rep struct {
		BenchmarkTime json.RawMessage `json:"benchmark_time_seconds"`
		Successes     struct {
			Count      json.RawMessage                       `json:"count"`
			Latency    map[string]map[string]json.RawMessage `json:"latency"`
			Throughput map[string]json.RawMessage            `json:"throughput"`
			PromptLen  map[string]json.RawMessage            `json:"prompt_len"`
			OutputLen  map[string]json.RawMessage            `json:"output_len"`
		} `json:"successes"`
		Failures struct {
			Count json.RawMessage `json:"count"`
		} `json:"failures"`
	}
	if json.Unmarshal(reported, &rep) != nil {
		return nil
	}
	f := fields{}
	s := rep.Successes
	for _, m := range []struct{ name, metric string }{
		{"time_to_first_token", "ttft"}, {"time_per_output_token", "tpot"}, {"request_latency", "e2el"},
	} {
		for k, v := range s.Latency[m.name] {
			if k == "min" || k == "max" {
				continue
			}
			if x, ok := jsonNumber(v); ok {
				f.set(k+"_"+m.metric+"_ms", x*1000)
			}
		}
	}
	f.setNum("completed", s.Count)
	f.setNum("failed", rep.Failures.Count)
	f.setNum("duration", rep.BenchmarkTime)
	f.setNum("request_throughput", s.Throughput["requests_per_sec"])
	f.setNum("output_throughput", s.Throughput["output_tokens_per_sec"])
	f.setNum("total_token_throughput", s.Throughput["total_tokens_per_sec"])
	f.setNum("total_input_tokens", s.PromptLen["total"])
	f.setNum("total_output_tokens", s.OutputLen["total"])
	return f.orNil()
}
