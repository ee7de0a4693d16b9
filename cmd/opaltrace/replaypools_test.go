package main

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A disaggregated cluster file whose pools each have an HPA: stderr gives
// each pool's ready workers, and the per-second file splits the ready
// workers into the pools, the prefill pool's growing from one.
func TestReplayAutoscaledPools(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(`workers: 2
router: least_requests
disaggregation:
  prefill_workers: 1
  prefill_autoscale:
    metric: queue_depth
    target: 2
    max_replicas: 4
    sync_period_s: 5
    container_start_s: 30
  decode_autoscale:
    metric: kv_usage
    target: 0.5
    max_replicas: 6
    sync_period_s: 5
    container_start_s: 30
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, sec := filepath.Join(dir, "sim.parquet"), filepath.Join(dir, "sec.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", out, "--per-second", sec, "../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	for _, re := range []string{
		`pools autoscaled: [0-9.]+ GPU-hours; ready workers per whole second 2\.00 to [0-9.]+, mean`,
		`prefill pool \(autoscaled on queue_depth\): ready workers per whole second 1\.00 to 4\.00, mean`,
		`decode pool \(autoscaled on kv_usage\): ready workers per whole second 1\.00 to [0-9.]+, mean`,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("stderr lacks %s:\n%s", re, stderr)
		}
	}
	runs, _, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	most := 0.0
	for _, s := range runs[0].Seconds {
		if math.Abs(s.PrefillReadyWorkers+s.DecodeReadyWorkers-s.ReadyWorkers) > 1e-9 || s.PrefillReadyWorkers < 1 && s.Second+1 < int64(len(runs[0].Seconds)) {
			t.Fatalf("second %d: %v prefill and %v decode workers ready of %v", s.Second, s.PrefillReadyWorkers, s.DecodeReadyWorkers, s.ReadyWorkers)
		}
		most = max(most, s.PrefillReadyWorkers)
	}
	if most != 4 {
		t.Errorf("at most %v prefill workers ready per second; want the pool to grow to its 4", most)
	}
}

// Dynamo's SLA planner sizes both pools: stderr says how often it
// adjusted them.
func TestReplayPlannedPools(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    adjustment_interval_s: 60\n    itl_s: 0.01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	for _, re := range []string{
		`both pools planned by Dynamo's SLA planner \(TTFT 0\.5 s, ITL 0\.01 s, every 60 s, 8 GPUs\): [1-9][0-9]* adjustments, 0 skipped`,
		`prefill pool \(the planner's\): ready workers per whole second [0-9.]+ to [0-9.]+, mean`,
		`decode pool \(the planner's\): ready workers per whole second [0-9.]+ to [0-9.]+, mean`,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("stderr lacks %s:\n%s", re, stderr)
		}
	}
}
