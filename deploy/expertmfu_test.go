package deploy

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

var expertMFUExperiment = flag.Bool("expertmfu", false, "rewrite testdata/expert_mfu.md and expert_mfu_regimes.md, the expert_mfu held-out experiment's tables (the DataCrunch DeepSeek run and the Mooncake documentation's H800 rounds, each fitted and predicted from the other), instead of checking them")

// dc405Fit are the coefficients scripts/fidelity's datacrunch-405b section
// fits by replay in the loop (Llama-3.1-405B, 8 × H200 TP 8, SGLang; the
// README's fidelity section as regenerated on 8a56fad): the dense model
// on the DeepSeek run's GPUs and layout. attention_mfu is tied to mfu
// there, as here.
var dc405Fit = map[string]float64{
	calibrate.CoefMFU:              0.4634,
	calibrate.CoefAttentionMFU:     0.4634,
	calibrate.CoefBandwidthEff:     0.5576,
	calibrate.CoefEagerLayerLaunch: 8.774e-05,
	calibrate.CoefStepOverhead:     0.0003003,
}

// dc405Fixed is dc405Fit as a replay fit's fixed coefficients
// (attention_mfu follows mfu by itself).
func dc405Fixed() map[string]float64 {
	f := map[string]float64{}
	for k, v := range dc405Fit {
		if k != calibrate.CoefAttentionMFU {
			f[k] = v
		}
	}
	return f
}

// applyDC405 sets d's coefficients to dc405Fit, through the cost model's
// apply path as replay does, with the routed experts at expertMFU (0:
// at mfu).
func applyDC405(d *model.Deployment, expertMFU float64) {
	cm := &calibrate.CostModel{Version: calibrate.CostModelVersion, Form: model.FormRoofline, Coefficients: map[string]calibrate.Coefficient{}}
	for k, v := range dc405Fit {
		cm.Coefficients[k] = calibrate.Coefficient{Value: v}
	}
	d.ExpertMFU = 0
	if expertMFU > 0 {
		cm.Coefficients[calibrate.CoefExpertMFU] = calibrate.Coefficient{Value: expertMFU}
	}
	cm.Apply(d)
}

// bisect halves [lo, hi] steps times, keeping the upper half where up(mid)
// holds (the root lies above mid), and returns the last midpoint: the
// fits of the H800 chart's coefficients, each a monotone replay against
// one measured number.
func bisect(lo, hi float64, steps int, up func(mid float64) bool) float64 {
	for range steps {
		mid := (lo + hi) / 2
		if up(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// applyH800 is applyDC405 with, when stepOverhead (s) is above 0, the
// fixed cost per step at it instead of the 405B fit's.
func applyH800(d *model.Deployment, expertMFU, stepOverhead float64) {
	applyDC405(d, expertMFU)
	if stepOverhead > 0 {
		d.StepOverhead = time.Duration(math.Round(stepOverhead * 1e9))
	}
}

// regimeRow prices batch b on d at dc405Fit term by term (ms), and the
// routed experts' GEMM as a roofline of its own: tokens an expert
// multiplies (n·k/E for n tokens of the MLP), its FLOPs per weight byte
// (2 per token per weight, over the bytes of a weight) against the GPU's
// ridge point (peak FLOP/s over HBM bytes/s, at the peak the experts run
// on).
func regimeRow(t *testing.T, name string, d *model.Deployment, b *model.Batch, mlpTokens float64) string {
	t.Helper()
	applyDC405(d, 0)
	tm := d.Terms(b)
	m := &d.LLM
	ms := func(sec, eff float64) string { return fmt.Sprintf("%.1f", 1e3*sec/eff) }
	perExpert := mlpTokens * float64(m.ExpertsPerToken) / float64(m.NumExperts)
	wbytes := float64(m.WeightBytes)
	if m.ExpertBytes > 0 {
		wbytes = m.ExpertBytes
	}
	peak := d.Hardware.PeakFLOPS
	if m.FP8Compute && d.Hardware.PeakFP8FLOPS > 0 {
		peak = d.Hardware.PeakFP8FLOPS
	}
	intensity := 2 * perExpert / wbytes
	ridge := peak / d.Hardware.MemBandwidth
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.1f× |\n", name,
		ms(tm.LinearSec-tm.ExpertSec, d.MFU), ms(tm.ExpertSec, d.MFU), ms(tm.AttentionSec, d.MFU),
		ms(tm.WeightSec, d.BandwidthEfficiency), ms(tm.KVSec, d.BandwidthEfficiency), ms(tm.CommSec, d.LinkEfficiency),
		fmt.Sprintf("%.1f", d.StepTime(b).Seconds()*1e3), perExpert, intensity, ridge, intensity/ridge)
}

// TestExpertMFURegimes prices the step each case of the expert_mfu
// experiment is made of at the DataCrunch 405B fit's coefficients, term
// by term, so that the note can say which side of the roofline each term
// is on and whether a compute efficiency of the experts' GEMMs can carry
// from one GPU to another: the DataCrunch DeepSeek run's steady decode
// step (each of the 8 DP-attention ranks decoding 1,250 requests at a
// context of 256, the middle of its 512 output tokens: 10,000 tokens
// through the MLPs), the H800 round 1's prefill step (four 2,048-token
// prompts, 8,192 tokens) and the H20 table's 8,192-token prefill
// (testdata/expert_mfu_regimes.md).
func TestExpertMFURegimes(t *testing.T) {
	var b strings.Builder
	b.WriteString("# The steps of the expert_mfu experiment, term by term\n\n")
	b.WriteString("At the DataCrunch Llama-3.1-405B H200 fit's coefficients (mfu 0.4634, bandwidth_efficiency 0.5576, link_efficiency 0.8),\n")
	b.WriteString("expert_mfu = mfu. Milliseconds per step; the step adds the greater of compute and memory, communication, launches and\n")
	b.WriteString("the overhead. Routed-expert GEMM: tokens an expert multiplies (MLP tokens · k / E), its FLOPs per weight byte, the\n")
	b.WriteString("GPU's ridge point (peak FLOP/s of the experts' precision / HBM B/s) and their ratio (above 1: compute-bound).\n")
	b.WriteString("Regenerate: go test ./deploy -run TestExpertMFURegimes -expertmfu\n\n")
	b.WriteString("| step | dense GEMMs | routed experts | attention | weights | KV | comm | step | tokens/expert | FLOP/B | ridge | ratio |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	decode := &model.Batch{Decode: make([]int64, 1250)}
	for i := range decode.Decode {
		decode.Decode[i] = 256
	}
	for _, cand := range deepseekCandidates {
		_, s, _, _ := deepseekSetup(t, cand.name)
		b.WriteString(regimeRow(t, "DeepSeek "+cand.name+" decode, 8×H200 DP attention", s.Deployment, decode, 10000))
	}
	s := resolveYAML(t, h800Cluster)
	round1 := &model.Batch{Prefill: []model.PrefillChunk{{Tokens: 2048}, {Tokens: 2048}, {Tokens: 2048}, {Tokens: 2048}}}
	b.WriteString(regimeRow(t, "Qwen3-235B round-1 prefill, 8×H800 TP 8", s.Deployment, round1, 8192))
	h20 := h20Deployment(t, s.Deployment.LLM)
	b.WriteString(regimeRow(t, "Qwen3-235B 8,192-token prefill, 8×H20-3e TP 8", h20, &model.Batch{Prefill: []model.PrefillChunk{{Tokens: 8192}}}, 8192))
	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "expert_mfu_regimes.md"), []byte(b.String()), *expertMFUExperiment)
}

// h20Deployment is llm at TP 8 on the H20-3e of the Mooncake
// documentation's SGLang PD table (2 nodes of 8 × H20-3e, 143 GB).
func h20Deployment(t *testing.T, llm model.LLM) *model.Deployment {
	t.Helper()
	hw, err := model.HardwareByName("h20-3e")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.NewDeployment(hw, llm, 8)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// deepseekSetup is the DataCrunch DeepSeek run on the candidate launch
// line named, resolved as TestDataCrunchDeepSeekTable resolves it, with
// its requests regenerated from its recorded arguments.
func deepseekSetup(t *testing.T, name string) (trace.Run, *Setup, replay.Inputs, replay.WorkloadConfig) {
	t.Helper()
	for _, cand := range deepseekCandidates {
		if cand.name != name {
			continue
		}
		path := shareddata.Path(t, deepseekFile)
		runs, _, err := ingest.Files([]string{path}, ingest.Options{Model: cand.model, Hardware: "8xH200", TP: 8, Engine: "sglang", EngineOpts: cand.opts},
			func(*trace.Request) error { return nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Resolve(DefaultCluster(), runs[0], Overrides{Measured: true})
		if err != nil {
			t.Fatal(err)
		}
		gen, mode, err := replay.Regenerate(runs[0], s.Config.Seed)
		if err != nil {
			t.Fatal(err)
		}
		return runs[0], s, gen, mode
	}
	t.Fatalf("no DeepSeek candidate %q", name)
	return trace.Run{}, nil, nil, replay.WorkloadConfig{}
}

// deepseekResult is what the DataCrunch DeepSeek run reports, observed or
// replayed: median TTFT, ITL and E2E (s) and output throughput (tok/s).
type deepseekResult struct{ ttft, itl, e2e, tput float64 }

func (r deepseekResult) errors(obs deepseekResult) string {
	e := func(a, b float64) string { return fmt.Sprintf("%+.1f %%", (a/b-1)*100) }
	return fmt.Sprintf("%.0f (%s) | %.1f (%s) | %.0f (%s) | %.0f (%s)",
		1e3*r.ttft, e(r.ttft, obs.ttft), 1e3*r.itl, e(r.itl, obs.itl), 1e3*r.e2e, e(r.e2e, obs.e2e), r.tput, e(r.tput, obs.tput))
}

// deepseekObserved is what the run reported.
func deepseekObserved(t *testing.T, run trace.Run) deepseekResult {
	rep := analyze.ReportedStats(run)
	var reported struct {
		OutputThroughput float64 `json:"output_throughput"`
	}
	if err := json.Unmarshal(run.Reported, &reported); err != nil {
		t.Fatal(err)
	}
	return deepseekResult{rep["ttft"]["p50"], rep["itl"]["p50"], rep["e2el"]["p50"], reported.OutputThroughput}
}

// deepseekReplay replays the candidate named at dc405Fit with the routed
// experts at expertMFU (0: mfu).
func deepseekReplay(t *testing.T, name string, expertMFU float64) deepseekResult {
	t.Helper()
	_, s, gen, mode := deepseekSetup(t, name)
	d := *s.Deployment
	applyDC405(&d, expertMFU)
	sum := replayDeepSeek(t, name, s, &d, gen, mode)
	return deepseekResult{sum.TTFT.Percentile(50), sum.ITL.Percentile(50), sum.E2E.Percentile(50), sum.OutputThroughput}
}

// deepseekFit fits expert_mfu alone to the DataCrunch DeepSeek run on
// the candidate named, by calibrate's replay in the loop, the other
// coefficients fixed at dc405Fit: on every target the run reported
// (its medians of TTFT, ITL and E2E, as `opaltrace calibrate` takes a
// summary-only run, with its default prior weight 0.01) or on its
// median ITL alone (itlOnly, without a prior).
func deepseekFit(t *testing.T, name string, itlOnly bool) (float64, *calibrate.CostModel) {
	t.Helper()
	run, s, gen, mode := deepseekSetup(t, name)
	targets, err := calibrate.ObservedTargets(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if itlOnly {
		var itl []calibrate.Target
		for _, x := range targets {
			if x.Metric == calibrate.MetricITL && x.Stat == "p50" {
				itl = append(itl, x)
			}
		}
		targets = itl
	}
	cfg := s.Config
	cfg.Workload.Mode, cfg.Workload.Clients, cfg.Workload.TimeScale = mode.Mode, mode.Clients, mode.TimeScale
	r := &calibrate.ReplayRun{Label: name, Run: run, Deployment: s.Deployment, Config: cfg, KVBlocks: s.KVBlocks, Inputs: gen, Targets: targets, Train: true}
	opts := calibrate.ReplayOptions{Free: []string{calibrate.CoefExpertMFU}, Fixed: dc405Fixed(), Parallel: 2}
	if itlOnly {
		// One target, one coefficient: the prior would only pull the
		// root toward mfu.
		opts.PriorWeight = -1
	}
	cm, err := calibrate.FitReplay([]*calibrate.ReplayRun{r}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cm.Coefficients[calibrate.CoefExpertMFU].Value, cm
}

// h800RoundTTFT is the H800 chart's round-1 mean TTFT of the GPU-only
// configuration (s): no cache can hit in round 1, so it is the four
// clients' 2,048-token prefills and their queueing alone.
func h800RoundTTFT(t *testing.T, expertMFU, stepOverhead float64, rounds int, seeds []uint64, maxIter int, retokenised bool) [][]float64 {
	t.Helper()
	s := resolveYAML(t, h800Cluster)
	d := *s.Deployment
	applyH800(&d, expertMFU, stepOverhead)
	s.Deployment, s.Step = &d, &d
	out := make([][]float64, rounds)
	for _, seed := range seeds {
		bench := h800Bench(t, seed, rounds, retokenised)
		res, err := replayBench(s, bench, nil, nil, maxIter)
		if err != nil {
			t.Fatalf("expert_mfu %g seed %d: %v", expertMFU, seed, err)
		}
		ttft, _, err := res.roundMeans(bench.clients, rounds)
		if err != nil {
			t.Fatalf("expert_mfu %g seed %d: %v", expertMFU, seed, err)
		}
		for r := range rounds {
			out[r] = append(out[r], ttft[r])
		}
	}
	return out
}

// fitH800Round1 solves for the expert_mfu whose replay gives the H800
// chart's round-1 mean TTFT (GPU only, mean over h800Seeds), everything
// else at dc405Fit (the fixed cost per step at stepOverhead when above
// 0: applyH800): one coefficient against one measured number, by
// bisection on log(expert_mfu) over [0.001, 1] (the replayed TTFT falls
// as the efficiency rises), with the prompts at 2,048 tokens or, when
// retokenised, at the server's counts (h800Bench). It returns the root
// and the TTFT there.
func fitH800Round1(t *testing.T, observed, stepOverhead float64, retokenised bool) (float64, float64) {
	t.Helper()
	at := func(x float64) float64 {
		return mean(h800RoundTTFT(t, x, stepOverhead, 1, h800Seeds, 400, retokenised)[0])
	}
	lo, hi := math.Log(0.001), 0.0
	if at(1) > observed || at(0.001) < observed {
		t.Fatalf("round 1: no expert_mfu in [0.001, 1] gives %.3f s", observed)
	}
	x := math.Exp(bisect(lo, hi, 16, func(mid float64) bool { return at(math.Exp(mid)) > observed }))
	return x, at(x)
}

// h20Increments are the Mooncake documentation's SGLang PD table on
// H20-3e (Qwen3-235B, TP 8, chunked prefill off, concurrency 1) as
// prefill increments: each row's TTFT less its KV transfer, less the
// same at 1,024 tokens, which takes out the PD and proxy floor (~125 ms
// up to 1,024 tokens) whatever it is; and the replay's one-step prefill
// at the same lengths, less its own at 1,024.
func h20Increments(t *testing.T, llm model.LLM, expertMFUs []float64) string {
	t.Helper()
	raw, err := os.ReadFile(shareddata.Path(t, "measurements/mooncake_docs/pd_1p1d_ttft_sglang_h20_qwen3-235b.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var data [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		data = append(data, strings.Split(line, ","))
	}
	type row struct{ n, sec float64 }
	var rows []row
	var base float64
	for i, f := range data {
		if i == 0 {
			if strings.Join(f, ",") != "prompt_tokens,ttft_ms,kv_size,kv_transfer_ms,kv_bandwidth_GBps,bandwidth_utilization_pct" {
				t.Fatalf("H20 table header %q", f)
			}
			continue
		}
		var n, ttft, xfer float64
		if _, err := fmt.Sscan(f[0], &n); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(f[1], &ttft); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(f[3], &xfer); err != nil {
			t.Fatal(err)
		}
		sec := (ttft - xfer) / 1e3
		if n == 1024 {
			base = sec
		}
		if n >= 1024 {
			rows = append(rows, row{n, sec})
		}
	}
	d := h20Deployment(t, llm)
	step := func(n float64) float64 {
		return d.StepTime(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: int64(n)}}}).Seconds()
	}
	var b strings.Builder
	b.WriteString("| prompt tokens | measured increment (ms) |")
	for _, x := range expertMFUs {
		fmt.Fprintf(&b, " %s |", expertLabel(x))
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---:|", len(expertMFUs)) + "\n")
	for _, r := range rows[1:] {
		obs := r.sec - base
		fmt.Fprintf(&b, "| %.0f | %.0f |", r.n, 1e3*obs)
		for _, x := range expertMFUs {
			applyDC405(d, x)
			sim := step(r.n) - step(1024)
			fmt.Fprintf(&b, " %.0f (%+.0f %%) |", 1e3*sim, (sim/obs-1)*100)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func expertLabel(x float64) string {
	if x == 0 {
		return "expert_mfu = mfu"
	}
	return fmt.Sprintf("expert_mfu %.4g", x)
}

// TestExpertMFUHeldOut is the held-out experiment of expert_mfu
// (testdata/expert_mfu.md): with every other coefficient at the
// DataCrunch 405B H200 fit's values (dc405Fit), expert_mfu is fitted on
// (a) the DataCrunch DeepSeek run (summary only: by calibrate's replay
// fit on all of its reported medians, as `opaltrace calibrate` takes
// it, and on its median ITL alone) and on (b) the H800 chart's round 1
// (GPU only, by bisection); each is then used to predict the other, and
// the H20 PD table's prefill increments. It fails when the table
// differs from its golden file; -expertmfu rewrites it. It takes minutes
// (some 12 bench_multiturn solves of 800 requests and a few dozen
// replays of 10,000: 215 s wall on a quiet 2-core machine, 13–16 min at
// load 18), so scripts/test gives go test a longer timeout than its
// default 10 minutes.
func TestExpertMFUHeldOut(t *testing.T) {
	var b strings.Builder
	b.WriteString("# expert_mfu fitted on one MoE run, predicting the other\n\n")
	b.WriteString("Every other coefficient at the DataCrunch Llama-3.1-405B H200 fit's values (mfu = attention_mfu 0.4634,\n")
	b.WriteString("bandwidth_efficiency 0.5576, eager_layer_launch_s 8.774e-05, step_overhead_s 0.0003003; link_efficiency 0.8 by default).\n")
	b.WriteString("Regenerate: go test ./deploy -run TestExpertMFUHeldOut -expertmfu -timeout 60m\n\n")

	// (a) The DataCrunch DeepSeek run.
	run, _, _, _ := deepseekSetup(t, "bf16")
	obs := deepseekObserved(t, run)
	b.WriteString("## (a) DataCrunch DeepSeek-V2, 8×H200, DP attention: expert_mfu fitted by replay in the loop\n\n")
	b.WriteString("Summary only: calibrate takes its reported medians of TTFT, ITL and E2E as targets (its means and throughput are\n")
	b.WriteString("not targets). Fitted on all three (prior weight 0.01, calibrate's default), and on the median ITL alone (one target,\n")
	b.WriteString("one coefficient: exactly determined, no prior). Errors: replayed / observed − 1.\n\n")
	fmt.Fprintf(&b, "Observed: median TTFT %.0f ms, median ITL %.1f ms, median E2E %.0f ms, %.0f output tok/s.\n\n", 1e3*obs.ttft, 1e3*obs.itl, 1e3*obs.e2e, obs.tput)
	b.WriteString("| launch line | targets | expert_mfu | objective | median TTFT ms (error) | median ITL ms | median E2E ms | tok/s |\n|---|---|---:|---:|---|---|---|---|\n")
	fitted := map[string]float64{}
	for _, cand := range deepseekCandidates {
		base := deepseekReplay(t, cand.name, 0)
		fmt.Fprintf(&b, "| %s | none (expert_mfu = mfu) | %.4g | | %s |\n", cand.name, dc405Fit[calibrate.CoefMFU], base.errors(obs))
		for _, itlOnly := range []bool{false, true} {
			x, cm := deepseekFit(t, cand.name, itlOnly)
			what := "TTFT, ITL, E2E p50"
			if itlOnly {
				what = "ITL p50"
				fitted[cand.name] = x
			}
			sim := deepseekReplay(t, cand.name, x)
			fmt.Fprintf(&b, "| %s | %s | %.4g | %.4g | %s |\n", cand.name, what, x, cm.Replay.Objective, sim.errors(obs))
		}
	}

	// (b) The H800 rounds.
	measured := readPerRoundH800(t)
	xb, at := fitH800Round1(t, measured[0]["gpu_only"].ttft, 0, false)
	b.WriteString("\n## (b) Mooncake documentation, Qwen3-235B-A22B, 8×H800 TP 8: expert_mfu fitted on round 1\n\n")
	fmt.Fprintf(&b, "Round 1 (GPU only, no cache can hit) mean TTFT %.2f s measured (digitised ±%.2f s); bisection on log(expert_mfu)\n", measured[0]["gpu_only"].ttft, h800TTFTUncertainty)
	fmt.Fprintf(&b, "over [0.001, 1], seeds %s: expert_mfu %.4g (replayed %.3f s).\n\n", seedList(h800Seeds), xb, at)

	// Predictions.
	b.WriteString("## Predictions\n\n### (a) → (b): the H800 rounds, GPU only (mean TTFT s over seeds " + seedList(h800Seeds) + "; round 1 is (b)'s training point)\n\n")
	xs := []float64{0, xb, fitted["bf16"], fitted["fp8"]}
	b.WriteString("| round | measured |")
	for _, x := range xs {
		fmt.Fprintf(&b, " %s |", expertLabel(x))
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---|", len(xs)) + "\n")
	const rounds = 10
	ttft := make([][][]float64, len(xs))
	for i, x := range xs {
		ttft[i] = h800RoundTTFT(t, x, 0, rounds, h800Seeds, 400, false)
	}
	for r := range rounds {
		m := measured[r]["gpu_only"].ttft
		fmt.Fprintf(&b, "| %d | %.2f |", r+1, m)
		for i := range xs {
			v := mean(ttft[i][r])
			fmt.Fprintf(&b, " %.2f (%+.0f %%) |", v, (v/m-1)*100)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nColumns: the 405B fit alone; (b)'s round-1 fit (rounds 2–10 held out); (a)'s ITL fits, bf16 and fp8.\n")
	b.WriteString("\n### (b) → (a): the DataCrunch DeepSeek run at (b)'s expert_mfu\n\n| launch line | expert_mfu | median TTFT ms (error) | median ITL ms | median E2E ms | tok/s |\n|---|---:|---|---|---|---|\n")
	for _, cand := range deepseekCandidates {
		sim := deepseekReplay(t, cand.name, xb)
		fmt.Fprintf(&b, "| %s | %.4g | %s |\n", cand.name, xb, sim.errors(obs))
	}
	b.WriteString("\n### Third check: the H20 PD table (Qwen3-235B, 8×H20-3e TP 8), prefill increments over 1,024 tokens\n\n")
	b.WriteString("Measured: (TTFT − KV transfer)(n) − the same at 1,024 (the PD/proxy floor cancels). Replayed: one prefill step\n")
	b.WriteString("of n tokens less one of 1,024 (chunked prefill off, as the page's server ran).\n\n")
	s := resolveYAML(t, h800Cluster)
	b.WriteString(h20Increments(t, s.Deployment.LLM, xs))
	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "expert_mfu.md"), []byte(b.String()), *expertMFUExperiment)
}
