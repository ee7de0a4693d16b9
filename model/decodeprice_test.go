package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A DecodePricer prices every step as DecodeStepTime does, bit for bit:
// dense, MoE and MLA models, TP, PP and EP, each with the default
// coefficients and with every coefficient of the step's price set (the
// regimes' included), changed after the pricer was made (it reads them
// at each step); it declines what DecodeStepTime declines or prices
// otherwise (sliding-window layers, DP attention).
func TestDecodePricerEqualsDecodeStepTime(t *testing.T) {
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 1))
	for _, name := range []string{"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "granite-3.3-8b"} {
		m := loadSample(t, name)
		for _, p := range []Parallelism{{TP: 1}, {TP: 8}, {TP: 4, PP: 2}, {TP: 2, DP: 4, EP: 8}, {TP: 8, DPAttention: true}} {
			d, err := NewParallelDeployment(hw, m, p)
			if err != nil {
				continue // does not fit, or the layout does not apply
			}
			checked := 0
			for _, n := range []int{1, 2, 3, 4, 5, 17, 32, 33, 160, 161, 700} {
				pr, ok := d.DecodePricer(n)
				if _, sums := d.DecodeStepTime(n, 0); ok != (sums && !d.DPAttention) {
					t.Fatalf("%s %+v: DecodePricer(%d) ok = %v, DecodeStepTime ok = %v", name, p, n, ok, sums)
				}
				if !ok {
					continue
				}
				for coef := range 2 {
					if coef == 1 {
						d.AttentionMFU, d.ExpertMFU, d.KVBandwidthEfficiency = 0.37, 0.21, 0.33
						d.SerialFraction, d.CollectiveLatency = 0.35, 7*time.Microsecond
						d.CUDAGraphMaxBS, d.TorchCompileMaxBS = 160, 32
						d.EagerLayerLaunch, d.UncompiledLayer, d.EagerLayerCPU = 290*time.Microsecond, 13*time.Microsecond, 31*time.Microsecond
					}
					for range 200 {
						ctx := int64(n) * rng.Int64N(1<<rng.IntN(22))
						want, _ := d.DecodeStepTime(n, ctx)
						if got := pr.Price(ctx); got != want {
							t.Fatalf("%s %+v, coefficients %d, %d decodes over %d: Price %d ns, DecodeStepTime %d ns", name, p, coef, n, ctx, got, want)
						}
						checked++
					}
				}
				// Back to the defaults for the next size.
				d, _ = NewParallelDeployment(hw, m, p)
			}
			t.Logf("%s %+v: %d steps checked", name, p, checked)
		}
	}
}
