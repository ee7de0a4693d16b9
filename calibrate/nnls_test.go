package calibrate

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func TestNNLSExactAndBound(t *testing.T) {
	// y = 2 + 3·x exactly: recovered.
	a := mat.NewDense(4, 2, []float64{1, 0, 1, 1, 1, 2, 1, 3})
	x, err := nnls(a, []float64{2, 5, 8, 11}, []bool{true, true})
	if err != nil || math.Abs(x[0]-2) > 1e-9 || math.Abs(x[1]-3) > 1e-9 {
		t.Errorf("x = %v, %v", x, err)
	}
	// y = 5 − x: the unconstrained slope is −1; non-negative it is 0 and
	// the intercept the mean, 3.5.
	x, err = nnls(a, []float64{5, 4, 3, 2}, []bool{true, true})
	if err != nil || math.Abs(x[0]-3.5) > 1e-9 || x[1] != 0 {
		t.Errorf("bounded x = %v, %v", x, err)
	}
	// A free slope may go negative.
	x, err = nnls(a, []float64{5, 4, 3, 2}, []bool{true, false})
	if err != nil || math.Abs(x[1]+1) > 1e-9 || math.Abs(x[0]-5) > 1e-9 {
		t.Errorf("free x = %v, %v", x, err)
	}
	if _, err := nnls(mat.NewDense(1, 2, []float64{1, 1}), []float64{1}, []bool{true, true}); err == nil {
		t.Error("underdetermined system accepted")
	}
}
