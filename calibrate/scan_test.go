package calibrate

import (
	"math"
	"testing"

	"github.com/opaltrace/opaltrace/model"
)

// TestScanStartFindsTheBound: a residual that a coefficient moves only
// above 3 (a bound, max(x, 3)) has no gradient at its default 0, so
// Levenberg–Marquardt from there stays put; scanStart moves it to the
// scanned value with the lowest objective (4, of 0, 1, 2, 4, 8, 16, 32),
// from where the descent reaches the minimum at 5. A coefficient not
// marked scan is left where it was, and f0 is the objective at x0.
func TestScanStartFindsTheBound(t *testing.T) {
	res := func(xs [][]float64) ([][]float64, error) {
		out := make([][]float64, len(xs))
		for k, x := range xs {
			out[k] = []float64{max(x[0], 3) - 5, x[1] - 1}
		}
		return out, nil
	}
	specs := []coefSpec{{name: "bound", scan: true, unit: 1}, {name: "plain", unit: 1}}
	x0, lower, upper := []float64{0, 0}, []float64{0, 0}, []float64{math.Inf(1), math.Inf(1)}
	stuck, err := levenbergMarquardt(res, x0, lower, upper, 100)
	if err != nil {
		t.Fatal(err)
	}
	if stuck.X[0] != 0 {
		t.Fatalf("premise: from 0 the descent moved the bound to %g", stuck.X[0])
	}
	start, f0, evals, err := scanStart(res, specs, stuck.X, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if start[0] != 4 || math.Abs(start[1]-1) > 1e-3 || math.Abs(f0-4) > 1e-6 || evals != len(boundScan) {
		t.Fatalf("scan start %v, f0 %g, %d evaluations; want [4 1], 4, %d", start, f0, evals, len(boundScan))
	}
	got, err := levenbergMarquardt(res, start, lower, upper, 100)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.X[0]-5) > 1e-3 || math.Abs(got.X[1]-1) > 1e-3 {
		t.Errorf("descent from the scan: %v, want [5 1]", got.X)
	}
}

// TestFitReplayRecoversEagerLayerCPU: runs replayed on SGLang workers
// that replay CUDA graphs up to 8 decodes, with a host launch time of
// 400 µs a layer (12.8 ms a step of Llama-3.1-8B's 32 layers, above the
// GPU time of its small eager steps and below that of its large
// prefills), give it back within 10 % when it is fitted, from its
// default 0 (the scan), and the weights' bandwidth efficiency within
// 5 %.
func TestFitReplayRecoversEagerLayerCPU(t *testing.T) {
	truth := candidate{CoefMFU: model.DefaultMFU, CoefAttentionMFU: model.DefaultMFU, CoefBandwidthEff: 0.6, CoefLinkEff: 0.8,
		CoefStepOverhead: 3e-4, CoefEagerLayerCPU: 400e-6}
	dep := deployment(t, "llama-3.1-8b")
	dep.CUDAGraphMaxBS = 8
	var runs []*ReplayRun
	for i, rate := range []float64{4, 40} {
		runs = append(runs, sglangRun(t, dep, "eager#"+string(rune('1'+i)), rate, poissonRun(150, rate, uint64(20+i)), truth))
	}
	bound := 0
	step := *dep
	truth.costModel().Apply(&step)
	gpu := *dep
	candidate{CoefMFU: model.DefaultMFU, CoefAttentionMFU: model.DefaultMFU, CoefBandwidthEff: 0.6, CoefLinkEff: 0.8, CoefStepOverhead: 3e-4}.costModel().Apply(&gpu)
	for _, n := range []int{9, 16, 32, 64} {
		batch := &model.Batch{Decode: make([]int64, n)}
		for i := range batch.Decode {
			batch.Decode[i] = 1000
		}
		if step.StepTime(batch) != gpu.StepTime(batch) {
			bound++
		}
	}
	if bound == 0 {
		t.Fatal("premise: no eager decode batch of 9–64 is launch-bound at the truth")
	}
	cm, err := FitReplay(runs, ReplayOptions{Free: []string{CoefBandwidthEff, CoefEagerLayerCPU}, MaxEvals: 200, PriorWeight: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("objective %.4g from %.4g in %d replays: %s", cm.Replay.Objective, cm.Replay.Uncalibrated, cm.Replay.Evaluations, cm.Replay.Optimiser)
	checkRecovered(t, cm, truth, map[string]float64{CoefBandwidthEff: 0.05, CoefEagerLayerCPU: 0.1})
}
