package calibrate

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/optimize"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// BenchmarkFitReplay5x1000 is issue 13's speed target: a fit by replay
// in the loop of five runs of 1,000 requests each (Poisson at 2 to 14
// requests/s on an H100 serving Llama-3.1-8B, one below saturation to one
// past it), with the coefficients chosen as for a user's client-side runs
// (defaultFree: mfu, the bandwidth efficiencies of weight and KV reads,
// step overhead and the client's overhead per request), must take at
// most 60 s on a 2-core machine.
func BenchmarkFitReplay5x1000(b *testing.B) {
	runs := fitReplay5x1000Runs(b)
	b.ResetTimer()
	for range b.N {
		cm, err := FitReplay(runs, ReplayOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(cm.Replay.Evaluations), "evals/op")
		b.ReportMetric(cm.Replay.Objective, "objective")
	}
}

// fitReplay5x1000Runs are the five synthetic runs of
// BenchmarkFitReplay5x1000, their targets simulated with known
// coefficients.
func fitReplay5x1000Runs(b *testing.B) []*ReplayRun {
	truth := candidate{CoefMFU: 0.3, CoefAttentionMFU: 0.3, CoefBandwidthEff: 0.55, CoefLinkEff: 0.8,
		CoefStepOverhead: 3e-4, CoefRequestOverhead: 0.03}
	dep := deployment(b, "llama-3.1-8b")
	kv, err := dep.KVCacheTokens(0.9)
	if err != nil {
		b.Fatal(err)
	}
	var runs []*ReplayRun
	for i, rate := range []float64{2, 5, 8, 11, 14} {
		r := &ReplayRun{
			Label: "rate", Run: trace.Run{Name: "synthetic#" + string(rune('1'+i))}, Deployment: dep,
			Config: replay.DefaultConfig(), KVBlocks: kv / 16, Inputs: poissonRun(1000, rate, uint64(i)), Train: true,
		}
		observe(b, r, truth)
		runs = append(runs, r)
	}
	return runs
}

// BenchmarkFitReplayNelderMead5x1000 is the comparison that made
// Levenberg–Marquardt FitReplay's optimiser (levmar.go): gonum's
// Nelder–Mead on the same problem as BenchmarkFitReplay5x1000 (the same
// runs, coefficients, box and objective), with the 300 replays FitReplay
// allows by default. It reports the replays it used and the objective it
// reached, to set beside the LM benchmark's.
func BenchmarkFitReplayNelderMead5x1000(b *testing.B) {
	runs := fitReplay5x1000Runs(b)
	p, err := newReplayProblem(runs, ReplayOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// Nelder–Mead has no box: a point outside is priced at its
	// projection, as levenbergMarquardt clamps its trial points.
	project := func(x []float64) []float64 {
		y := slices.Clone(x)
		for i := range y {
			y[i] = min(max(y[i], p.lower[i]), p.upper[i])
		}
		return y
	}
	b.ResetTimer()
	for range b.N {
		evals := 0
		var evalErr error
		problem := optimize.Problem{Func: func(x []float64) float64 {
			evals++
			rs, err := p.residuals([][]float64{project(x)})
			if err != nil {
				evalErr = err
				return math.Inf(1)
			}
			return sumSq(rs[0])
		}}
		res, err := optimize.Minimize(problem, make([]float64, len(p.freeSpecs)),
			&optimize.Settings{FuncEvaluations: p.opts.MaxEvals, Converger: &optimize.FunctionConverge{Absolute: lmAbsTol, Relative: lmRelTol, Iterations: 20}},
			&optimize.NelderMead{})
		if evalErr != nil {
			b.Fatal(evalErr)
		}
		if err != nil && res == nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(evals), "evals/op")
		b.ReportMetric(res.F, "objective")
		converged := 0.0
		if res.Status == optimize.FunctionConvergence {
			converged = 1
		}
		b.ReportMetric(converged, "converged")
	}
}
