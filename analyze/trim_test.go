package analyze

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// detectSteadyDense is DetectSteady as it was written first: MSER-5 on
// the dense per-second series, O(span²). The sparse, O(span) version must
// find the same truncation points on every run short enough for both.
func detectSteadyDense(reqs []*trace.Request) (SteadyState, bool) {
	series, ok := PerSecond(reqs)
	if !ok || len(series.Running) < 20 || slices.Max(series.Running) == 0 {
		return SteadyState{}, false
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
	msr := func(x []float64) int {
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
	warm := msr(means)
	slices.Reverse(means)
	cool := msr(means)
	return SteadyState{WarmupSec: float64(warm * batch), CooldownSec: float64(cool*batch + len(series.Running) - nb*batch)}, true
}

func TestDetectSteadyMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 300 {
		n := 1 + rng.IntN(400)
		span := 5 + rng.Float64()*600
		var reqs []*trace.Request
		for i := range n {
			r := &trace.Request{Status: trace.StatusOK, Arrival: at(rng.Float64() * span)}
			if i%17 != 3 {
				r.E2ESec = f(rng.ExpFloat64() * span / 10)
			}
			reqs = append(reqs, r)
		}
		got, gok := DetectSteady(reqs)
		want, wok := detectSteadyDense(reqs)
		if gok != wok || got.WarmupSec != want.WarmupSec || got.CooldownSec != want.CooldownSec {
			t.Fatalf("run %d (%d requests over %.0f s): got %+v %v, want %+v %v", run, n, span, got, gok, want, wok)
		}
	}
}

// TestDetectSteadyLongSpan: two requests 100 days apart (the long-span
// reproducer) and requests ten years apart are detected in bounded time
// and memory, with coarser batches named in the method.
func TestDetectSteadyLongSpan(t *testing.T) {
	for _, span := range []float64{100 * 86400, trace.MaxTraceTime.Seconds()} {
		reqs := []*trace.Request{
			{Status: trace.StatusOK, Arrival: at(0), E2ESec: f(10)},
			{Status: trace.StatusOK, Arrival: at(span - 10), E2ESec: f(10)},
		}
		start := time.Now()
		st, ok := DetectSteady(reqs)
		if !ok {
			t.Fatalf("span %.0f s: no steady state", span)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("span %.0f s: %v", span, d)
		}
		batch := int(math.Ceil((math.Floor(span) + 1) / steadyMaxBatches))
		if want := fmt.Sprintf("MSER-%d on running requests per second", batch); st.Method != want {
			t.Errorf("span %.0f s: method %q, want %q", span, st.Method, want)
		}
	}
}
