package analyze

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

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
}

// A SourceMetric is one distribution as the source summarizes it, in the
// source's unit.
type SourceMetric struct {
	Name        string // the source's name
	Ours        string // the corresponding opaltrace metric
	Unit        string
	Count       int
	Mean, Std   float64
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

// guideLLMView follows GuideLLM 0.5 (guidellm/schemas/statistics.py,
// DistributionSummary.from_values): successful requests of the measurement
// window — those that ended at or after scheduler_metrics.measure_start_time
// — form a PDF over their distinct values; a percentile q is the first
// value whose cumulative probability reaches q (a sample value, never
// interpolated); mean and variance are probability-weighted. Only TTFT and
// request latency are reproduced: GuideLLM's token-weighted inter-token
// figures need its last-token time, which the file has but opaltrace's
// record (E2E to the end of the response) does not keep.
func guideLLMView(run trace.Run, reqs []*trace.Request) (*SourceView, error) {
	var rep struct {
		Scheduler struct {
			MeasureStart *float64 `json:"measure_start_time"`
		} `json:"scheduler_metrics"`
	}
	if err := json.Unmarshal(run.Reported, &rep); err != nil || rep.Scheduler.MeasureStart == nil {
		return nil, fmt.Errorf("--as-source: run %s has no scheduler_metrics.measure_start_time", run.Name)
	}
	if run.StartUnixN == 0 {
		return nil, fmt.Errorf("--as-source: run %s has no time origin", run.Name)
	}
	start := *rep.Scheduler.MeasureStart - float64(run.StartUnixN)/1e9
	v := &SourceView{
		Source: "guidellm",
		Rule:   "sample-value percentiles (first value whose cumulative probability reaches q), probability-weighted mean and std",
		Window: fmt.Sprintf("successful requests ending at or after the measurement start (%.3f s)", start),
	}
	var ttft, lat []float64
	for _, r := range reqs {
		if !r.OK() || !r.Arrival.OK || !r.E2ESec.OK || r.Arrival.V.Seconds()+r.E2ESec.V < start {
			continue
		}
		v.N++
		if r.TTFTSec.OK {
			ttft = append(ttft, r.TTFTSec.V*1000)
		}
		lat = append(lat, r.E2ESec.V)
	}
	if len(ttft) > 0 {
		v.Metrics = append(v.Metrics, guideLLMDist("time_to_first_token_ms", "ttft", "ms", ttft))
	}
	if len(lat) > 0 {
		v.Metrics = append(v.Metrics, guideLLMDist("request_latency", "e2el", "s", lat))
	}
	return v, nil
}

// guideLLMDist is DistributionSummary.from_values with unit weights.
func guideLLMDist(name, ours, unit string, x []float64) SourceMetric {
	vals := slices.Clone(x)
	slices.Sort(vals)
	// Distinct values with their weights, as np.unique + np.add.at.
	var uniq []float64
	var w []float64
	for _, v := range vals {
		if len(uniq) > 0 && uniq[len(uniq)-1] == v {
			w[len(w)-1]++
			continue
		}
		uniq = append(uniq, v)
		w = append(w, 1)
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	prob := make([]float64, len(w))
	cdf := make([]float64, len(w))
	c := 0.0
	for i := range w {
		prob[i] = w[i] / total
		c += prob[i] // np.cumsum adds left to right
		cdf[i] = c
	}
	at := func(q float64) float64 {
		i, _ := slices.BinarySearch(cdf, q) // searchsorted side="left"
		return uniq[min(i, len(uniq)-1)]
	}
	m := SourceMetric{Name: name, Ours: ours, Unit: unit, Count: len(x), Min: uniq[0], Max: uniq[len(uniq)-1], Median: at(0.5)}
	prods := make([]float64, len(uniq))
	for i := range uniq {
		prods[i] = uniq[i] * prob[i]
	}
	m.Mean = pairwiseSum(prods) // np.sum(values * probabilities)
	for i := range uniq {
		d := uniq[i] - m.Mean
		prods[i] = d * d * prob[i]
	}
	m.Std = math.Sqrt(pairwiseSum(prods))
	for _, k := range guideLLMKeys {
		m.Percentiles = append(m.Percentiles, SourcePercentile{k.key, at(k.q)})
	}
	return m
}
