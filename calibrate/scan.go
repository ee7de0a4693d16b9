package calibrate

import "slices"

// boundScan are the values, in units of its search scale, at which
// scanStart tries a coefficient whose effect is a bound (coefSpec.scan):
// 0 and 1 to 32 units doubling (eager_layer_cpu_s: 0.1 to 3.2 ms a layer,
// 8 to 256 ms a step of an 80-layer model, from below the GPU time of
// any eager step to above that of a large prefill chunk).
var boundScan = []float64{0, 1, 2, 4, 8, 16, 32}

// scanStart returns x moved, for each coefficient that enters as a bound
// (a max with the rest of the step), to the value of boundScan with the
// lowest objective, the others held; and the objective at x itself when
// a scanned value equals it. Such a coefficient has no gradient where it
// does not bind, which is everywhere at its default 0, so
// Levenberg–Marquardt never moves it from there; the scan finds the
// basin it binds in, if one lowers the objective. Coefficients are
// scanned one after another, each at the best value of the ones before.
// Deterministic.
func scanStart(res residualFunc, specs []coefSpec, x, lower, upper []float64) (start []float64, fx float64, evals int, err error) {
	start = slices.Clone(x)
	fx = -1
	for i, s := range specs {
		if !s.scan {
			continue
		}
		var xs [][]float64
		for _, v := range boundScan {
			y := slices.Clone(start)
			y[i] = min(max(v, lower[i]), upper[i])
			xs = append(xs, y)
		}
		rs, err := res(xs)
		if err != nil {
			return nil, 0, evals, err
		}
		evals += len(xs)
		best := -1
		var bestF float64
		for k, r := range rs {
			f := sumSq(r)
			if fx < 0 && slices.Equal(xs[k], x) {
				fx = f
			}
			if best < 0 || f < bestF {
				best, bestF = k, f
			}
		}
		start = xs[best]
	}
	return start, fx, evals, nil
}

// scanDescent follows the restarted descents: at the best minimum it
// scans each bound coefficient (scanStart) and, when that moves one,
// descends once more from there, keeping the lower minimum. A bound the
// training runs do not bind anywhere it was scanned stays where the
// descents left it (its default, 0).
func scanDescent(res residualFunc, specs []coefSpec, best lmResult, descents []lmResult, lower, upper []float64, maxEvals int) (lmResult, []lmResult, error) {
	start, _, n, err := scanStart(res, specs, best.X, lower, upper)
	if err != nil {
		return best, descents, err
	}
	best.Evals += n
	if n == 0 || slices.Equal(start, best.X) {
		return best, descents, nil
	}
	d, err := levenbergMarquardt(res, start, lower, upper, maxEvals)
	if err != nil {
		return best, descents, err
	}
	descents = append(descents, d)
	best.Evals += d.Evals
	best.Iterations += d.Iterations
	if d.Converged && d.F < best.F {
		best.X, best.F = d.X, d.F
	}
	return best, descents, nil
}
