package analyze

import (
	"errors"
	"fmt"
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

// steadyMaxBatches bounds the batches MSER searches: runs longer than
// 5·steadyMaxBatches seconds (3.8 days) are batched more coarsely, so the
// detection costs O(requests + steadyMaxBatches) whatever the span.
const steadyMaxBatches = 1 << 16

// DetectSteady finds the steady part of a run from its per-second series
// of running requests with MSER-5 (White, 1997): the series is averaged in
// batches of 5 s, and the warmup is the truncation point d that minimizes
// the variance of the remaining batch means divided by their count²
// (searched over the first half). The cooldown is the same rule applied to
// the reversed series. Runs longer than 5·steadyMaxBatches seconds use
// batches of ⌈span/steadyMaxBatches⌉ s (the Method says so). It returns
// false when the run is shorter than 20 s or has no arrivals and E2E.
//
// Note: the batch sums of the series (PerSecond's Running) are computed
// from each request's interval of seconds directly, never as a dense
// per-second array, so a run of two requests 100 days apart costs two
// requests and the batches, not 8.6 million seconds.
func DetectSteady(reqs []*trace.Request) (SteadyState, bool) {
	start, end := math.Inf(1), math.Inf(-1)
	for _, r := range reqs {
		if r.Arrival.OK {
			start = math.Min(start, r.Arrival.V.Seconds())
			end = math.Max(end, requestEnd(r))
		}
	}
	if math.IsInf(start, 1) {
		return SteadyState{}, false
	}
	n := int64(math.Floor(end-start)) + 1 // seconds of PerSecond's series
	if n < 20 {
		return SteadyState{}, false // too short
	}
	batch := int64(5)
	if n/batch > steadyMaxBatches {
		batch = (n + steadyMaxBatches - 1) / steadyMaxBatches
	}
	nb := n / batch
	// sums[i] is Σ Running over the seconds of batch i; full batches
	// inside an interval are added through the difference array full.
	sums := make([]float64, nb)
	full := make([]int64, nb+1)
	running := false
	for _, r := range reqs {
		if !r.Arrival.OK || !r.E2ESec.OK {
			continue
		}
		a := r.Arrival.V.Seconds()
		lo, hi := int64(math.Floor(a-start)), min(int64(math.Ceil(a+r.E2ESec.V-start)), n)
		if hi <= lo {
			continue
		}
		running = true
		bl, bh := lo/batch, (hi-1)/batch
		if bl == bh {
			if bl < nb {
				sums[bl] += float64(hi - lo)
			}
			continue
		}
		if bl < nb {
			sums[bl] += float64((bl+1)*batch - lo)
		}
		if bh < nb {
			sums[bh] += float64(hi - bh*batch)
		}
		if from, to := bl+1, min(bh, nb); from < to {
			full[from]++
			full[to]--
		}
	}
	if !running {
		return SteadyState{}, false // no E2E to tell who is running
	}
	means := make([]float64, nb)
	var k int64
	for i := range nb {
		k += full[i]
		means[i] = (sums[i] + float64(k*batch)) / float64(batch)
	}
	warm := mser(means)
	slices.Reverse(means)
	cool := mser(means)
	return SteadyState{
		WarmupSec:   float64(int64(warm) * batch),
		CooldownSec: float64(int64(cool)*batch + n - nb*batch),
		Method:      fmt.Sprintf("MSER-%d on running requests per second", batch),
	}, true
}

// mser returns the truncation d in [0, n/2] minimizing
// Σ_{i≥d}(x_i − mean_d)² / (n−d)², in O(n) from suffix sums of x shifted
// by its mean (which keeps the sum of squares from cancelling).
func mser(x []float64) int {
	n := len(x)
	c := 0.0
	for _, v := range x {
		c += v
	}
	c /= float64(n)
	s1, s2 := make([]float64, n+1), make([]float64, n+1)
	for i := n - 1; i >= 0; i-- {
		v := x[i] - c
		s1[i], s2[i] = s1[i+1]+v, s2[i+1]+v*v
	}
	best, bestD := math.Inf(1), 0
	for d := 0; d <= n/2; d++ {
		k := float64(n - d)
		ss := max(s2[d]-s1[d]*s1[d]/k, 0)
		stat := ss / (k * k)
		if d == 0 || stat < best-1e-12*best {
			best, bestD = stat, d
		}
	}
	return bestD
}
