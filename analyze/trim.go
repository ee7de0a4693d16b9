package analyze

import (
	"errors"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// A TrimWindow is the part of a run kept by trimming, in trace seconds.
type TrimWindow struct {
	Start, End   float64 // window [Start, End]
	WarmupSec    float64
	CooldownSec  float64
	Dropped      int // requests outside the window
	FirstArrival float64
	LastEnd      float64 // last completion of the untrimmed run
}

// Trim keeps the requests that arrived at or after first arrival + warmup
// and ended (arrival + E2E; failed requests without E2E: arrival) at or
// before last end − cooldown. Every request needs an arrival.
func Trim(reqs []*trace.Request, warmupSec, cooldownSec float64) ([]*trace.Request, TrimWindow, error) {
	w := TrimWindow{WarmupSec: warmupSec, CooldownSec: cooldownSec}
	if warmupSec < 0 || cooldownSec < 0 {
		return reqs, w, errors.New("trim: warmup and cooldown must not be negative")
	}
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range reqs {
		if !r.Arrival.OK {
			return reqs, w, errors.New("trim: requests have no arrival times, nothing trimmed")
		}
		a := r.Arrival.V.Seconds()
		first = math.Min(first, a)
		last = math.Max(last, requestEnd(r))
	}
	if len(reqs) == 0 {
		return reqs, w, nil
	}
	w.FirstArrival, w.LastEnd = first, last
	w.Start, w.End = first+warmupSec, last-cooldownSec
	if w.End <= w.Start {
		return reqs, w, errors.New("trim: warmup and cooldown leave an empty window, nothing trimmed")
	}
	kept := make([]*trace.Request, 0, len(reqs))
	for _, r := range reqs {
		if r.Arrival.V.Seconds() >= w.Start && requestEnd(r) <= w.End {
			kept = append(kept, r)
		}
	}
	w.Dropped = len(reqs) - len(kept)
	return kept, w, nil
}

func requestEnd(r *trace.Request) float64 {
	a := r.Arrival.V.Seconds()
	if r.E2ESec.OK {
		return a + r.E2ESec.V
	}
	return a
}

// A SteadyState is the steady part of a run found by DetectSteady, as a
// suggested --trim-warmup and --trim-cooldown. It is never applied
// silently.
type SteadyState struct {
	WarmupSec, CooldownSec float64
	Method                 string
}

// DetectSteady finds the steady part of a run from its per-second series
// of running requests with MSER-5 (White, 1997): the series is averaged in
// batches of 5 s, and the warmup is the truncation point d that minimizes
// the variance of the remaining batch means divided by their count²
// (searched over the first half). The cooldown is the same rule applied to
// the reversed series. It returns false when the run is shorter than 20 s
// or has no arrivals and E2E.
func DetectSteady(reqs []*trace.Request) (SteadyState, bool) {
	series, ok := PerSecond(reqs)
	if !ok || len(series.Running) < 20 || slices.Max(series.Running) == 0 {
		return SteadyState{}, false // too short, or no E2E to tell who is running
	}
	const batch = 5
	nb := len(series.Running) / batch
	means := make([]float64, nb)
	for i := range nb {
		sum := 0.0
		for _, v := range series.Running[i*batch : (i+1)*batch] {
			sum += float64(v)
		}
		means[i] = sum / batch
	}
	warm := mser(means)
	rev := make([]float64, nb)
	for i, v := range means {
		rev[nb-1-i] = v
	}
	cool := mser(rev)
	return SteadyState{
		WarmupSec:   float64(warm * batch),
		CooldownSec: float64(cool*batch + len(series.Running) - nb*batch),
		Method:      "MSER-5 on running requests per second",
	}, true
}

// mser returns the truncation d in [0, n/2] minimizing
// Σ_{i≥d}(x_i − mean_d)² / (n−d)².
func mser(x []float64) int {
	n := len(x)
	best, bestD := math.Inf(1), 0
	for d := 0; d <= n/2; d++ {
		rest := x[d:]
		m := 0.0
		for _, v := range rest {
			m += v
		}
		m /= float64(len(rest))
		ss := 0.0
		for _, v := range rest {
			ss += (v - m) * (v - m)
		}
		stat := ss / float64(len(rest)*len(rest))
		if d == 0 || stat < best-1e-12*best {
			best, bestD = stat, d
		}
	}
	return bestD
}
