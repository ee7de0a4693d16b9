package calibrate

import (
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// TestReplayRunTiers: a run's KV tiers (ReplayRun.Offload) are in its
// replays. A run sent all at once after a run of the same prompts, on a
// GPU that holds a fifth of them, finds the rest in a host tier that
// holds them all: its median TTFT falls below the replay without the
// tier, which recomputes them.
func TestReplayRunTiers(t *testing.T) {
	dep := deployment(t, "llama-3.1-8b")
	node, err := model.NodeByName("hgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	prev, run, cm := sweepPair(dep, 1400) // 22,400 tokens: a fifth of the 100 prompts
	run.After = prev

	without, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	run.Offload = &replay.Offload{Node: node, GPUsPerWorker: 1, KVBytesPerToken: dep.KVBytesPerTokenPerRank(), BlockTokens: 16, HostBlocks: 20_000}
	prev.Offload = run.Offload
	with, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	w, wo := quantileOf(with[MetricTTFT], 50), quantileOf(without[MetricTTFT], 50)
	if !(w < 0.8*wo) {
		t.Errorf("median TTFT %.4g s with a host tier, %.4g s without: the tier did not serve the prompts the GPU lost", w, wo)
	}
	t.Logf("median TTFT: %.4g s with a host tier, %.4g s without", w, wo)
}

// TestReplayRunPrefillPool: a prefill pool of its own deployment
// (ReplayRun.Prefill) prices its workers' steps with the cost model's
// coefficients on its layout: prefills on TP2 workers are faster than on
// the cluster's TP1 ones; the run before is replayed with the pool too
// (CarryAfter's offset is its end on it); its layout is a second one, so
// the default fit takes the collectives' latency; and runShares replays
// the run with the pool. (It prices a prefill worker's steps by the
// pool's deployment, which the shares here cannot show: the weights' and
// KV's times per rank both halve on TP2.)
func TestReplayRunPrefillPool(t *testing.T) {
	dep := deployment(t, "llama-3.1-8b")
	tp2, err := model.NewDeployment(dep.Hardware, dep.LLM, 2)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := dep.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	cfg := replay.DefaultConfig()
	cfg.Workers = 2
	cfg.Disaggregation = replay.DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: dep.LLM.KVBytesPerToken(), TransferGBps: 50, TransferLatencySec: 1e-4}
	cm := candidate{CoefMFU: 0.4, CoefBandwidthEff: 0.6, CoefStepOverhead: 3e-4}.costModel()
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	run := &ReplayRun{Run: trace.Run{Name: "p#1"}, Deployment: dep, Config: cfg, KVBlocks: kv / 16, Inputs: poissonRun(60, 2, 3),
		Targets: []Target{{Metric: MetricTTFT, Stat: "p50"}}, Train: true}
	one, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	run.Prefill, run.PrefillKVBlocks = tp2, kv/16
	two, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mean(two[MetricPrefill]), mean(one[MetricPrefill]); !(a < 0.8*b) {
		t.Errorf("mean prefill %.4g s on TP2 prefill workers, %.4g s on TP1: want TP2's well below", a, b)
	}

	// The run before, on the pool: its end, and the offset, move with
	// the pool's speed.
	opt1, err := run.options(cm)
	if err != nil {
		t.Fatal(err)
	}
	slow := candidate{CoefMFU: 0.04, CoefBandwidthEff: 0.6, CoefStepOverhead: 3e-4}.costModel()
	opt2, err := (&ReplayRun{Deployment: dep, Prefill: tp2, PrefillKVBlocks: kv / 16}).options(slow)
	if err != nil {
		t.Fatal(err)
	}
	step, _, _, err := PrepareReplay(cm, dep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []trace.Time
	for _, opt := range []replay.Options{opt1, opt2} {
		c, err := CarryAfter(cfg, step, kv/16, poissonRun(60, 2, 3), poissonRun(10, 2, 4), opt)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, c.offset)
	}
	if !(offsets[1] > offsets[0]) {
		t.Errorf("the run before ends at %v on the prefill pool at mfu 0.4 and %v at 0.04: the pool's speed did not reach it", offsets[0], offsets[1])
	}

	sh, err := runShares(run)
	if err != nil {
		t.Fatal(err)
	}
	run.Prefill = nil
	shOne, err := runShares(run)
	if err != nil {
		t.Fatal(err)
	}
	if sh == shOne {
		t.Errorf("runShares gives %+v with a TP2 prefill pool and the same on TP1: the run was not replayed with the pool", sh)
	}
	free, _ := defaultFree([]*ReplayRun{run}, shOne)
	run.Prefill = tp2
	freeTwo, _ := defaultFree([]*ReplayRun{run}, sh)
	if slices.Contains(free, CoefCollectiveLatency) || !slices.Contains(freeTwo, CoefCollectiveLatency) {
		t.Errorf("%s free on one layout: %v; on two (a TP2 prefill pool): %v; want it free on two alone", CoefCollectiveLatency, slices.Contains(free, CoefCollectiveLatency), slices.Contains(freeTwo, CoefCollectiveLatency))
	}
}
