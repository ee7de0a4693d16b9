package calibrate

import (
	"fmt"
	"math/bits"
	"strings"
)

// DefaultRestarts is how many times FitReplay restarts its descent from
// the best minimum found so far, displaced (ReplayOptions.Restarts).
//
// Why restart at all: a replay's statistics move in jumps as whole
// batches shift, so the objective has shallow local minima that
// Levenberg–Marquardt's wide finite differences cannot see past. On the
// DataCrunch Llama-3.3-70B sweep (scripts/fidelity), a change of 0.04 %
// in the KV pool moved the single descent from a minimum of 0.0337 to
// one of 0.0378, and the held-out rate-8 E2E error from +11 % to +27 %;
// six restarts from that second minimum all reached 0.0335–0.0338.
// Two restarts found it in that case and cost about three times the
// replays of one descent.
const DefaultRestarts = 2

// lmKick is how far a restart starts from the best minimum so far along
// every coordinate of the search, in its units: 0.4 on a log scale is a
// factor of 1.49 (or 1/1.49) on an efficiency or a per-step cost, and
// 0.4 units of an additive cost. It is wider than the basins seen on the
// sweeps (the minima above differ by 0.1–0.4 per coordinate) and well
// inside the range a coefficient is searched over.
const lmKick = 0.4

// restartedLM runs levenbergMarquardt from x0 and then restarts times,
// each from the best converged point found so far moved by ±lmKick along
// every coordinate (the signs of row k+1 of a Walsh–Hadamard matrix, so
// that each restart leaves in a different direction), clamped to the
// bounds. Each descent may spend maxEvals points. It returns the lowest
// converged minimum, with F0 the objective at x0 and Evals and
// Iterations summed over every descent, and each descent's result in
// order. When the first descent does not converge it returns that
// descent alone, unconverged: a fit that cannot settle from its own
// defaults is not rescued by a restart. A restart that does not
// converge is not kept. It is deterministic.
func restartedLM(res residualFunc, x0, lower, upper []float64, maxEvals, restarts int) (best lmResult, descents []lmResult, err error) {
	first, err := levenbergMarquardt(res, x0, lower, upper, maxEvals)
	if err != nil {
		return first, nil, err
	}
	descents = []lmResult{first}
	best = first
	if !first.Converged {
		return best, descents, nil
	}
	for k := 1; k <= restarts; k++ {
		start := make([]float64, len(x0))
		for i := range start {
			start[i] = best.X[i] + walshSign(k, i)*lmKick
		}
		d, err := levenbergMarquardt(res, start, lower, upper, maxEvals)
		if err != nil {
			return best, descents, err
		}
		descents = append(descents, d)
		if d.Converged && d.F < best.F {
			best.X, best.F = d.X, d.F
		}
	}
	best.Evals, best.Iterations = 0, 0
	for _, d := range descents {
		best.Evals += d.Evals
		best.Iterations += d.Iterations
	}
	best.F0 = first.F0
	return best, descents, nil
}

// walshSign is entry (k, i+1) of a Sylvester–Hadamard matrix, ±1: the
// parity of the bits k and i+1 share. Two rows j ≠ k differ at least at
// coordinate i = b−1, b the lowest bit of j XOR k, so the first R
// restarts leave in R different directions whenever the search has R
// coordinates or more.
func walshSign(k, i int) float64 {
	if bits.OnesCount(uint(k)&uint(i+1))%2 == 1 {
		return -1
	}
	return 1
}

// describeDescents says which descent a fit kept, for its provenance:
// "descent 2 of 3 kept (objectives 0.0378, 0.0338, 0.0336)".
func describeDescents(descents []lmResult, best lmResult) string {
	fs := make([]string, len(descents))
	kept := 0
	for i, d := range descents {
		fs[i] = fmt.Sprintf("%.4g", d.F)
		if !d.Converged {
			fs[i] += " unconverged"
		}
		if d.Converged && d.F == best.F && kept == 0 {
			kept = i + 1
		}
	}
	return fmt.Sprintf("descent %d of %d kept (objectives %s)", kept, len(descents), strings.Join(fs, ", "))
}
