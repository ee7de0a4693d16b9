package calibrate

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// poissonRun is n requests at rate per second with uniform lengths,
// seeded.
func poissonRun(n int, rate float64, seed uint64) replay.Requests {
	rng := rand.New(rand.NewPCG(seed, 7))
	var reqs replay.Requests
	var t float64
	for i := range n {
		t += rng.ExpFloat64() / rate
		reqs = append(reqs, &trace.Request{
			RequestID: "r" + string(rune('a'+i%26)), Run: "synthetic", Status: trace.StatusOK,
			InputTokens: trace.Some(int64(200 + rng.IntN(1800))), OutputTokens: trace.Some(int64(50 + rng.IntN(300))),
			Arrival: trace.Some(trace.Time(t * 1e9)),
		})
	}
	return reqs
}

// syntheticRuns replays three loads with the coefficients truth and
// takes their TTFT, ITL and E2E quantiles as the observed targets.
func syntheticRuns(t *testing.T, truth candidate) []*ReplayRun {
	t.Helper()
	return threeLoads(t, "llama-3.1-8b", "synthetic", truth)
}

// threeLoads replays 80 requests of modelName on one H100 at rates 2, 8
// and 20 with the coefficients truth, runs named prefix#1–3, the first
// two training runs, and takes their TTFT, ITL and E2E quantiles as the
// observed targets.
func threeLoads(t *testing.T, modelName, prefix string, truth candidate) []*ReplayRun {
	t.Helper()
	dep := deployment(t, modelName)
	kv, err := dep.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*ReplayRun
	for i, rate := range []float64{2, 8, 20} {
		r := &ReplayRun{
			Label: "rate", Run: trace.Run{Name: prefix + "#" + string(rune('1'+i)), Workload: &trace.Workload{RequestRate: trace.Rate(rate)}}, Deployment: dep,
			Config: replay.DefaultConfig(), KVBlocks: kv / 16, Inputs: poissonRun(80, rate, uint64(i)), Train: i < 2,
		}
		observe(t, r, truth)
		runs = append(runs, r)
	}
	return runs
}

// observe gives r the targets of TTFT, ITL and E2E at every stat of
// targetStats, observed as truth replays r.
func observe(tb testing.TB, r *ReplayRun, truth candidate) {
	tb.Helper()
	for _, m := range []string{MetricTTFT, MetricITL, MetricE2E} {
		for _, s := range targetStats {
			r.Targets = append(r.Targets, Target{Metric: m, Stat: s})
		}
	}
	sims, err := evaluate([]*ReplayRun{r}, truth.costModel(), 1)
	if err != nil {
		tb.Fatal(err)
	}
	for j := range r.Targets {
		r.Targets[j].Observed = sims[0][j]
	}
}

// checkRecovered fails t for each coefficient of within that cm's fit
// did not give back within its relative tolerance of truth, the value
// the runs were replayed with.
func checkRecovered(t *testing.T, cm *CostModel, truth candidate, within map[string]float64) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(within)) {
		got := cm.Coefficients[name].Value
		t.Logf("%s = %.4g (truth %.4g)", name, got, truth[name])
		if math.Abs(got/truth[name]-1) > within[name] {
			t.Errorf("%s = %.4g, the runs were replayed with %.4g", name, got, truth[name])
		}
	}
}

// TestFitReplayRecovers fits runs replayed with known coefficients: the
// fit finds them again within 5 %, reproduces the training runs within
// 3 % and predicts the held-out load (2.5 times the highest training
// rate) within 5 %; with the saturation threshold between the observed
// p99 TTFT of the two highest rates, the calibrated replay saturates at
// the same step.
func TestFitReplayRecovers(t *testing.T) {
	truth := candidate{CoefMFU: 0.3, CoefAttentionMFU: 0.3, CoefBandwidthEff: 0.55, CoefLinkEff: 0.8,
		CoefStepOverhead: 3e-4, CoefRequestOverhead: 0.03}
	runs := syntheticRuns(t, truth)
	free := []string{CoefMFU, CoefBandwidthEff, CoefRequestOverhead}
	p99 := func(r *ReplayRun) float64 { return r.Targets[2].Observed } // ttft p99
	if !(p99(runs[2]) > 1.2*p99(runs[1])) {
		t.Fatalf("p99 TTFT %.4g s at rate 20 against %.4g s at rate 8: no step to find", p99(runs[2]), p99(runs[1]))
	}
	threshold := math.Sqrt(p99(runs[1]) * p99(runs[2]))
	cm, err := FitReplay(runs, ReplayOptions{Free: free, MaxEvals: 300, PriorWeight: -1, SaturationTTFT: threshold})
	if err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, cm, truth, map[string]float64{CoefMFU: 0.05, CoefBandwidthEff: 0.05, CoefRequestOverhead: 0.05})
	holdout := 0
	for _, row := range cm.Replay.Rows {
		if tol := map[string]float64{"train": 0.03, "holdout": 0.05}[row.Set]; math.Abs(row.CalErr) > tol {
			t.Errorf("%s %s (%s): calibrated error %+.1f%%", row.Run, row.Target, row.Set, 100*row.CalErr)
		}
		if row.Set == "holdout" {
			holdout++
		}
	}
	if holdout != 9 {
		t.Errorf("%d held-out rows, want 9", holdout)
	}
	if sat := cm.Replay.Saturation; sat.Observed != "rate 20" || sat.Calibrated != (SaturationVerdict{Step: "rate 20", Verdict: "same step"}) {
		t.Errorf("saturation: %s", sat.Line())
	}
	// The same runs fit again give the same bytes.
	again, err := FitReplay(runs, ReplayOptions{Free: free, MaxEvals: 300, PriorWeight: -1, SaturationTTFT: threshold})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := cm.Marshal()
	b, _ := again.Marshal()
	if string(a) != string(b) {
		t.Error("two fits of the same runs differ")
	}
}

func TestFitReplayBadInput(t *testing.T) {
	runs := syntheticRuns(t, candidate{CoefMFU: 0.35, CoefBandwidthEff: 0.6, CoefLinkEff: 0.8, CoefStepOverhead: 3e-4})
	// Too few evaluations for runs made away from the defaults: not
	// converged, no cost model.
	cm, err := FitReplay(runs, ReplayOptions{MaxEvals: 4})
	if !errors.Is(err, ErrNotConverged) || cm != nil || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("4 evaluations: %v", err)
	}
	// A training run without latencies is named.
	runs[0].Targets = nil
	if _, err := FitReplay(runs, ReplayOptions{}); !errors.Is(err, ErrNoLatencies) || !strings.Contains(err.Error(), "synthetic#1") {
		t.Errorf("run without targets: %v", err)
	}
	// Its caller names the run; the error says what is missing.
	if _, err := ObservedTargets(trace.Run{Name: "empty"}, nil); !errors.Is(err, ErrNoLatencies) || strings.Contains(err.Error(), "empty") {
		t.Errorf("ObservedTargets of a run without latencies: %v", err)
	}
	if _, err := FitReplay(runs[1:], ReplayOptions{Free: []string{"mfu", "colour"}}); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown coefficient: %v", err)
	}
}

// TestReplayAndCalibratePriceAlike: a candidate's step model during the
// fit (PrepareReplay) and the one replay builds from the written
// costmodel.yaml (deploy.Resolve with the parsed file) price every batch
// alike — also on a layout the file was not fitted on (TP4×PP2 from TP8).
func TestReplayAndCalibratePriceAlike(t *testing.T) {
	c := candidate{CoefMFU: 0.41, CoefAttentionMFU: 0.33, CoefBandwidthEff: 0.71, CoefLinkEff: 0.6,
		CoefStepOverhead: 4.2e-4, CoefCollectiveLatency: 7e-6, CoefRequestOverhead: 0.012, CoefChunkOverhead: 2e-4}
	cm := c.costModel()
	cm.Hardware, cm.Model, cm.TP = "h100", "llama-3.1-70b", 8
	data, err := cm.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseCostModel("costmodel.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	batches := []*model.Batch{
		{Decode: []int64{10, 2000, 30000}},
		{Prefill: []model.PrefillChunk{{Tokens: 2048, Context: 512}}, Decode: []int64{100}},
	}
	for _, layout := range []string{"tp: 8\n", "tp: 4\npp: 2\n"} {
		cl, err := deploy.ParseCluster("cluster.yaml", []byte("hardware: h100\nmodel: llama-3.1-70b\n"+layout))
		if err != nil {
			t.Fatal(err)
		}
		setup, err := deploy.Resolve(cl, trace.Run{}, deploy.Overrides{CostModel: parsed})
		if err != nil {
			t.Fatalf("%q: %v", layout, err)
		}
		base, err := cl.Deployment()
		if err != nil {
			t.Fatal(err)
		}
		step, cfg, client, err := PrepareReplay(cm, base, setup.Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range batches {
			if a, r := step.StepTime(b), setup.Step.StepTime(b); a != r || a == base.StepTime(b) {
				t.Errorf("%q: calibrate prices %v, replay %v (defaults %v)", layout, a, r, base.StepTime(b))
			}
		}
		if cfg.Client.LatencySec != 0.006 || client.PerChunkSec != 2e-4 {
			t.Errorf("client overheads: latency %v, per chunk %v", cfg.Client.LatencySec, client.PerChunkSec)
		}
	}
}

func TestClientChunkOverhead(t *testing.T) {
	r := &trace.Request{E2ESec: trace.Some(1.0), ITLSec: []float64{0.001, 0.001, 0.05, 0.001}}
	ClientOverhead{PerChunkSec: 0.01}.ApplyRecord(r)
	// Seen at 0.01, 0.02 (backlog), 0.052 (the chunk came after the
	// client was free), 0.062.
	want := []float64{0.01, 0.01, 0.032, 0.01}
	for i, g := range r.ITLSec {
		if math.Abs(g-want[i]) > 1e-12 {
			t.Errorf("gaps %v, want %v", r.ITLSec, want)
			break
		}
	}
	if math.Abs(r.E2ESec.V-(1+0.062-0.053)) > 1e-12 {
		t.Errorf("E2E %v, want the backlog of the last chunk added", r.E2ESec.V)
	}
	_ = time.Second
}
