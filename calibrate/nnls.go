package calibrate

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/mat"
)

// nnls solves min ‖A·x − b‖₂ subject to x_j ≥ 0 for the columns j with
// nonneg[j] (the others are free), by the active-set method of Lawson and
// Hanson (Solving Least Squares Problems, 1974, ch. 23), generalised to
// free variables, which start and stay in the passive set. Columns are
// scaled to unit norm first so that the tolerance means the same thing
// for seconds per FLOP and seconds per step.
func nnls(a *mat.Dense, b []float64, nonneg []bool) ([]float64, error) {
	m, n := a.Dims()
	if m < n {
		return nil, errors.New("fewer observations than coefficients")
	}
	scale := make([]float64, n)
	as := mat.DenseCopyOf(a)
	for j := range n {
		s := mat.Norm(as.ColView(j), 2)
		if s == 0 {
			s = 1
		}
		scale[j] = s
		for i := range m {
			as.Set(i, j, as.At(i, j)/s)
		}
	}
	bv := mat.NewVecDense(m, append([]float64(nil), b...))
	x := make([]float64, n)
	passive := make([]bool, n)
	for j := range n {
		passive[j] = !nonneg[j]
	}
	tol := 1e-12 * float64(max(m, n)) * math.Max(1, mat.Norm(bv, 2))

	solve := func() ([]float64, error) {
		var cols []int
		for j := range n {
			if passive[j] {
				cols = append(cols, j)
			}
		}
		z := make([]float64, n)
		if len(cols) == 0 {
			return z, nil
		}
		sub := mat.NewDense(m, len(cols), nil)
		for k, j := range cols {
			for i := range m {
				sub.Set(i, k, as.At(i, j))
			}
		}
		var qr mat.QR
		qr.Factorize(sub)
		var sol mat.VecDense
		if err := qr.SolveVecTo(&sol, false, bv); err != nil {
			return nil, err
		}
		for k, j := range cols {
			z[j] = sol.AtVec(k)
		}
		return z, nil
	}
	residualGrad := func() []float64 {
		var r mat.VecDense
		r.MulVec(as, mat.NewVecDense(n, x))
		r.SubVec(bv, &r)
		var w mat.VecDense
		w.MulVec(as.T(), &r)
		return w.RawVector().Data
	}

	// Free variables first.
	if z, err := solve(); err == nil {
		copy(x, z)
	}
	for iter := 0; iter < 30*n+30; iter++ {
		w := residualGrad()
		best, jmax := tol, -1
		for j := range n {
			if !passive[j] && w[j] > best {
				best, jmax = w[j], j
			}
		}
		if jmax < 0 {
			break
		}
		passive[jmax] = true
		for inner := 0; inner < 30*n+30; inner++ {
			z, err := solve()
			if err != nil {
				return nil, err
			}
			feasible := true
			for j := range n {
				if passive[j] && nonneg[j] && z[j] <= 0 {
					feasible = false
				}
			}
			if feasible {
				copy(x, z)
				break
			}
			alpha := math.Inf(1)
			for j := range n {
				if passive[j] && nonneg[j] && z[j] <= 0 {
					alpha = math.Min(alpha, x[j]/(x[j]-z[j]))
				}
			}
			for j := range n {
				x[j] += alpha * (z[j] - x[j])
				if passive[j] && nonneg[j] && math.Abs(x[j]) < 1e-15 {
					passive[j], x[j] = false, 0
				}
			}
		}
	}
	for j := range n {
		x[j] /= scale[j]
	}
	return x, nil
}
