package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// TestStatsRunSelector picks one run of the surajssd sweep by its rate,
// and names the runs by what distinguishes them when nothing matches.
func TestStatsRunSelector(t *testing.T) {
	dir := shareddata.Path(t, "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8")
	out, stderr, err := opaltrace(t, "stats", "--json", "--run", "rate=16", dir)
	if err != nil {
		t.Fatalf("stats --run rate=16: %v\n%s", err, stderr)
	}
	if n := strings.Count(out, `"completed"`); n != 1 || !strings.Contains(out, "qps_16") {
		t.Errorf("stats --run rate=16 printed %d runs, want the qps_16 one:\n%.600s", n, out)
	}
	_, stderr, err = opaltrace(t, "stats", "--run", "rate=3", dir)
	if err == nil || !strings.Contains(err.Error(), "no run matches") || !strings.Contains(err.Error(), "#4 file=serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_inf.json rate=inf") {
		t.Errorf("a selector that matches nothing: err %v, stderr:\n%s", err, stderr)
	}
	// The run picked is shown by what sets it apart, counted among all
	// the input's runs, so that its "#N" is what --run N picks.
	out, stderr, err = opaltrace(t, "stats", "--run", "rate=16", dir)
	if err != nil {
		t.Fatalf("stats --run rate=16: %v\n%s", err, stderr)
	}
	want := "Run:                                     serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_16.json#1 (#3 file=serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_16.json rate=16)\n"
	if !strings.Contains(out, want) {
		t.Errorf("stats --run rate=16 lacks %q:\n%.800s", want, out)
	}
	byIndex, _, err := opaltrace(t, "stats", "--run", "3", dir)
	if err != nil || byIndex != out {
		t.Errorf("stats --run 3 (%v) is not the run labelled #3:\n%.800s", err, byIndex)
	}
}

// A replayed run's summary says which input run it replays, by what sets
// that run apart from the input's others.
func TestReplayRunLabel(t *testing.T) {
	dir := shareddata.Path(t, "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8")
	out, stderr, err := opaltrace(t, "replay", "--run", "rate=16", "--hardware", "a100-40gb", "--tp", "8", "-o", filepath.Join(t.TempDir(), "sim.parquet"), dir)
	if err != nil {
		t.Fatalf("replay --run rate=16: %v\n%s", err, stderr)
	}
	want := "Run:                                     simulated  (replays #3 file=serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_16.json rate=16)\n"
	if !strings.Contains(out, want) {
		t.Errorf("replay --run rate=16 lacks %q:\n%.600s", want, out)
	}
	// The simulated runs keep the workload they ran, so a simulated
	// sweep is labelled as the measured one is.
	sim := filepath.Join(t.TempDir(), "sweep.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--run", "rate=4", "--run", "rate=16", "--hardware", "a100-40gb", "--tp", "8", "-o", sim, dir); err != nil {
		t.Fatalf("replay of two runs: %v\n%s", err, stderr)
	}
	out, stderr, err = opaltrace(t, "stats", sim)
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, stderr)
	}
	for _, want := range []string{" rate=4)\n", " rate=16)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats of the simulated sweep lacks %q:\n%.1200s", want, out)
		}
	}
}
