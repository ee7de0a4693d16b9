package calibrate

import (
	"math/rand/v2"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
)

// TestQuantileOfIsNumpys checks selection against the sorted numpy-linear
// percentile, on lists with many repeated values (as ITL gaps are).
func TestQuantileOfIsNumpys(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 7, 8, 100, 1001} {
		for _, distinct := range []int{1, 3, 1000} {
			v := make([]float64, n)
			for i := range v {
				v[i] = float64(rng.IntN(distinct)) * 0.01
			}
			d := analyze.NewDist(append([]float64(nil), v...))
			for _, p := range []float64{0, 50, 90, 99, 100} {
				if got, want := quantileOf(append([]float64(nil), v...), p), d.Percentile(p); got != want {
					t.Errorf("n %d distinct %d p%v: %v, numpy's %v", n, distinct, p, got, want)
				}
			}
		}
	}
}
