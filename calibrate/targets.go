package calibrate

import (
	"fmt"
	"math"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// A Target is one observed figure of a run that a replay must reproduce:
// a statistic (p50, p90, p99, mean) of a latency (Metric), in seconds.
type Target struct {
	Metric   string  // MetricTTFT, MetricITL, ...
	Stat     string  // "p50", "p90", "p99" or "mean"
	Observed float64 // seconds
	// Reported says the figure is the source's own summary (a
	// summary-only run), not one recomputed from its requests.
	Reported bool
}

// Name is "ttft p50".
func (t Target) Name() string { return t.Metric + " " + t.Stat }

// Latencies a Target can name. TTFT, ITL and E2E are as the client
// measured them; queue, prefill and decode as the engine did.
const (
	MetricTTFT    = "ttft"
	MetricITL     = "itl"
	MetricE2E     = "e2e"
	MetricQueue   = "queue"
	MetricPrefill = "prefill"
	MetricDecode  = "decode"
)

// targetStats are the statistics taken of each latency of a run with
// per-request data: the median and the tail, not only the mean.
var targetStats = []string{"p50", "p90", "p99"}

// ErrNoLatencies is wrapped by ObservedTargets' error for a run that
// recorded no latency a replay could be compared with.
var ErrNoLatencies = fmt.Errorf("no latencies to compare a replay with")

// ObservedTargets returns what run observed: from its requests (reqs,
// the run's own) the quantiles of the engine's queue, prefill and
// decode times when it measured them server-side (engine timestamps),
// else of its client's TTFT, ITL and E2E; from a summary-only run, the
// quantiles its source reported (sglang and vLLM keys such as
// median_ttft_ms). Its error does not name the run: the caller does.
func ObservedTargets(run trace.Run, reqs []*trace.Request) ([]Target, error) {
	var ts []Target
	if len(reqs) > 0 {
		server := true
		for _, r := range reqs {
			if r.OK() && !(r.QueueSec.OK && r.PrefillSec.OK && r.DecodeSec.OK && r.TTFTBasis == trace.TTFTServer) {
				server = false
				break
			}
		}
		metrics := []string{MetricTTFT, MetricITL, MetricE2E}
		if server {
			metrics = []string{MetricQueue, MetricPrefill, MetricDecode}
		}
		lat := latencies(reqs)
		for _, m := range metrics {
			v := lat[m]
			if len(v) == 0 {
				continue
			}
			d := analyze.NewDist(v)
			for _, s := range targetStats {
				ts = append(ts, Target{Metric: m, Stat: s, Observed: statOf(d, s)})
			}
		}
	} else {
		ts = reportedTargets(run)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w (neither per-request TTFT, ITL, E2E or engine timings nor a reported summary)", ErrNoLatencies)
	}
	return ts, nil
}

// latencies pools each latency over the successful requests of reqs, in
// seconds: one value per request, every ITL gap.
func latencies(reqs []*trace.Request) map[string][]float64 {
	l := map[string][]float64{}
	for _, r := range reqs {
		addLatencies(l, r)
	}
	return l
}

// addLatencies adds r's latencies to l by metric, when r succeeded: the
// observed runs' and the replays' are collected by this one function, so
// both sides of a fit count the same values.
func addLatencies(l map[string][]float64, r *trace.Request) {
	if !r.OK() {
		return
	}
	add := func(m string, o trace.Opt[float64]) {
		if o.OK {
			l[m] = append(l[m], o.V)
		}
	}
	add(MetricTTFT, r.TTFTSec)
	add(MetricE2E, r.E2ESec)
	add(MetricQueue, r.QueueSec)
	add(MetricPrefill, r.PrefillSec)
	add(MetricDecode, r.DecodeSec)
	l[MetricITL] = append(l[MetricITL], r.ITLSec...)
}

func statOf(d analyze.Dist, s string) float64 {
	switch s {
	case "mean":
		return d.Mean
	case "p50":
		return d.Median()
	case "p90":
		return d.Percentile(90)
	case "p99":
		return d.Percentile(99)
	}
	panic("calibrate: unknown statistic " + s)
}

// reportedMetrics maps analyze.ReportedStats's metric names (the
// benchmarks' summary keys, read in one place) to the targets they give.
var reportedMetrics = []struct{ reported, metric string }{
	{"ttft", MetricTTFT}, {"itl", MetricITL}, {"e2el", MetricE2E},
}

// reportedTargets reads the quantiles a summary-only run reported, as
// analyze.ReportedStats reads them (vLLM's and SGLang's keys such as
// median_ttft_ms); a zero is left out, as no replay can be compared
// with it on a log scale.
func reportedTargets(run trace.Run) []Target {
	rep := analyze.ReportedStats(run)
	var ts []Target
	for _, m := range reportedMetrics {
		for _, s := range targetStats {
			if v, ok := rep[m.reported][s]; ok && v > 0 {
				ts = append(ts, Target{Metric: m.metric, Stat: s, Observed: v, Reported: true})
			}
		}
	}
	return ts
}

// simulated computes the targets' statistics over simulated latencies
// (reordering them); NaN where there are none.
func simulated(ts []Target, lat map[string][]float64) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		v := lat[t.Metric]
		switch t.Stat {
		case "mean":
			if len(v) == 0 {
				out[i] = math.NaN()
				continue
			}
			out[i] = analyze.NewDist(append([]float64(nil), v...)).Mean
		case "p50":
			out[i] = quantileOf(v, 50)
		case "p90":
			out[i] = quantileOf(v, 90)
		case "p99":
			out[i] = quantileOf(v, 99)
		}
	}
	return out
}

// quantileOf is numpy's linear percentile p (0–100) of v, found by
// selection rather than sorting (v is reordered): a replay's pooled ITL
// holds millions of gaps, and sorting them in every evaluation of a fit
// cost more than the replay. NaN for an empty v.
func quantileOf(v []float64, p float64) float64 {
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	h := float64(n-1) * (p / 100) // numpy's order of operations
	lo := int(math.Floor(h))
	a := selectKth(v, lo)
	if lo >= n-1 {
		return a
	}
	// The next order statistic is the least of what lies above lo.
	b := v[lo+1]
	for _, x := range v[lo+2:] {
		b = min(b, x)
	}
	// numpy's _lerp, as analyze computes it.
	frac := h - float64(lo)
	if frac >= 0.5 {
		return b - (b-a)*(1-frac)
	}
	return a + (b-a)*frac
}

// selectKth reorders v so that v[k] is its k-th smallest value, smaller
// ones before it and larger ones after, and returns it: quickselect with
// a median-of-three pivot and a three-way partition (ITL gaps repeat the
// same step times many times over).
func selectKth(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		a, b, c := v[lo], v[lo+(hi-lo)/2], v[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		// v[lo:lt] < pivot, v[lt:i] == pivot, v[gt+1:hi+1] > pivot.
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch x := v[i]; {
			case x < pivot:
				v[lt], v[i] = v[i], v[lt]
				lt++
				i++
			case x > pivot:
				v[gt], v[i] = v[i], v[gt]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return v[k]
		}
	}
	return v[k]
}
