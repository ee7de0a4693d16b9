package replay

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

var pdScaleDemo = flag.Bool("pdscaledemo", false, "replay the Azure conversation trace with prefill/decode pools autoscaled and write testdata/disaggscale_azure.md")

// TestDisaggregatedAutoscaleAzure replays the Azure conversation trace at
// its own times on Llama-3.1-8B A10 workers, as testdata/autoscale_azure.md
// does, disaggregated: a fixed split of the pools, each pool sized by its
// own HPA, the decode pool alone sized, and one HPA over a fleet without
// disaggregation beside them; it writes the GPU-hours, latencies and ready
// workers to testdata/disaggscale_azure.md (run with -pdscaledemo).
func TestDisaggregatedAutoscaleAzure(t *testing.T) {
	reqs := readAzure(t, shareddata.Path(t, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
	cost, blocks := llama8BOn(t, "a10")
	dep := cost.(*model.Deployment)
	// What package deploy derives for this deployment: the KV of a
	// prompt token (TP 1: one rank's) over the node's network.
	net := model.NodeFor(dep.Hardware).Network
	pd := func(prefill int) DisaggregationConfig {
		return DisaggregationConfig{PrefillWorkers: prefill, KVBytesPerToken: dep.KVBytesPerTokenPerRank(),
			TransferGBps: net.Bandwidth / 1e9, TransferLatencySec: net.Latency.Seconds(), DecodeRouter: DecodeLeastRequests}
	}
	hpa := func(metric string, target float64, most int) AutoscaleConfig {
		return AutoscaleConfig{Metric: metric, Target: target, MinReplicas: ptrInt(1), MaxReplicas: most,
			ScaleDownStabilizationSec: ptr(60), ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2}
	}
	both := pd(1)
	both.PrefillAutoscale, both.DecodeAutoscale = hpa(MetricQueueDepth, 2, 8), hpa(MetricKVUsage, 0.5, 12)
	decodeOnly := pd(2)
	decodeOnly.DecodeAutoscale = hpa(MetricKVUsage, 0.5, 12)
	// Dynamo's SLA planner at its defaults (TTFT 0.5 s, ITL 50 ms, every
	// 180 s) but its budget: 16 GPUs, as the HPAs' 8 + 12 at most.
	planned := pd(2)
	planned.Planner = PlannerConfig{Policy: PlannerDynamoSLA, MaxGPUBudget: 16, ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2}
	// The same with Dynamo's Kalman predictor at its defaults.
	kalman := planned
	kalman.Planner.Predictor = PredictorKalman
	runs := []struct {
		name string
		cfg  Config
	}{
		{"one fleet, HPA on queue_depth 2 (1–16), no disaggregation", Config{Workers: 2, Router: RouterLeastRequests, Autoscale: hpa(MetricQueueDepth, 2, 16)}},
		{"disaggregated, 2 prefill + 6 decode, fixed", Config{Workers: 8, Router: RouterLeastRequests, Disaggregation: pd(2)}},
		{"disaggregated, prefill HPA on queue_depth 2 (1–8), decode HPA on kv_usage 0.5 (1–12)", Config{Workers: 2, Router: RouterLeastRequests, Disaggregation: both}},
		{"disaggregated, 2 prefill fixed, decode HPA on kv_usage 0.5 (1–12)", Config{Workers: 3, Router: RouterLeastRequests, Disaggregation: decodeOnly}},
		{"disaggregated, Dynamo's SLA planner (TTFT 0.5 s, ITL 50 ms, every 180 s, constant predictor; 16 GPUs), from 2 + 2", Config{Workers: 4, Router: RouterLeastRequests, Disaggregation: planned}},
		{"disaggregated, the same planner with its Kalman predictor (q_level 1, q_trend 0.1, r 10)", Config{Workers: 4, Router: RouterLeastRequests, Disaggregation: kalman}},
	}
	const bucket = 120
	arrivals := make([]int, 0)
	for _, r := range reqs {
		k := int(float64(r.Arrival.V)/1e9) / bucket
		for len(arrivals) <= k {
			arrivals = append(arrivals, 0)
		}
		arrivals[k]++
	}
	var b strings.Builder
	b.WriteString("# Prefill/decode pools autoscaled on the Azure conversation trace\n\n")
	b.WriteString("19,366 requests at their own times, Llama-3.1-8B on A10 workers (24 GB), least_requests router (and decode\n")
	b.WriteString("router), vLLM's KV connector: a prompt token's KV is 131,072 bytes, sent at the node's network's 40 GB/s, 0.4 ms\n")
	b.WriteString("a transfer. Each HPA: sync 15 s, tolerance 0.1, scale-up window 0 s, scale-down window 60 s; a new worker is\n")
	b.WriteString("ready after 30 s + 16 GB of weights at 2 GB/s = 38 s. The pools start at one worker each (or the fixed\n")
	b.WriteString("pool's two; the SLA planner's from 2 + 2, its start-up the HPAs'). TPOT is each request's (E2E − TTFT) /\n")
	b.WriteString("(output − 1). r: Pearson's correlation of the arrivals\n")
	b.WriteString("and the pool's ready workers per 2 min.\n")
	b.WriteString("Regenerate: go test ./replay -run TestDisaggregatedAutoscaleAzure -pdscaledemo\n\n")
	b.WriteString("| fleet | GPU-hours | TTFT p50 (s) | TTFT p99 (s) | TPOT p50 (ms) | TPOT p99 (ms) | prefill ready, mean | decode ready, mean | r prefill | r decode |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var pools [][2][]float64 // per run, per 2 min: the pools' ready workers
	var plan []PlannerAdjustment
	for _, run := range runs {
		var ttft, tpot []float64
		st, err := Run(run.cfg, cost, blocks, reqs, func(r *trace.Request) error {
			if r.Status == trace.StatusOK {
				ttft = append(ttft, r.TTFTSec.V)
				if n := r.OutputTokens.V; n > 1 {
					tpot = append(tpot, (r.E2ESec.V-r.TTFTSec.V)/float64(n-1)*1e3)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed != len(reqs) {
			t.Errorf("%s: %d of %d completed", run.name, st.Completed, len(reqs))
		}
		var ready [2][]float64
		ready[0], ready[1] = make([]float64, len(arrivals)), make([]float64, len(arrivals))
		var mean [2]float64
		gpuHours := st.GPUHours
		if st.Fleet == nil {
			// A fixed fleet: its workers the whole run.
			d := run.cfg.Disaggregation
			for k := range arrivals {
				ready[0][k], ready[1][k] = float64(d.PrefillWorkers), float64(run.cfg.Workers-d.PrefillWorkers)
			}
			mean = [2]float64{ready[0][0], ready[1][0]}
			gpuHours = float64(run.cfg.Workers) * st.End.Seconds() / 3600
		}
		for _, f := range st.Fleet {
			k := int(f.Second / bucket)
			if k < len(arrivals) {
				ready[0][k] += f.PrefillReady / bucket
				ready[1][k] += f.DecodeReady / bucket
			}
			mean[0] += f.PrefillReady / float64(len(st.Fleet))
			mean[1] += f.DecodeReady / float64(len(st.Fleet))
		}
		pools = append(pools, ready)
		if st.Planner != nil && plan == nil {
			plan = st.Planner // the constant predictor's
		}
		slices.Sort(ttft)
		slices.Sort(tpot)
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.2f | %.2f |", run.name, gpuHours, quantile(ttft, 0.5), quantile(ttft, 0.99), quantile(tpot, 0.5), quantile(tpot, 0.99))
		if run.cfg.Disaggregation.on() {
			n := len(arrivals) - 1 // the last 2 min are partial
			fmt.Fprintf(&b, " %.2f | %.2f | %s | %s |\n", mean[0], mean[1], pdR(arrivals[:n], ready[0][:n]), pdR(arrivals[:n], ready[1][:n]))
		} else {
			b.WriteString(" — | — | — | — |\n")
		}
	}
	b.WriteString("\nReady workers of each pool with both pools autoscaled, mean over each 2 minutes (the last is partial):\n\n")
	b.WriteString("| minute | arrivals | prefill | decode |\n|---|---|---|---|\n")
	for k := range arrivals {
		p, d := pools[2][0][k], pools[2][1][k]
		fmt.Fprintf(&b, "| %d | %d %s | %.2f %s | %.2f %s |\n", k*bucket/60, arrivals[k], strings.Repeat("▮", (arrivals[k]+50)/100),
			p, strings.Repeat("█", int(p+0.5)), d, strings.Repeat("█", int(d+0.5)))
	}
	b.WriteString("\nThe SLA planner's adjustments: what it observed of the requests completed in the 180 s before (their number,\n")
	b.WriteString("mean TTFT, ITL per token, ISL, OSL), its correction factors, what its profile gave (one request's prefill\n")
	b.WriteString("at the ISL; a decode worker's best output tokens a second within the corrected ITL target), and the workers it\n")
	b.WriteString("asked for:\n\n")
	b.WriteString("| at (s) | requests | TTFT (s) | ITL (ms) | ISL | OSL | prefill factor | decode factor | profile prefill (s) | profile decode (tokens/s) | prefill | decode |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range plan {
		if a.Skipped {
			fmt.Fprintf(&b, "| %.0f | %d | skipped |  |  |  |  |  |  |  |  |  |\n", a.At.Seconds(), a.Requests)
			continue
		}
		fmt.Fprintf(&b, "| %.0f | %d | %.3f | %.2f | %.0f | %.0f | %.3f | %.3f | %.4f | %.0f | %d | %d |\n", a.At.Seconds(), a.Requests, a.TTFTSec, a.ITLSec*1e3, a.ISL, a.OSL, a.PrefillFactor, a.DecodeFactor, a.ProfilePrefillSec, a.ProfileDecodeTokensPerSec, a.Prefill, a.Decode)
	}
	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "disaggscale_azure.md"), []byte(b.String()), *pdScaleDemo)
}

// pdR is correlation(a, b), or "—" when b does not vary (a fixed pool).
func pdR(a []int, b []float64) string {
	if slices.Min(b) == slices.Max(b) {
		return "—"
	}
	return fmt.Sprintf("%.3f", correlation(a, b))
}
