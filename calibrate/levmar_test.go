package calibrate

import (
	"math"
	"testing"
)

// TestLevenbergMarquardtBounds: the minimum of (x₀ − 2)² + (x₁ + 3)² +
// (x₀ − x₁ − 5)²/10 lies outside the box x₀ ≤ 1, x₁ ≥ −1; the search must
// stop on the box's corner (1, −1), reaching the upper bound by backward
// differences, and without the box find (2, −3).
func TestLevenbergMarquardtBounds(t *testing.T) {
	res := func(xs [][]float64) ([][]float64, error) {
		out := make([][]float64, len(xs))
		for i, x := range xs {
			out[i] = []float64{x[0] - 2, x[1] + 3, (x[0] - x[1] - 5) / math.Sqrt(10)}
		}
		return out, nil
	}
	for _, tc := range []struct {
		lower, upper []float64
		want         [2]float64
	}{
		{[]float64{math.Inf(-1), -1}, []float64{1, math.Inf(1)}, [2]float64{1, -1}},
		{nil, nil, [2]float64{2, -3}},
	} {
		got, err := levenbergMarquardt(res, []float64{0, 0}, tc.lower, tc.upper, 200)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Converged || math.Abs(got.X[0]-tc.want[0]) > 1e-3 || math.Abs(got.X[1]-tc.want[1]) > 1e-3 {
			t.Errorf("box %v–%v: stopped at %v (converged %v), want %v", tc.lower, tc.upper, got.X, got.Converged, tc.want)
		}
	}
}
