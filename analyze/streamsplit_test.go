package analyze

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestVisitPooledSplit checks that passes split between two goroutines
// (visitPooled) select and sum to the bit what one goroutine does: the
// mean, the std and every selected rank, over pools whose split falls
// inside a slice, at a slice's end, after empty slices, with values that
// repeat (step times), that span many magnitudes (so that another
// summation order differs in the last bits), with buckets refined rather
// than collected, and with a budget that spreads the selection over
// several passes.
func TestVisitPooledSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 6))
	steps := make([]float64, 500)
	for i := range steps {
		steps[i] = 0.005 + rng.ExpFloat64()*0.02
	}
	pool := func(slices, maxLen int, gen func() float64) [][]float64 {
		p := make([][]float64, slices)
		for i := range p {
			p[i] = make([]float64, rng.IntN(maxLen+1))
			for j := range p[i] {
				p[i][j] = gen()
			}
		}
		return p
	}
	pools := map[string][][]float64{
		"step times": pool(300, 700, func() float64 { return steps[rng.IntN(len(steps))] }),
		"spread":     pool(200, 500, func() float64 { return math.Exp(rng.NormFloat64() * 8) }),
		"just over":  {make([]float64, 60), {}, make([]float64, 69), {1, 2, 3}},
		"one slice":  {pool(1, 5000, rng.Float64)[0]},
	}
	for i := range pools["just over"][0] {
		pools["just over"][0][i] = float64(i % 7)
	}
	// The split at the end of a slice: pairSplit(2·512) = 512.
	pools["at an end"] = [][]float64{pool(1, 0, rng.Float64)[0], make([]float64, 512), make([]float64, 512)}
	for _, vs := range pools["at an end"] {
		for i := range vs {
			vs[i] = rng.NormFloat64()
		}
	}
	pcts := []float64{0, 1, 50, 90, 99, 99.9, 100}
	run := func(pooled [][]float64, split int64) Dist {
		defer func(s int64) { splitMin = s }(splitMin)
		splitMin = split
		m := newMetricStream()
		for _, vs := range pooled {
			m.countSlice(vs)
		}
		ranks := medianRanks(m.n)
		for _, p := range pcts {
			ranks = append(ranks, percentileRanks(m.n, p)...)
		}
		m.plan(ranks)
		for m.startPass(&budget{left: passBudget}) {
			m.visitPooled(pooled)
			m.endPass()
		}
		return m.dist()
	}
	check := func(t *testing.T) {
		for name, pooled := range pools {
			want, got := run(pooled, math.MaxInt64), run(pooled, 0)
			if math.Float64bits(got.Mean) != math.Float64bits(want.Mean) || math.Float64bits(got.Std) != math.Float64bits(want.Std) {
				t.Errorf("%s: split mean, std %v, %v; one goroutine %v, %v", name, got.Mean, got.Std, want.Mean, want.Std)
			}
			if len(got.ranks) != len(want.ranks) {
				t.Fatalf("%s: %d ranks selected, want %d", name, len(got.ranks), len(want.ranks))
			}
			for r, v := range want.ranks {
				if g, ok := got.ranks[r]; !ok || math.Float64bits(g) != math.Float64bits(v) {
					t.Errorf("%s: rank %d: split %v, one goroutine %v", name, r, g, v)
				}
			}
		}
	}
	t.Run("collected", check)
	defer func(l, b int64) { collectLimit, passBudget = l, b }(collectLimit, passBudget)
	collectLimit = 3
	t.Run("refined", check)
	collectLimit, passBudget = 1<<20, 10
	t.Run("budget", check)
}

// TestSplitValues checks the cut of a pool at its k-th value.
func TestSplitValues(t *testing.T) {
	pool := [][]float64{{1, 2}, {}, {3, 4, 5}, {6}}
	for k := 0; k <= 6; k++ {
		first, second := splitValues(pool, k)
		var a, b []float64
		for _, vs := range first {
			a = append(a, vs...)
		}
		for _, vs := range second {
			b = append(b, vs...)
		}
		if len(a) != k || len(a)+len(b) != 6 {
			t.Fatalf("k=%d: %v | %v", k, a, b)
		}
		for i, v := range append(a, b...) {
			if v != float64(i+1) {
				t.Fatalf("k=%d: %v | %v: not in order", k, a, b)
			}
		}
	}
	if len(pool[0]) != 2 || pool[2][0] != 3 {
		t.Fatal("splitValues changed its input")
	}
}
