package calibrate

import (
	"math"
	"slices"
	"testing"
)

// twoBasins is one residual whose square has a local minimum of 0.5 at
// x = 0 and its global minimum, 0, at x = 0.4: a descent from 0 stays in
// the first basin.
func twoBasins(xs [][]float64) ([][]float64, error) {
	out := make([][]float64, len(xs))
	for k, x := range xs {
		g := 1 - 0.5*math.Exp(-x[0]*x[0]/0.01) - math.Exp(-(x[0]-0.4)*(x[0]-0.4)/0.01)
		out[k] = []float64{math.Sqrt(max(g, 0))}
	}
	return out, nil
}

func TestRestartedLMLeavesALocalMinimum(t *testing.T) {
	one, descents, err := restartedLM(twoBasins, []float64{0}, nil, nil, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(descents) != 1 || !one.Converged || math.Abs(one.F-0.5) > 1e-3 {
		t.Fatalf("one descent from 0: F %g converged %v after %d descents; want the local minimum 0.5", one.F, one.Converged, len(descents))
	}
	best, descents, err := restartedLM(twoBasins, []float64{0}, nil, nil, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(descents) != 3 {
		t.Fatalf("%d descents, want 3", len(descents))
	}
	if !best.Converged || best.F > 1e-6 || math.Abs(best.X[0]-0.4) > 0.01 {
		t.Errorf("two restarts: x %v F %g; want the global minimum at 0.4", best.X, best.F)
	}
	if best.F0 != one.F0 {
		t.Errorf("F0 %g, want the objective at x0, %g", best.F0, one.F0)
	}
	evals := 0
	for _, d := range descents {
		evals += d.Evals
	}
	if best.Evals != evals {
		t.Errorf("Evals %d, want every descent's, %d", best.Evals, evals)
	}
	again, _, err := restartedLM(twoBasins, []float64{0}, nil, nil, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.X, best.X) || again.F != best.F || again.Evals != best.Evals {
		t.Errorf("not deterministic: %+v then %+v", best, again)
	}
	if got, want := describeDescents(descents, best), "descent 3 of 3 kept"; len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("describeDescents = %q, want it to start %q", got, want)
	}
}

// A first descent that does not converge is returned alone: no restart
// rescues a fit that cannot settle from its defaults.
func TestRestartedLMUnconvergedFirst(t *testing.T) {
	slope := func(xs [][]float64) ([][]float64, error) {
		out := make([][]float64, len(xs))
		for k, x := range xs {
			out[k] = []float64{math.Exp(-x[0]), 1e-3 * x[1]}
		}
		return out, nil
	}
	best, descents, err := restartedLM(slope, []float64{0, 0}, nil, nil, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if best.Converged || len(descents) != 1 {
		t.Errorf("converged %v after %d descents; want the first, unconverged, alone", best.Converged, len(descents))
	}
}

func TestWalshSignRowsDiffer(t *testing.T) {
	const n = 3
	seen := map[[n]float64]int{}
	for k := 1; k <= n; k++ {
		var row [n]float64
		for i := range row {
			row[i] = walshSign(k, i)
		}
		if j, ok := seen[row]; ok {
			t.Errorf("restarts %d and %d leave in the same direction %v", j, k, row)
		}
		seen[row] = k
	}
	if walshSign(0, 5) != 1 {
		t.Error("row 0 is not all +1")
	}
}
