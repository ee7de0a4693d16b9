package analyze

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// A SourceView reproduces the summary a client tool printed for a run,
// with the tool's own metric names and rules, from the per-request data
// (stats --as-source). The default view (Summary) applies one rule to
// every source; this one answers "does opaltrace read my tool's file the
// way my tool did?".
type SourceView struct {
	Source  string
	Rule    string // how the source computes its statistics
	Window  string // which requests count, when the source restricts them
	N       int    // requests counted
	Metrics []SourceMetric
	Values  []SourceValue // scalar results (duration, throughputs)
	// NotReproduced names the source's metrics this view cannot rebuild
	// from the per-request record, with the reason.
	NotReproduced []SourceValueNote
}

// A SourceMetric is one distribution as the source summarizes it, in the
// source's unit.
type SourceMetric struct {
	Name        string // the source's name
	Ours        string // the corresponding opaltrace metric
	Unit        string
	Count       int
	Mean, Std   float64
	Mode        float64 // GuideLLM: the value of highest probability
	Variance    float64 // GuideLLM
	TotalSum    float64 // GuideLLM: mean × count
	Min, Max    float64
	Median      float64
	Percentiles []SourcePercentile
}

// A SourcePercentile is one percentile under the source's key.
type SourcePercentile struct {
	Key   string // e.g. "p99" (AIPerf) or "p999" (GuideLLM)
	Value float64
}

// A SourceValue is one scalar the source reports.
type SourceValue struct {
	Name  string
	Value float64
}

// SourceViewNames are the sources AsSource reproduces.
var SourceViewNames = []string{"aiperf", "guidellm"}

// AsSource computes the source's own view of a run's requests.
func AsSource(run trace.Run, reqs []*trace.Request) (*SourceView, error) {
	switch run.Source {
	case "aiperf":
		return aiperfView(reqs), nil
	case "guidellm":
		return guideLLMView(run, reqs)
	}
	return nil, fmt.Errorf("--as-source: no source view for %q runs (have %v); the default view is vLLM's rule", run.Source, SourceViewNames)
}

// aiperfPcts are the percentiles AIPerf's profile_export_aiperf.json has.
var aiperfPcts = []float64{1, 5, 25, 50, 75, 90, 95, 99}

// aiperfView follows AIPerf (trace-formats.md §6.1, verified on its
// fixture): successful records; numpy-linear percentiles, population std;
// its inter_token_latency is per request (latency − ttft)/(osl − 1), our
// TPOT, and its inter_chunk_latency the pooled chunk gaps, our ITL;
// benchmark_duration = max(request end) − min(request start).
func aiperfView(reqs []*trace.Request) *SourceView {
	s := Summarize(trace.Run{}, reqs)
	v := &SourceView{Source: "aiperf", Rule: "numpy-linear percentiles, population std, over successful records", N: s.Completed}
	for _, m := range []struct {
		name, ours string
		d          Dist
	}{{"ttft", "ttft", s.TTFT}, {"inter_token_latency", "tpot", s.TPOT}, {"inter_chunk_latency", "itl", s.ITL}, {"request_latency", "e2el", s.E2E}} {
		if m.d.N() == 0 {
			continue
		}
		sm := SourceMetric{Name: m.name, Ours: m.ours, Unit: "ms", Count: m.d.N(), Mean: m.d.Mean * 1000, Std: m.d.Std * 1000,
			Min: m.d.Values[0] * 1000, Max: m.d.Values[m.d.N()-1] * 1000, Median: m.d.Median() * 1000}
		for _, p := range aiperfPcts {
			sm.Percentiles = append(sm.Percentiles, SourcePercentile{fmt.Sprintf("p%g", p), m.d.Percentile(p) * 1000})
		}
		v.Metrics = append(v.Metrics, sm)
	}
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range reqs {
		if r.OK() && r.Arrival.OK && r.E2ESec.OK {
			a := r.Arrival.V.Seconds()
			first, last = math.Min(first, a), math.Max(last, a+r.E2ESec.V)
		}
	}
	if last > first {
		d := last - first
		v.Values = append(v.Values,
			SourceValue{"benchmark_duration", d},
			SourceValue{"request_throughput", float64(s.Completed) / d},
			SourceValue{"output_token_throughput", float64(s.TotalOutputTokens) / d},
			SourceValue{"total_isl", float64(s.TotalInputTokens)},
			SourceValue{"total_osl", float64(s.TotalOutputTokens)})
	}
	return v
}

// guideLLMKeys are GuideLLM's percentiles, by key.
var guideLLMKeys = []struct {
	key string
	q   float64
}{{"p001", 0.001}, {"p01", 0.01}, {"p05", 0.05}, {"p10", 0.1}, {"p25", 0.25}, {"p50", 0.5}, {"p75", 0.75}, {"p90", 0.9}, {"p95", 0.95}, {"p99", 0.99}, {"p999", 0.999}}

// guideLLMView follows GuideLLM 0.5 (guidellm/schemas/statistics.py and
// benchmark/schemas/generative/metrics.py, GenerativeMetrics.compile): the
// requests of the measurement window — ended at or after
// scheduler_metrics.measure_start_time and started at or before its
// measure_end_time — per status; each metric is a PDF over distinct values
// (weighted where GuideLLM weights: time_per_output_token_ms by output
// tokens, inter_token_latency_ms by output tokens − 1, rates and
// concurrency by the time they held); a percentile q is the first value
// whose cumulative probability reaches q (a sample value, never
// interpolated); mean and variance are probability-weighted; total_sum is
// mean × count. Times are rebuilt as the file's epoch floats (the run's
// exact origin + offsets) because GuideLLM's arithmetic on them rounds at
// 2.4e-7 s. The token rates and per-iteration token counts follow
// GuideLLM's own guess at the stream (iterTimings: token_iterations
// iterations evenly spaced from the first to the last token), from the
// record's StreamEvents and TokenEvents. GuideLLMNotReproduced lists what
// the record cannot give.
// "Ours" names the opaltrace metric; tpot+ is TPOT with the first token
// counted, as GuideLLM's time_per_output_token_ms does.
func guideLLMView(run trace.Run, reqs []*trace.Request) (*SourceView, error) {
	var rep struct {
		Scheduler struct {
			MeasureStart *float64 `json:"measure_start_time"`
			MeasureEnd   *float64 `json:"measure_end_time"`
		} `json:"scheduler_metrics"`
	}
	if err := json.Unmarshal(run.Reported, &rep); err != nil || rep.Scheduler.MeasureStart == nil || rep.Scheduler.MeasureEnd == nil {
		return nil, fmt.Errorf("--as-source: run %s has no scheduler_metrics.measure_start_time/measure_end_time", run.Name)
	}
	origin, err := strconv.ParseFloat(run.Extra[guideLLMOriginKey], 64)
	if err != nil {
		return nil, fmt.Errorf("--as-source: run %s has no exact time origin (Extra %s); re-ingest the GuideLLM file", run.Name, guideLLMOriginKey)
	}
	ms, me := *rep.Scheduler.MeasureStart, *rep.Scheduler.MeasureEnd
	v := &SourceView{
		Source:        "guidellm",
		Rule:          "sample-value percentiles (first value whose cumulative probability reaches q), probability-weighted mean and std; successful requests",
		NotReproduced: GuideLLMNotReproduced,
		Window:        fmt.Sprintf("requests ending at or after the measurement start (%.3f s) and starting at or before its end (%.3f s)", ms-origin, me-origin),
	}
	var g [3][]guideLLMReq // successful, incomplete, errored
	for _, r := range reqs {
		q, ok := newGuideLLMReq(r, origin)
		if !ok || q.end < ms || q.start > me {
			continue
		}
		switch {
		case r.OK():
			g[0] = append(g[0], q)
		case r.Status == trace.StatusAborted:
			g[1] = append(g[1], q)
		default:
			g[2] = append(g[2], q)
		}
	}
	succ := g[0]
	v.N = len(succ)
	v.Values = append(v.Values,
		SourceValue{"request_totals.successful", float64(len(g[0]))},
		SourceValue{"request_totals.incomplete", float64(len(g[1]))},
		SourceValue{"request_totals.errored", float64(len(g[2]))},
		SourceValue{"request_totals.total", float64(len(g[0]) + len(g[1]) + len(g[2]))})
	each := func(f func(q guideLLMReq) vw) []vw {
		out := make([]vw, 0, len(succ))
		for _, q := range succ {
			out = append(out, f(q))
		}
		return out
	}
	var ends []vw
	var ivs []interval
	var prompts []vw
	for _, q := range succ {
		ends = append(ends, vw{q.end, 1})
		ivs = append(ivs, interval{q.start, q.end, 1})
		// prompt_tokens_timing: at the first token (else the end).
		at := q.end
		if q.first.OK {
			at = q.first.V
		}
		prompts = append(prompts, vw{at, q.prompt})
	}
	v.Metrics = append(v.Metrics,
		guideLLMRate("requests_per_second", "req rate", "req/s", ends, &ms, &me),
		guideLLMConcurrency("request_concurrency", "concurrency", "requests", ivs, &ms, &me),
		guideLLMFromValues("request_latency", "e2el", "s", each(func(q guideLLMReq) vw { return vw{q.latency, 1} }), -1),
		guideLLMFromValues("prompt_token_count", "input_tokens", "tokens", each(func(q guideLLMReq) vw { return vw{q.prompt, 1} }), -1),
		guideLLMFromValues("output_token_count", "output_tokens", "tokens", each(func(q guideLLMReq) vw { return vw{q.output, 1} }), -1),
		guideLLMFromValues("total_token_count", "total_tokens", "tokens", each(func(q guideLLMReq) vw { return vw{q.prompt + q.output, 1} }), -1),
		guideLLMFromValues("time_to_first_token_ms", "ttft", "ms", each(func(q guideLLMReq) vw { return vw{q.ttftMs, 1} }), -1),
		guideLLMFromValues("time_per_output_token_ms", "tpot+", "ms", each(func(q guideLLMReq) vw { return vw{q.tpotMs, q.output} }), -1),
		guideLLMFromValues("inter_token_latency_ms", "tpot", "ms", each(func(q guideLLMReq) vw { return vw{q.itlMs, q.itlWeight} }), -1),
		guideLLMRate("prompt_tokens_per_second", "input tok/s", "tok/s", prompts, nil, nil),
	)
	if !guideLLMHasIterations(succ) {
		v.NotReproduced = append(slices.Clone(guideLLMIterationMetrics), GuideLLMNotReproduced...)
		return v, nil
	}
	var outs, totals, perIter, perIterRest []vw
	for i, q := range succ {
		// total_tokens_timings: the prompt's timing, then the output's.
		iter := q.iterTimings()
		out := q.outputTimings(iter)
		outs = append(outs, out...)
		totals = append(append(totals, prompts[i]), out...)
		for _, e := range out {
			perIter = append(perIter, vw{e.w, 1})
		}
		for _, e := range iter {
			perIterRest = append(perIterRest, vw{e.w, 1})
		}
	}
	v.Metrics = append(v.Metrics,
		guideLLMFromValues("request_streaming_iterations_count", "stream_events", "events", each(func(q guideLLMReq) vw { return vw{q.streamEvents, 1} }), -1),
		guideLLMRate("output_tokens_per_second", "output tok/s", "tok/s", outs, nil, nil),
		guideLLMRate("tokens_per_second", "total tok/s", "tok/s", totals, nil, nil),
		guideLLMFromValues("output_tokens_per_iteration", "tokens/event", "tokens", perIter, -1),
		guideLLMFromValues("iter_tokens_per_iteration", "tokens/event after the first", "tokens", perIterRest, -1),
	)
	return v, nil
}

// guideLLMOriginKey is the Run.Extra key where ingest writes a GuideLLM
// run's exact epoch origin (ingest.GuideLLMOriginKey; a test keeps them
// equal, analyze does not import ingest).
const guideLLMOriginKey = "time_origin_unix_s"

// GuideLLMNotReproduced names GuideLLM 0.5 metrics --as-source does not
// reproduce, with the reason.
var GuideLLMNotReproduced = []SourceValueNote{
	{"text, image, video, audio", "per-modality summaries are built from each request's input_metrics/output_metrics (text_tokens, text_words, text_characters, image pixels, audio seconds …), which the record does not carry (only the prompt and output token totals)"},
}

// guideLLMIterationMetrics are the metrics built on GuideLLM's stream
// iteration counts; they are not reproduced when a request of the window
// lacks them (files before GuideLLM 0.4 do not write them).
var guideLLMIterationMetrics = []SourceValueNote{
	{"request_streaming_iterations_count", "needs info.timings.request_iterations (StreamEvents) for every request of the window"},
	{"output_tokens_per_second", "needs info.timings.token_iterations (TokenEvents): GuideLLM spreads each request's tokens over that many evenly spaced iterations"},
	{"tokens_per_second", "built on output_tokens_per_second's iterations (TokenEvents)"},
	{"output_tokens_per_iteration", "tokens of each output iteration (TokenEvents)"},
	{"iter_tokens_per_iteration", "tokens of each iteration after the first (TokenEvents)"},
}

// A SourceValueNote names a source metric and why it is not reproduced.
type SourceValueNote struct{ Name, Why string }

// guideLLMReq is one request as GuideLLM's GenerativeRequestStats sees it,
// on epoch seconds.
type guideLLMReq struct {
	start, end     float64
	first          trace.Opt[float64]
	latency        float64
	prompt, output float64
	ttftMs         float64
	tpotMs, itlMs  float64
	itlWeight      float64
	last           trace.Opt[float64]
	outOK          bool // output tokens known
	iterOK         bool // the file has both iteration counts
	// GuideLLM's info.timings.request_iterations and token_iterations
	// (read only when iterOK).
	streamEvents, tokenEvents float64
}

func newGuideLLMReq(r *trace.Request, origin float64) (guideLLMReq, bool) {
	var q guideLLMReq
	if !r.Arrival.OK || !r.E2ESec.OK {
		return q, false
	}
	// origin + offset rounds back to the file's epoch float: the offset is
	// exact to 1 ns, far below the 2.4e-7 s step of epoch floats.
	q.start = origin + r.Arrival.V.Seconds()
	q.end = q.start + r.E2ESec.V
	q.latency = r.E2ESec.V
	if r.InputTokens.OK {
		q.prompt = float64(r.InputTokens.V)
	}
	out := trace.Opt[float64]{}
	if r.OutputTokens.OK {
		out = trace.Some(float64(r.OutputTokens.V))
		q.output = out.V
	}
	if r.TTFTSec.OK {
		q.first = trace.Some(q.start + r.TTFTSec.V)
		q.ttftMs = 1000 * (q.first.V - q.start)
	}
	last := trace.Opt[float64]{}
	if r.LastTokenSec.OK {
		last = trace.Some(q.start + r.LastTokenSec.V)
	}
	// time_per_output_token_ms: (last token, else end) − start over output.
	if out.OK && out.V != 0 {
		l := q.end
		if last.OK {
			l = last.V
		}
		q.tpotMs = 1000 * (l - q.start) / out.V
	}
	// inter_token_latency_ms: (last − first token)/(output − 1), weighted
	// by output − 1 ((output or 1) − 1).
	if q.first.OK && last.OK && out.OK && out.V > 1 {
		q.itlMs = 1000 * (last.V - q.first.V) / (out.V - 1)
	}
	q.last = last
	q.outOK = out.OK
	q.iterOK = r.StreamEvents.OK && r.TokenEvents.OK
	if r.StreamEvents.OK {
		q.streamEvents = float64(r.StreamEvents.V)
	}
	if r.TokenEvents.OK {
		q.tokenEvents = float64(r.TokenEvents.V)
	}
	q.itlWeight = 0
	if out.OK && out.V != 0 {
		q.itlWeight = out.V - 1
	}
	return q, true
}
