package calibrate

import (
	"gonum.org/v1/gonum/mat"
)

// A residualFunc returns the residual vector at each of several points,
// in order; it may evaluate them in parallel.
type residualFunc func(xs [][]float64) ([][]float64, error)

// An lmResult is where levenbergMarquardt stopped.
type lmResult struct {
	X          []float64
	F          float64 // ‖r(X)‖²
	F0         float64 // ‖r(x0)‖²
	Evals      int     // points evaluated
	Iterations int     // Jacobians computed
	Converged  bool
}

// Settings of levenbergMarquardt.
const (
	// lmStep is the forward-difference step of the Jacobian, in the
	// search's coordinates (5 % on a log scale). It is wide on purpose: a
	// replay's statistics move in small jumps as whole batches shift, and
	// a narrower difference measures a jump rather than the slope.
	lmStep = 0.05
	// lmRelTol ends the search when an accepted step lowers the
	// objective by less than this fraction of it: the targets are
	// quantiles of a few hundred to a few thousand requests, whose own
	// sampling noise is well above 0.1 %.
	lmRelTol = 1e-3
	// lmAbsTol ends it when the objective (a mean squared log error) is
	// below this: every target within about 0.3 %.
	lmAbsTol = 1e-5
	// lmMaxLambda ends it when no damping finds a lower point: at the
	// resolution of lmStep, x is a minimum.
	lmMaxLambda = 1e8
)

// levenbergMarquardt minimises ‖r(x)‖² over x with lower[i] ≤ x[i] ≤
// upper[i] (a nil slice: unbounded; ±Inf: no bound), by
// Levenberg–Marquardt with a forward-difference Jacobian (a backward
// difference where a forward step would leave the box): each iteration
// evaluates the n points x ± h·eᵢ at once (so a caller can replay them in
// parallel), solves
// (JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr, and tries x + δ, raising λ until a
// point is lower. It is deterministic. It stops converged when a step
// gains less than lmRelTol, the objective is under lmAbsTol, or no
// damping helps any more; unconverged when maxEvals points were spent.
//
// Note: Levenberg–Marquardt replaced gonum's Nelder–Mead here because
// the objective is a sum of squares of a few dozen residuals in 3 to 6
// coefficients, two of which (the fixed costs per step and per request)
// are nearly collinear: Nelder–Mead's simplex crawled along that valley
// and did not converge within 300 replays of five runs of 1,000 requests
// (BenchmarkFitReplay5x1000), where a Gauss–Newton step crosses it.
func levenbergMarquardt(res residualFunc, x0, lower, upper []float64, maxEvals int) (lmResult, error) {
	n := len(x0)
	clamp := func(x []float64) {
		for i := range x {
			if lower != nil && x[i] < lower[i] {
				x[i] = lower[i]
			}
			if upper != nil && x[i] > upper[i] {
				x[i] = upper[i]
			}
		}
	}
	x := append([]float64(nil), x0...)
	clamp(x)
	rs, err := res([][]float64{x})
	if err != nil {
		return lmResult{}, err
	}
	r := rs[0]
	f := sumSq(r)
	out := lmResult{X: x, F: f, F0: f, Evals: 1}
	lambda := 1e-3
	for out.Evals < maxEvals {
		if f < lmAbsTol {
			out.Converged = true
			break
		}
		// Forward differences, all n at once; backward ones at an upper
		// bound.
		pts := make([][]float64, n)
		steps := make([]float64, n)
		for j := range n {
			p := append([]float64(nil), x...)
			steps[j] = lmStep
			if upper != nil && x[j]+lmStep > upper[j] {
				steps[j] = -lmStep
			}
			p[j] += steps[j]
			pts[j] = p
		}
		cols, err := res(pts)
		if err != nil {
			return out, err
		}
		out.Evals += n
		out.Iterations++
		m := len(r)
		J := mat.NewDense(m, n, nil)
		for j := range n {
			for i := range m {
				J.Set(i, j, (cols[j][i]-r[i])/steps[j])
			}
		}
		var JtJ mat.Dense
		JtJ.Mul(J.T(), J)
		var g mat.VecDense
		g.MulVec(J.T(), mat.NewVecDense(m, append([]float64(nil), r...)))
		accepted := false
		for out.Evals < maxEvals && lambda <= lmMaxLambda {
			A := mat.DenseCopyOf(&JtJ)
			for j := range n {
				d := JtJ.At(j, j)
				A.Set(j, j, d+lambda*max(d, 1e-12)+1e-12)
			}
			var delta mat.VecDense
			if err := delta.SolveVec(A, &g); err != nil {
				lambda *= 10
				continue
			}
			trial := make([]float64, n)
			for j := range n {
				trial[j] = x[j] - delta.AtVec(j)
			}
			clamp(trial)
			trs, err := res([][]float64{trial})
			if err != nil {
				return out, err
			}
			out.Evals++
			if ft := sumSq(trs[0]); ft < f {
				gain := f - ft
				x, r, f = trial, trs[0], ft
				out.X, out.F = x, f
				lambda = max(lambda/3, 1e-7)
				accepted = true
				if gain < lmRelTol*(f+gain) {
					out.Converged = true
				}
				break
			}
			lambda *= 4
		}
		if out.Converged {
			break
		}
		if !accepted {
			if lambda > lmMaxLambda {
				out.Converged = true // no damping helps: a minimum at this resolution
			}
			break
		}
	}
	return out, nil
}

func sumSq(r []float64) float64 {
	var s float64
	for _, v := range r {
		s += v * v
	}
	return s
}
