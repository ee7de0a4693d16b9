package analyze

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSelectSortedAsSort checks selectSorted against a sort by keys (−0
// before +0), on every rank and on a few, for values that repeat a lot,
// hardly at all, are sorted already or reversed, and for odd values.
func TestSelectSortedAsSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	odd := []float64{math.Copysign(0, -1), 0, -1.5, 2, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, 0.0125}
	gens := map[string]func(i, n int) float64{
		"repeats":  func(int, int) float64 { return float64(rng.IntN(50)) * 0.001 },
		"distinct": func(int, int) float64 { return rng.Float64() },
		"sorted":   func(i, _ int) float64 { return float64(i) },
		"reversed": func(i, n int) float64 { return float64(n - i) },
		"odd":      func(int, int) float64 { return odd[rng.IntN(len(odd))] },
		"equal":    func(int, int) float64 { return 0.5 },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 5, 33, 1000, 100_000} {
			vs := make([]float64, n)
			for i := range vs {
				vs[i] = gen(i, n)
			}
			want := slices.Clone(vs)
			slices.SortFunc(want, func(a, b float64) int { return cmp.Compare(floatKey(a), floatKey(b)) })
			all := make([]int64, n)
			for i := range all {
				all[i] = int64(i)
			}
			sets := [][]int64{all, slices.Compact([]int64{0, int64(n / 2), int64(n - 1)})}
			for range 10 { // a few ranks anywhere, as a median's and a percentile's
				some := []int64{rng.Int64N(int64(n)), rng.Int64N(int64(n)), rng.Int64N(int64(n))}
				slices.Sort(some)
				sets = append(sets, slices.Compact(some))
			}
			for _, ranks := range sets {
				got := slices.Clone(vs)
				selectSorted(got, ranks)
				for _, r := range ranks {
					if math.Float64bits(got[r]) != math.Float64bits(want[r]) {
						t.Fatalf("%s, %d values: rank %d = %v, want %v", name, n, r, got[r], want[r])
					}
				}
			}
		}
	}
}
