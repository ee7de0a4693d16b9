package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A DecodePricer prices every step as DecodeStepTime does, bit for bit:
// dense, MoE and MLA models, TP, PP and EP, inter-node links, each with
// the default coefficients and with every coefficient of the step's
// price set (the regimes' included), then changed again; a pricer made
// before a change prices as it did before it (it keeps the coefficients
// it was made with); it declines what DecodeStepTime declines or prices
// otherwise (sliding-window layers, DP attention).
func TestDecodePricerEqualsDecodeStepTime(t *testing.T) {
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 1))
	for _, name := range []string{"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "granite-3.3-8b"} {
		m := loadSample(t, name)
		for _, p := range []Parallelism{{TP: 1}, {TP: 8}, {TP: 4, PP: 2}, {TP: 2, DP: 4, EP: 8}, {TP: 8, DPAttention: true},
			{TP: 4, InterNode: &InterNode{Nodes: 2, Transport: TransportGPUDirectRDMA, Bandwidth: 50e9, LinkPerGPU: true, Latency: 5 * time.Microsecond}},
			{TP: 2, PP: 2, InterNode: &InterNode{Nodes: 2, Transport: TransportRDMA, Bandwidth: 25e9, Latency: 7 * time.Microsecond}}} {
			d, err := NewParallelDeployment(hw, m, p)
			if err != nil {
				continue // does not fit, or the layout does not apply
			}
			checked := 0
			for _, n := range []int{1, 2, 3, 4, 5, 17, 32, 33, 160, 161, 700} {
				_, ok := d.DecodePricer(n)
				if _, sums := d.DecodeStepTime(n, 0); ok != (sums && !d.DPAttention) {
					t.Fatalf("%s %+v: DecodePricer(%d) ok = %v, DecodeStepTime ok = %v", name, p, n, ok, sums)
				}
				if !ok {
					continue
				}
				var prev *DecodePricer // made with the coefficients before
				var prevCtx []int64
				var prevWant []time.Duration
				for coef := range 3 {
					switch coef {
					case 1:
						d.AttentionMFU, d.ExpertMFU, d.KVBandwidthEfficiency = 0.37, 0.21, 0.33
						d.SerialFraction, d.CollectiveLatency = 0.35, 7*time.Microsecond
						d.CUDAGraphMaxBS, d.TorchCompileMaxBS = 160, 32
						d.EagerLayerLaunch, d.UncompiledLayer, d.EagerLayerCPU = 290*time.Microsecond, 13*time.Microsecond, 31*time.Microsecond
					case 2:
						// Every step eager, KV at the weights' efficiency,
						// small steps bound by their launches.
						d.MFU, d.AttentionMFU, d.KVBandwidthEfficiency, d.LinkEfficiency = 0.41, 0, 0, 0.6
						d.CUDAGraphMaxBS, d.TorchCompileMaxBS, d.StepOverhead = -1, 0, 3*time.Millisecond
						d.EagerLayerCPU = 400 * time.Microsecond
					}
					pr, _ := d.DecodePricer(n)
					for i, ctx := range prevCtx {
						if got := prev.Price(ctx); got != prevWant[i] {
							t.Fatalf("%s %+v, coefficients %d changed, %d decodes over %d: the pricer made before prices %d ns, %d before the change", name, p, coef, n, ctx, got, prevWant[i])
						}
					}
					prevCtx, prevWant = prevCtx[:0], prevWant[:0]
					for range 200 {
						ctx := int64(n) * rng.Int64N(1<<rng.IntN(22))
						want, _ := d.DecodeStepTime(n, ctx)
						if got := pr.Price(ctx); got != want {
							t.Fatalf("%s %+v, coefficients %d, %d decodes over %d: Price %d ns, DecodeStepTime %d ns", name, p, coef, n, ctx, got, want)
						}
						prevCtx, prevWant = append(prevCtx, ctx), append(prevWant, want)
						checked++
					}
					prev = pr
				}
				// Back to the defaults for the next size.
				d, _ = NewParallelDeployment(hw, m, p)
			}
			t.Logf("%s %+v: %d steps checked", name, p, checked)
		}
	}
}

// BenchmarkDecodePrice prices the steps of a steady batch of 16 decodes
// (sums advancing by 16 a step, as replay's priceCursor asks them above
// its tables' batch sizes), by the pricer and by DecodeStepTime, the form
// it replaces, on llama-3.1-8b on an H100 with the default coefficients.
func BenchmarkDecodePrice(b *testing.B) {
	d := newH100(b, "llama-3.1-8b", 1)
	const n = 16
	b.Run("pricer", func(b *testing.B) {
		pr, _ := d.DecodePricer(n)
		ctx := int64(n * 1000)
		for b.Loop() {
			pr.Price(ctx)
			ctx += n
		}
	})
	b.Run("DecodeStepTime", func(b *testing.B) {
		ctx := int64(n * 1000)
		for b.Loop() {
			d.DecodeStepTime(n, ctx)
			ctx += n
		}
	})
}
