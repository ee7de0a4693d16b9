package main

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	log := filepath.Join(dir, "planner.csv")
	sample := "../../samples/mooncake/conversation_trace_first10min.jsonl"
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--planner-log", log, sample)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	m := regexp.MustCompile(`: ([0-9]+) adjustments, 0 skipped`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("stderr gives no adjustments:\n%s", stderr)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strconv.Itoa(len(rows)-1) != m[1] || strings.Join(rows[0], ",") != "at_s,requests,ttft_s,itl_s,duration_s,isl,osl,prefill_factor,decode_factor,profile_prefill_s,profile_decode_tokens_per_s,prefill_workers,decode_workers,skipped" {
		t.Fatalf("--planner-log: %d rows, header %v; want stderr's %s adjustments", len(rows)-1, rows[0], m[1])
	}
	for i, r := range rows[1:] {
		at, _ := strconv.ParseFloat(r[0], 64)
		n, _ := strconv.Atoi(r[1])
		prof, _ := strconv.ParseFloat(r[9], 64)
		p, _ := strconv.Atoi(r[11])
		if at != float64(60*(i+1)) || n <= 0 || !(prof > 0) || p < 1 || r[13] != "false" {
			t.Errorf("--planner-log row %d: %v", i+1, r)
		}
	}
	if _, _, err := opaltrace(t, "replay", "-o", filepath.Join(dir, "x.parquet"), "--planner-log", log, sample); err == nil || !strings.Contains(err.Error(), "--planner-log: the cluster has no disaggregation.planner") {
		t.Errorf("--planner-log without a planner: %v", err)
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
