package analyze

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// gapRequests makes n completed requests of up to maxGaps ITL gaps each,
// drawn by gen.
func gapRequests(rng *rand.Rand, n, maxGaps int, gen func() float64) []*trace.Request {
	reqs := make([]*trace.Request, n)
	for i := range reqs {
		g := make([]float64, rng.IntN(maxGaps+1))
		for j := range g {
			g[j] = gen()
		}
		reqs[i] = &trace.Request{Status: trace.StatusOK, ITLSec: g, TTFTSec: trace.Some(gen()), E2ESec: trace.Some(1 + gen()),
			OutputTokens: trace.Some(int64(len(g) + 1)), Arrival: trace.Some(trace.Time(i) * 1e6)}
	}
	return reqs
}

// TestSummarizerITLAsNewDist checks the pooled ITL of a Summary, made
// from the distinct values counted (or, when they hardly repeat, by
// sorting the pool), against NewDist of the pooled gaps, bit for bit:
// values, mean and std. The shapes cover both ways and the values a sort
// by bits must order right (−0 and +0, negatives, infinities, subnormals).
func TestSummarizerITLAsNewDist(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	steps := make([]float64, 5000)
	for i := range steps {
		steps[i] = 0.005 + rng.ExpFloat64()*0.02
	}
	odd := []float64{math.Copysign(0, -1), 0, -1.5, 2, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 0.0125}
	cases := []struct {
		name     string
		n, gaps  int
		gen      func() float64
		overflow bool
	}{
		{"step times", 2000, 400, func() float64 { return steps[rng.IntN(len(steps))] }, false},
		{"odd values", 500, 100, func() float64 { return odd[rng.IntN(len(odd))] }, false},
		{"all distinct", 2000, 200, func() float64 { return rng.Float64() }, true},
		{"short", 10, 30, func() float64 { return steps[rng.IntN(len(steps))] }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reqs := gapRequests(rng, c.n, c.gaps, c.gen)
			var pool []float64
			for _, r := range reqs {
				pool = append(pool, r.ITLSec...)
			}
			want := NewDist(slices.Clone(pool))
			z := NewSummarizer(trace.Run{}, Options{})
			for _, r := range reqs {
				z.Add(r)
			}
			if z.counts.overflow != c.overflow {
				t.Errorf("counting gave up: %v, want %v (%d distinct of %d)", z.counts.overflow, c.overflow, z.counts.distinct, z.counts.total)
			}
			got := z.Summary().ITL
			if len(got.Values) != len(want.Values) {
				t.Fatalf("%d values, want %d", len(got.Values), len(want.Values))
			}
			for i := range got.Values {
				if math.Float64bits(got.Values[i]) != math.Float64bits(want.Values[i]) {
					t.Fatalf("[%d] = %v, want %v", i, got.Values[i], want.Values[i])
				}
			}
			if math.Float64bits(got.Mean) != math.Float64bits(want.Mean) || math.Float64bits(got.Std) != math.Float64bits(want.Std) {
				t.Errorf("mean, std = %v, %v; want %v, %v", got.Mean, got.Std, want.Mean, want.Std)
			}
		})
	}
}

// TestMeanStdPooled checks the pairwise mean and std of segments against
// meanStd of their concatenation, for totals around numpy's block sizes.
func TestMeanStdPooled(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 8, 128, 129, 1000, 100_003} {
		var segs [][]float64
		var all []float64
		for left := n; left > 0; {
			k := min(left, rng.IntN(300)+1)
			g := make([]float64, k)
			for i := range g {
				g[i] = rng.NormFloat64() * 1e3
			}
			segs = append(segs, g)
			all = append(all, g...)
			left -= k
		}
		m, s := meanStdPooled(segs, n)
		wm, ws := meanStd(all)
		if math.Float64bits(m) != math.Float64bits(wm) || math.Float64bits(s) != math.Float64bits(ws) {
			t.Errorf("n=%d: %v, %v; want %v, %v", n, m, s, wm, ws)
		}
	}
}

// TestSummarizerSelectITL checks a summary whose pooled ITL is selected
// by passes over the kept gaps (Options.SelectITL) against the one that
// sorts them: the ITL's count, mean, std, median and percentiles to the
// bit, and every other field the same; with buckets small enough to
// collect, with a collect limit of 3 values (refinement down to single
// 64-bit keys) and with a pass budget so small that jobs wait.
func TestSummarizerSelectITL(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	steps := make([]float64, 3000)
	for i := range steps {
		steps[i] = 0.005 + rng.ExpFloat64()*0.02
	}
	pcts := []float64{0, 1, 50, 90, 99, 99.9, 100}
	sets := map[string][]*trace.Request{
		"random":     randomRequests(rng, 5000),
		"step times": gapRequests(rng, 2000, 400, func() float64 { return steps[rng.IntN(len(steps))] }),
		"no gaps":    gapRequests(rng, 50, 0, rng.Float64),
		// Magnitudes over many orders, so that a sum in another order
		// differs in its last bits.
		"spread": gapRequests(rng, 3000, 100, func() float64 { return math.Exp(rng.NormFloat64() * 8) }),
	}
	check := func(t *testing.T, reqs []*trace.Request) {
		run := trace.Run{Name: "r"}
		want := SummarizeWith(run, reqs, Options{})
		got := SummarizeWith(run, reqs, Options{SelectITL: true, ITLPercentiles: pcts})
		if !got.ITL.Streamed() || got.ITL.Values != nil {
			t.Fatal("the selected ITL holds its values")
		}
		if got.ITL.N() != want.ITL.N() {
			t.Fatalf("%d gaps, want %d", got.ITL.N(), want.ITL.N())
		}
		g := []float64{got.ITL.Mean, got.ITL.Std, got.ITL.Median()}
		w := []float64{want.ITL.Mean, want.ITL.Std, want.ITL.Median()}
		for _, p := range pcts {
			g, w = append(g, got.ITL.Percentile(p)), append(w, want.ITL.Percentile(p))
		}
		if !sameBits(reflect.ValueOf(g), reflect.ValueOf(w)) {
			t.Errorf("mean, std, median, percentiles %v, want %v", g, w)
		}
		got.ITL = want.ITL
		if !sameBits(reflect.ValueOf(*got), reflect.ValueOf(*want)) {
			t.Errorf("summaries differ beyond ITL:\nselected %+v\nsorted   %+v", got, want)
		}
	}
	for name, reqs := range sets {
		t.Run(name, func(t *testing.T) { check(t, reqs) })
	}
	defer func(l, b int64) { collectLimit, passBudget = l, b }(collectLimit, passBudget)
	collectLimit = 3
	t.Run("refined", func(t *testing.T) { check(t, sets["step times"]) })
	collectLimit, passBudget = 1<<20, 10
	t.Run("budget", func(t *testing.T) { check(t, sets["random"]) })
}
