package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The DataCrunch Llama-3.3-70B sweep (summary-only SGLang runs at 1–16
// req/s, and two ShareGPT runs replay cannot regenerate) against its
// replay: one comparison per rate, never the sweep pooled; each observed
// run compared on the medians and mean it reported, with the figures of
// the file; the ShareGPT runs named as not compared (the bootstrap of
// millions of pooled ITL gaps is what costs here: --resamples 100 and
// three rates keep the test to seconds); --check turns the
// verdicts outside the margin into exit status 1, and a margin that
// covers them into 0.
func TestStatsCompareDataCrunchPerRun(t *testing.T) {
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	obs := filepath.Join(dir, "dc.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "4xH200",
		"--engine", "sglang", "--engine-opt", "disable_radix_cache=true", "-o", obs, in); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	sim := filepath.Join(dir, "sim.parquet")
	if _, stderr, err := opaltrace(t, "replay", "-o", sim, obs); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	out, stderr, err := opaltrace(t, "stats", "--json", "--resamples", "100", "--run", "1-3", "--compare", sim, obs)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var cs []struct {
		A, B    string
		Metrics []struct {
			Metric    string
			NB        int  `json:"n_b"`
			AReported bool `json:"a_reported"`
			Verdict   string
			Stats     []struct {
				Stat string
				AMs  float64 `json:"a_ms"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The observed side's medians as the file has them (median_ttft_ms
	// of each line), by rate.
	wantTTFT := map[string]float64{"rate=1 ": 85.74514742940664, "rate=2 ": 87.55627297796309, "rate=4 ": 106.06311704032123}
	if len(cs) != 3 {
		t.Fatalf("%d comparisons, want one per selected rate (3)", len(cs))
	}
	for i, c := range cs {
		rate := strings.Fields(c.A)[5] + " "
		want, ok := wantTTFT[rate]
		if !ok || !strings.Contains(c.B, "#"+string(rune('1'+i))) {
			t.Fatalf("pair %d: %q with %q", i, c.A, c.B)
		}
		for _, m := range c.Metrics {
			switch m.Metric {
			case "tpot":
				if m.Verdict != "no data" {
					t.Errorf("%s: TPOT (not reported) verdict %q", c.A, m.Verdict)
				}
			case "ttft":
				if !m.AReported || len(m.Stats) != 1 || m.Stats[0].Stat != "p50" || m.NB == 0 {
					t.Fatalf("%s: TTFT %+v, want the reported median against the replay's values", c.A, m)
				}
				if got := m.Stats[0].AMs; got < want-0.001 || got > want+0.001 {
					t.Errorf("%s: observed median TTFT %v ms, the file says %v", c.A, got, want)
				}
			case "e2el":
				if len(m.Stats) != 2 || m.Stats[0].Stat != "mean" || m.Stats[1].Stat != "p50" {
					t.Errorf("%s: E2E compares %+v, want the reported mean and median", c.A, m.Stats)
				}
			}
		}
	}
	// Every run, pairing only: the ShareGPT runs, which replay could not
	// regenerate, are named as not compared.
	_, _, err = opaltrace(t, "stats", "--resamples", "100", "--run", "6-7", "--compare", sim, obs)
	if err == nil || !strings.Contains(err.Error(), "no selected run has a replay on the other side (selected: #6 dataset=sharegpt") {
		t.Errorf("the ShareGPT runs alone: %v", err)
	}
	// The same pairs whichever side is given first, selected by a field.
	out, _, err = opaltrace(t, "stats", "--resamples", "100", "--compare", obs, "--run", "rate=4", sim)
	if err != nil || strings.Count(out, "A: sim ") != 1 || !strings.Contains(out, "B: dc #3 dataset=random input_len=1024 output_len=1024 rate=4") {
		t.Errorf("--run rate=4 with the sides swapped: %v\n%s", err, out)
	}
	// --check: the uncalibrated replay is outside 5 % everywhere…
	_, _, err = opaltrace(t, "stats", "--check", "--resamples", "100", "--run", "1", "--compare", sim, obs)
	if err == nil || !strings.Contains(err.Error(), "--check: 4 statistics outside ±5%: dc #1 dataset=random") {
		t.Errorf("--check at 5%%: %v", err)
	}
	// …and within 60 % at 1 req/s (TTFT −43 %, ITL −30 %, E2E −37/−39 %).
	if _, _, err := opaltrace(t, "stats", "--check", "--resamples", "100", "--margin", "60%", "--run", "1", "--compare", sim, obs); err != nil {
		t.Errorf("--check at 60%%: %v", err)
	}
}

// Runs of two datasets that are not a replay of one another pair in
// order; different numbers of runs are an error that names them.
func TestStatsCompareByOrder(t *testing.T) {
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	_, _, err := opaltrace(t, "stats", "--compare", in, "--run", "1-2", in)
	if err != nil {
		t.Fatal(err)
	}
	a := simulatedParquet(t, 1)
	_, _, err = opaltrace(t, "stats", "--compare", in, a)
	if err == nil || !strings.Contains(err.Error(), "runs are paired in order, and A has 1 (sim) while B has 7 (#1 dataset=random") {
		t.Errorf("1 run against 7: %v", err)
	}
	if _, _, err := opaltrace(t, "stats", "--check", a); err == nil || !strings.Contains(err.Error(), "--check: only with --compare") {
		t.Errorf("--check without --compare: %v", err)
	}
}

// replay --run selects the input runs as stats does; --run-name names
// the simulated runs; a --run that picks nothing (e.g. an old command
// line that named the output with it) lists the runs and points to
// --run-name.
func TestReplayRunSelects(t *testing.T) {
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	out := filepath.Join(dir, "sim.parquet")
	args := []string{"replay", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "h200", "--tp", "4", "--scheduler", "sglang", "-o", out}
	if _, stderr, err := opaltrace(t, append(args, "--run", "rate=1", "--run", "2", "--run-name", "dc", in)...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	runs, _, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.Name+" of "+r.Extra["replay_of"])
	}
	base := filepath.Base(in)
	if want := "dc/" + base + "#1 of " + base + "#1, dc/" + base + "#2 of " + base + "#2"; strings.Join(got, ", ") != want {
		t.Errorf("runs %q, want %q", strings.Join(got, ", "), want)
	}
	_, _, err = opaltrace(t, append(args, "--run", "tiny", in)...)
	if err == nil || !strings.Contains(err.Error(), "--run tiny: no run matches (runs: #1 dataset=random") ||
		!strings.Contains(err.Error(), "--run-name names the simulated run") {
		t.Errorf("--run tiny: %v", err)
	}
}
