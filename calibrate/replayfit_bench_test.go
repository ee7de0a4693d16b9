package calibrate

import (
	"testing"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// BenchmarkFitReplay5x1000 is issue 13's speed target: a fit by replay
// in the loop of five runs of 1,000 requests each (Poisson at 2 to 14
// requests/s on an H100 serving Llama-3.1-8B, one below saturation to one
// past it), with the coefficients chosen as for a user's client-side runs
// (defaultFree: mfu, bandwidth, step overhead and the client's overhead
// per request), must take at most 60 s on a 2-core machine.
func BenchmarkFitReplay5x1000(b *testing.B) {
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
		for _, m := range []string{MetricTTFT, MetricITL, MetricE2E} {
			for _, s := range targetStats {
				r.Targets = append(r.Targets, Target{Metric: m, Stat: s})
			}
		}
		sims, err := evaluate([]*ReplayRun{r}, truth.costModel(), 1)
		if err != nil {
			b.Fatal(err)
		}
		for j := range r.Targets {
			r.Targets[j].Observed = sims[0][j]
		}
		runs = append(runs, r)
	}
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
