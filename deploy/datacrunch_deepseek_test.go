package deploy

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

var deepseekTable = flag.Bool("deepseektable", false, "replay the DataCrunch DeepSeek run on both candidate launch lines and write testdata/datacrunch_deepseek.md")

const deepseekFile = "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_deepseek_dp_mla_output.jsonl"

// deepseekCandidates are the two commented-out launch lines of the
// DataCrunch DeepSeek run (datacrunch-research/h200-benchmarks,
// sglang/experiments/deepseek_v2_sglang.sh and docker_dev_commands.txt at
// c091ef5), neither marked as the one that ran: both --tp 8
// --enable-dp-attention --mem-fraction-static 0.78 --disable-radix-cache,
// the second with --enable-torch-compile.
var deepseekCandidates = []struct {
	name, model string
	opts        map[string]string
}{
	{"fp8", "neuralmagic/DeepSeek-Coder-V2-Instruct-FP8", map[string]string{
		"disable_radix_cache": "true", "enable_dp_attention": "true", "mem_fraction_static": "0.78"}},
	{"bf16", "deepseek-ai/DeepSeek-V2.5-1210", map[string]string{
		"disable_radix_cache": "true", "enable_dp_attention": "true", "mem_fraction_static": "0.78", "enable_torch_compile": "true"}},
}

// TestDataCrunchDeepSeekTable replays the DataCrunch DeepSeek run (10,000
// one-token prompts, 512 output tokens each, all sent at once, to SGLang
// with DP attention on 8 × H200) on each candidate deployment with the
// default coefficients, regenerated from its recorded arguments, and
// checks the table of its reported medians and throughput against the
// replay's (testdata/datacrunch_deepseek.md; scripts/fidelity copies it
// into the README).
func TestDataCrunchDeepSeekTable(t *testing.T) {
	path := shareddata.Path(t, deepseekFile)
	var b strings.Builder
	b.WriteString("# DataCrunch DeepSeek-V2, 8×H200, SGLang DP attention: both launch lines replayed (uncalibrated)\n\n")
	b.WriteString("One run of `sglang.bench_serving --dataset-name random --random-input 1 --random-output 512 --random-range-ratio 1\n")
	b.WriteString("--num-prompts 10000` (rate inf); summary only. The launch line that ran is not known: the repository's script has\n")
	b.WriteString("two, commented out, and each is replayed (`--model` below; `--hardware 8xH200 --tp 8 --engine sglang` and the\n")
	b.WriteString("line's options as `--engine-opt`). Roofline step model at its default coefficients. Error: simulated / observed − 1.\n")
	b.WriteString("Regenerate: go test ./deploy -run TestDataCrunchDeepSeekTable -deepseektable\n\n")
	type col struct{ obs, sim float64 }
	var rows [][]string
	var kv []string
	for _, cand := range deepseekCandidates {
		var run trace.Run
		runs, _, err := ingest.Files([]string{path}, ingest.Options{Model: cand.model, Hardware: "8xH200", TP: 8, Engine: "sglang", EngineOpts: cand.opts},
			func(*trace.Request) error { return nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 {
			t.Fatalf("%d runs in %s, want 1", len(runs), deepseekFile)
		}
		run = runs[0]
		s, err := Resolve(DefaultCluster(), run, Overrides{Measured: true})
		if err != nil {
			t.Fatal(err)
		}
		gen, mode, err := replay.Regenerate(run, s.Config.Seed)
		if err != nil {
			t.Fatal(err)
		}
		sum := replayDeepSeek(t, cand.name, s, s.Step, gen, mode)
		rep := analyze.ReportedStats(run)
		var reported struct {
			OutputThroughput float64 `json:"output_throughput"`
			Duration         float64 `json:"duration"`
		}
		if err := json.Unmarshal(run.Reported, &reported); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what string
			col
			unit float64
		}{
			{"median TTFT (ms)", col{rep["ttft"]["p50"], sum.TTFT.Percentile(50)}, 1e3},
			{"median ITL (ms)", col{rep["itl"]["p50"], sum.ITL.Percentile(50)}, 1e3},
			{"median E2E (ms)", col{rep["e2el"]["p50"], sum.E2E.Percentile(50)}, 1e3},
			{"mean E2E (ms)", col{rep["e2el"]["mean"], sum.E2E.Mean}, 1e3},
			{"output throughput (tok/s)", col{reported.OutputThroughput, sum.OutputThroughput}, 1},
			{"duration (s)", col{reported.Duration, sum.DurationSec}, 1},
		} {
			if !(c.obs > 0) {
				t.Fatalf("%s: the run reports no %s", cand.name, c.what)
			}
			rows = append(rows, []string{fmt.Sprintf("%s (`%s`)", cand.name, cand.model), c.what,
				fmt.Sprintf("%.1f", c.obs*c.unit), fmt.Sprintf("%.1f", c.sim*c.unit), fmt.Sprintf("%+.1f %%", (c.sim/c.obs-1)*100)})
		}
		kv = append(kv, fmt.Sprintf("- %s: %s; %s.", cand.name, s.Header(), s.KVHow))
	}
	b.WriteString("| deployment | target | observed | simulated | error |\n|---|---|---:|---:|---:|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n" + strings.Join(kv, "\n") + "\n")
	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "datacrunch_deepseek.md"), []byte(b.String()), *deepseekTable)
}

// replayDeepSeek replays the DataCrunch DeepSeek run's 10,000 requests,
// regenerated as gen and mode, on the setup s of the candidate named,
// priced by step, and summarises them; every request must complete.
func replayDeepSeek(t *testing.T, name string, s *Setup, step model.StepModel, gen replay.Inputs, mode replay.WorkloadConfig) *analyze.Summary {
	t.Helper()
	cfg := s.Config
	cfg.Workload = mode
	var sim []*trace.Request
	st, err := replay.RunInputs(cfg, step, s.KVBlocks, gen, func(q *trace.Request) error {
		sim = append(sim, q.Clone())
		return nil
	}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed != 10000 {
		t.Fatalf("%s: %d of 10000 completed", name, st.Completed)
	}
	return analyze.Summarize(trace.Run{Name: "simulated", Source: "simulated"}, sim)
}
