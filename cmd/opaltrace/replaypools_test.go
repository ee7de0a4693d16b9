package main

import (
	"encoding/csv"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
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
	// The run keeps what stderr said of its fleet, for stats (text and
	// JSON) and the report, and its GPU-hours to full precision.
	fleet := regexp.MustCompile(`(?m)^simulated: (pools autoscaled: .*)\n^simulated: (prefill pool .*)\n^simulated: (decode pool .*)$`).FindStringSubmatch(stderr)
	if fleet == nil {
		t.Fatalf("stderr lacks the fleet's three lines:\n%s", stderr)
	}
	stdout, _, err := opaltrace(t, "stats", out)
	if want := "Fleet:                                   " + fleet[1] + "\n  " + fleet[2] + "\n  " + fleet[3] + "\n"; err != nil || !strings.Contains(stdout, want) {
		t.Errorf("stats: %v; want\n%s\nin\n%s", err, want, stdout)
	}
	stdout, _, err = opaltrace(t, "stats", "--json", out)
	hours := regexp.MustCompile(`"gpu_hours": ([0-9.e+-]+)`).FindStringSubmatch(stdout)
	if err != nil || hours == nil || !strings.Contains(stdout, strconv.Quote(fleet[1]+"\n"+fleet[2]+"\n"+fleet[3])) {
		t.Fatalf("stats --json: %v, no fleet or gpu_hours:\n%s", err, stdout)
	}
	if h, _ := strconv.ParseFloat(hours[1], 64); !strings.Contains(fleet[1], strconv.FormatFloat(h, 'f', 3, 64)+" GPU-hours") {
		t.Errorf("gpu_hours %s, stderr says %s", hours[1], fleet[1])
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
// adjusted them. With the constant predictor the next interval's
// requests, ISL and OSL are the last one's; with the Kalman predictor
// they are its filter's.
func TestReplayPlannedPools(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "planner.csv")
	sample := "../../samples/mooncake/conversation_trace_first10min.jsonl"
	var stderr string // the last replay's
	for _, predictor := range []string{"constant", "kalman"} {
		cfg := filepath.Join(dir, predictor+".yaml")
		if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    adjustment_interval_s: 60\n    itl_s: 0.01\n    predictor: "+predictor+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		_, stderr, err = opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--planner-log", log, sample)
		if err != nil {
			t.Fatalf("%s: replay: %v\n%s", predictor, err, stderr)
		}
		m := regexp.MustCompile(`: ([0-9]+) adjustments, 0 skipped`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("%s: stderr gives no adjustments:\n%s", predictor, stderr)
		}
		rows := readCSV(t, log)
		if strconv.Itoa(len(rows)-1) != m[1] || strings.Join(rows[0], ",") != "at_s,requests,ttft_s,itl_s,duration_s,isl,osl,prefill_factor,decode_factor,next_requests,next_isl,next_osl,profile_prefill_s,profile_decode_tokens_per_s,prefill_workers,decode_workers,skipped,prefill_load,decode_load" {
			t.Fatalf("%s: --planner-log: %d rows, header %v; want stderr's %s adjustments", predictor, len(rows)-1, rows[0], m[1])
		}
		differ := 0
		for i, r := range rows[1:] {
			at, _ := strconv.ParseFloat(r[0], 64)
			n, _ := strconv.Atoi(r[1])
			prof, _ := strconv.ParseFloat(r[12], 64)
			p, _ := strconv.Atoi(r[14])
			if at != float64(60*(i+1)) || n <= 0 || !(prof > 0) || p < 1 || r[16] != "false" || r[17] != "" || r[18] != "" {
				t.Errorf("%s: --planner-log row %d: %v", predictor, i+1, r)
			}
			same := r[9] == r[1] && r[10] == r[5] && r[11] == r[6]
			if predictor == "constant" && !same {
				t.Errorf("constant: --planner-log row %d predicts %v of observed %v", i+1, r[9:12], []string{r[1], r[5], r[6]})
			}
			if !same {
				differ++
			}
		}
		if predictor == "kalman" && differ < len(rows)-2 {
			t.Errorf("kalman: %d of %d adjustments predict other than the last interval; want all but the first", differ, len(rows)-1)
		}
	}
	if _, _, err := opaltrace(t, "replay", "-o", filepath.Join(dir, "x.parquet"), "--planner-log", log, sample); err == nil || !strings.Contains(err.Error(), "--planner-log: the cluster has no planner (disaggregation.planner, or planner for an aggregated fleet)") {
		t.Errorf("--planner-log without a planner: %v", err)
	}
	for _, re := range []string{
		`both pools planned by Dynamo's SLA planner \(TTFT 0\.5 s, ITL 0\.01 s, every 60 s, 8 GPUs, Kalman predictor, q_level 1, q_trend 0\.1, r 10\): [1-9][0-9]* adjustments, 0 skipped`,
		`prefill pool \(the planner's\): ready workers per whole second [0-9.]+ to [0-9.]+, mean`,
		`decode pool \(the planner's\): ready workers per whole second [0-9.]+ to [0-9.]+, mean`,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("stderr lacks %s:\n%s", re, stderr)
		}
	}
}

// With data parallelism (dp) the HPA's replica is a server of dp ranks:
// stderr says so, and the ready workers, ranks, move two at a time: the
// two servers of the start (4 workers) grow to the three at most (6).
func TestReplayAutoscaledServers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(`workers: 2
dp: 2
autoscale:
  metric: queue_depth
  target: 1
  max_replicas: 3
  sync_period_s: 5
  container_start_s: 30
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sec := filepath.Join(dir, "sec.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--per-second", sec, "../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if re := `autoscaled on queue_depth, replicas servers of 2 workers: [0-9.]+ GPU-hours; ready workers per whole second 4\.00 to 6\.00, mean`; !regexp.MustCompile(re).MatchString(stderr) {
		t.Errorf("stderr lacks %s:\n%s", re, stderr)
	}
	runs, _, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range runs[0].Seconds {
		// A whole second in one state has a whole number of servers.
		if r := s.ReadyWorkers; r == math.Trunc(r) && int(r)%2 != 0 {
			t.Errorf("second %d: %v workers ready, not whole servers", s.Second, r)
		}
	}
}

// With data parallelism (dp) Dynamo's planner sizes engines, servers of
// dp ranks: stderr says so, the planner's log counts servers, and each
// pool's ready workers, ranks, move two at a time. (An ITL target of 5 ms,
// which no batch meets, has it ask for three decode engines.)
func TestReplayPlannedServers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("workers: 2\ndp: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    adjustment_interval_s: 60\n    itl_s: 0.005\n    max_gpu_budget: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sec, log := filepath.Join(dir, "sec.parquet"), filepath.Join(dir, "planner.csv")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--per-second", sec, "--planner-log", log,
		"../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if re := `both pools planned by Dynamo's SLA planner \(TTFT 0\.5 s, ITL 0\.005 s, every 60 s, 8 GPUs, constant predictor, engines servers of 2 workers\): [1-9][0-9]* adjustments`; !regexp.MustCompile(re).MatchString(stderr) {
		t.Errorf("stderr lacks %s:\n%s", re, stderr)
	}
	rows := readCSV(t, log)
	asked := 0 // the most engines a pool was asked for
	for _, r := range rows[1:] {
		p, _ := strconv.Atoi(r[14])
		d, _ := strconv.Atoi(r[15])
		// 8 GPUs are four engines of two ranks: one pool keeps one.
		if p < 1 || d < 1 || p+d > 4 {
			t.Errorf("--planner-log row %v: %d + %d engines; want 1 each at least, 4 at most", r, p, d)
		}
		asked = max(asked, p, d)
	}
	runs, _, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	most := 0.0
	for _, s := range runs[0].Seconds {
		// A whole second in one state has a whole number of servers.
		for _, r := range []float64{s.PrefillReadyWorkers, s.DecodeReadyWorkers} {
			if r == math.Trunc(r) && int(r)%2 != 0 {
				t.Errorf("second %d: %v workers of a pool ready, not whole servers", s.Second, r)
			}
		}
		most = max(most, s.PrefillReadyWorkers, s.DecodeReadyWorkers)
	}
	if asked < 2 || most != float64(2*asked) {
		t.Errorf("a pool asked for %d engines at most, and had %v workers ready at most; want 2 engines or more, 2 workers each", asked, most)
	}
}

// A prefill pool of its own deployment (disaggregation.prefill_tp):
// stderr says what it is, and its prefills run on it: the embedded
// sample's prefills take less time on two H100s a worker than on one,
// its decode pool unchanged.
func TestReplayPrefillDeployment(t *testing.T) {
	dir := t.TempDir()
	sample := "../../samples/mooncake/conversation_trace_first10min.jsonl"
	meanPrefill := func(extra string) (float64, string) {
		cfg := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\n"+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "sim.parquet")
		_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", out, sample)
		if err != nil {
			t.Fatalf("%q: replay: %v\n%s", extra, err, stderr)
		}
		_, reqs, err := trace.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sum, n := 0.0, 0
		for _, r := range reqs {
			if r.PrefillSec.OK {
				sum += r.PrefillSec.V
				n++
			}
		}
		return sum / float64(n), stderr
	}
	one, _ := meanPrefill("")
	two, stderr := meanPrefill("  prefill_tp: 2\n")
	if !strings.Contains(stderr, "prefill pool of its own deployment: llama-3.1-8b on 2×h100 (TP2) a worker, KV ") {
		t.Errorf("stderr lacks the prefill pool's note:\n%s", stderr)
	}
	if !(two < 0.8*one) {
		t.Errorf("mean prefill %v s on TP2 prefill workers, %v on TP1; want TP2's well below", two, one)
	}
	// Batch limits of its own.
	if _, stderr = meanPrefill("  prefill_scheduler:\n    max_num_batched_tokens: 16384\n"); !strings.Contains(stderr, "its own max_num_batched_tokens 16384") {
		t.Errorf("stderr lacks the prefill pool's limits:\n%s", stderr)
	}
	// Dynamo's planner counts each pool's GPUs.
	if _, stderr = meanPrefill("  prefill_tp: 2\n  planner:\n    policy: dynamo_sla\n    adjustment_interval_s: 60\n"); !strings.Contains(stderr, ", 2 GPUs a prefill worker and 1 a decode worker): ") {
		t.Errorf("stderr lacks the planner's GPUs a worker:\n%s", stderr)
	}
	// KV tiers on both pools, each sized by its pool's deployment.
	tiers := filepath.Join(dir, "tiers.yaml")
	if err := os.WriteFile(tiers, []byte("workers: 2\nscheduler:\n  kv_offloading_size: 8\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 2\n  decode_kv_tiers: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := opaltrace(t, "replay", "--config", tiers, "-o", filepath.Join(dir, "tiers.parquet"), sample); err != nil ||
		!strings.Contains(stderr, "KV tiers on both pools") {
		t.Errorf("decode_kv_tiers with a prefill pool of its own: %v\n%s", err, stderr)
	}
	// calibrate fits a prefill pool of its own TP on the cluster's GPU
	// (three evaluations: as far as the fit's end) and refuses one on
	// another GPU.
	cfg := filepath.Join(dir, "c.yaml")
	in := shareddata.Path(t, engineSideRTX4090)
	for _, tc := range []struct{ pool, want string }{
		{"prefill_tp: 2", "did not converge"},
		{"prefill_hardware: h100", "a prefill pool on another GPU (disaggregation.prefill_hardware h100, the cluster's rtx-4090): calibrate fits one GPU's coefficients: not modelled yet"},
	} {
		if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\n  "+tc.pool+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := opaltrace(t, "calibrate", "--config", cfg, "-o", filepath.Join(dir, "cm.yaml"), "--max-evals", "3", in); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("calibrate with %s: %v, want %q\n%s", tc.pool, err, tc.want, stderr)
		}
	}
}

// A prefill pool of its own TP under SGLang's DP attention, on the
// embedded sample: one prefill server of TP4 beside two decode servers of
// TP2 (DeepSeek-V2-Lite on H100s) is four prefill ranks and four decode
// ranks; the requests' prompts are computed on the four prefill ranks and
// decoded on the four decode ranks, and the header says so; Dynamo's
// planner sizes engines of four prefill ranks and of two decode ranks.
func TestReplayPrefillDeploymentDPAttention(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("model: deepseek-v2-lite\nhardware: h100\ntp: 2\nenable_dp_attention: true\nworkers: 3\nscheduler:\n  engine: sglang\n"+
		"disaggregation:\n  prefill_workers: 1\n  prefill_tp: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sim.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", out, "../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		"1 prefill server(s) × 4 and 2 decode server(s) × 2 DP-attention ranks (prefill_tp 4) replayed as 8 workers",
		"8 workers (4 prefill on 4×h100 (TP4 DP-attention), 4 decode: disaggregated)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	_, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	prefill, decode := map[string]bool{}, map[string]bool{}
	for _, r := range reqs {
		prefill[r.PrefillWorker], decode[r.Worker] = true, true
	}
	if len(prefill) != 4 || len(decode) != 4 {
		t.Errorf("prompts computed on %v and decoded on %v; want four prefill ranks and four decode ranks", slices.Sorted(maps.Keys(prefill)), slices.Sorted(maps.Keys(decode)))
	}
	for w := range prefill {
		if decode[w] {
			t.Errorf("worker %s both prefills and decodes", w)
		}
	}
	// Dynamo's planner: engines of each pool's servers.
	if err := os.WriteFile(cfg, []byte("model: deepseek-v2-lite\nhardware: h100\ntp: 2\nenable_dp_attention: true\nworkers: 3\nscheduler:\n  engine: sglang\n"+
		"disaggregation:\n  prefill_workers: 1\n  prefill_tp: 4\n  planner:\n    policy: dynamo\n    max_gpu_budget: 16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err = opaltrace(t, "replay", "--config", cfg, "-o", out, "../../samples/mooncake/conversation_trace_first10min.jsonl"); err != nil ||
		!strings.Contains(stderr, "16 GPUs, engines servers of 4 workers (prefill) and 2 (decode)): ") {
		t.Errorf("the planner over servers of two sizes: %v\n%s", err, stderr)
	}
}

// TestReplayCarriesTheCacheOfAPrefillPool: --carry-cache replays each
// run of surajssd's sweep after the one before on a cluster whose
// prefill pool has batch limits of its own, the run before on that pool
// too; the cache it leaves makes rate inf's median TTFT fall below the
// cold replay's.
func TestReplayCarriesTheCacheOfAPrefillPool(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_scheduler:\n    max_num_batched_tokens: 4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	carried, cold := sweepMedianTTFT(t, ingestSurajssd(t), "--config", cfg)
	if !(carried < cold/2) {
		t.Errorf("rate inf median TTFT %v ms carried, %v ms cold", carried, cold)
	}
}

// Dynamo's load-based scaling (policy dynamo) on the embedded sample,
// each optimization target: stderr says its thresholds and how often it
// adjusted; --planner-log has a row every 5 s with each pool's largest
// engine load and the engines asked for, the SLA planner's columns empty;
// a pool grows where an engine's load reached the up threshold.
func TestReplayPlannerDynamoLoad(t *testing.T) {
	dir := t.TempDir()
	sample := "../../samples/mooncake/conversation_trace_first10min.jsonl"
	log := filepath.Join(dir, "planner.csv")
	for _, tc := range []struct{ target, thresholds string }{
		{"throughput", "prefill queue ≥ 1 × context length up, all < 0.1 × context length down; decode KV demand > 100 % up, all < 60 % down"},
		{"latency", "prefill queue ≥ 0.1 × context length up, all ≤ 0 × context length down; decode KV demand > 40 % up, all < 10 % down"},
		{"load\n    prefill_scale_up_queue_tokens: 20000\n    prefill_scale_down_queue_tokens: 1000\n    decode_scale_up_kv_rate: 90\n    decode_scale_down_kv_rate: 50",
			"prefill queue ≥ 20000 tokens up, all ≤ 1000 tokens down; decode KV demand ≥ 90 % up, all ≤ 50 % down"},
	} {
		cfg := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(cfg, []byte("workers: 4\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo\n    max_gpu_budget: 16\n    container_start_s: 30\n    optimization_target: "+tc.target+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		name := strings.Fields(tc.target)[0]
		_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--planner-log", log, sample)
		if err != nil {
			t.Fatalf("%s: replay: %v\n%s", name, err, stderr)
		}
		m := regexp.MustCompile(`both pools scaled by Dynamo's planner on load \(optimization_target ` + name + `: ` + regexp.QuoteMeta(tc.thresholds) + `; every 5 s, 16 GPUs\): ([0-9]+) adjustments, ([0-9]+) skipped \(a pool still scaling\)`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("%s: stderr lacks the planner's line:\n%s", name, stderr)
		}
		rows := readCSV(t, log)
		if strconv.Itoa(len(rows)-1) != m[1] {
			t.Fatalf("%s: --planner-log has %d rows, stderr %s adjustments", name, len(rows)-1, m[1])
		}
		up := map[string]float64{"throughput": 1, "latency": 0.1, "load": 20000}[name]
		skipped, grew := 0, 0
		prev := 1 // the prefill pool's engines asked for before
		for i, r := range rows[1:] {
			at, _ := strconv.ParseFloat(r[0], 64)
			if at != float64(5*(i+1)) || strings.Join(r[1:14], "") != "" {
				t.Fatalf("%s: --planner-log row %d: %v", name, i+1, r)
			}
			if r[16] == "true" {
				skipped++
				if r[14] != "" || r[17] != "" || r[18] != "" {
					t.Errorf("%s: skipped row %d: %v", name, i+1, r)
				}
				continue
			}
			p, _ := strconv.Atoi(r[14])
			load, err := strconv.ParseFloat(r[17], 64)
			if err != nil {
				t.Fatalf("%s: row %d: prefill load %q", name, i+1, r[17])
			}
			if load >= up && p != prev+1 && p != prev { // the budget may hold it
				t.Errorf("%s: row %d: prefill load %v at or above %v, engines %d after %d", name, i+1, load, up, p, prev)
			}
			if p > prev {
				grew++
			}
			prev = p
		}
		if strconv.Itoa(skipped) != m[2] || skipped == 0 || grew == 0 {
			t.Errorf("%s: %d skipped rows (stderr %s), the prefill pool grew %d times; want some of each", name, skipped, m[2], grew)
		}
	}
}

// Dynamo's load-based scaling of an aggregated fleet (the top-level
// planner section): stderr says its thresholds, adjustments and
// GPU-hours; --planner-log logs the fleet's engines and load in the
// decode columns; with disaggregation the section is refused.
func TestReplayPlannerAggregated(t *testing.T) {
	dir := t.TempDir()
	sample := "../../samples/mooncake/conversation_trace_first10min.jsonl"
	log := filepath.Join(dir, "planner.csv")
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("workers: 2\nplanner:\n  policy: dynamo\n  optimization_target: latency\n  max_gpu_budget: 16\n  container_start_s: 30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "sim.parquet"), "--planner-log", log, sample)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	m := regexp.MustCompile(`scaled by Dynamo's planner on load \(optimization_target latency: KV demand with queued prompts > 40 % up, all < 10 % down; every 5 s, 16 GPUs\): ([0-9]+) adjustments, ([0-9]+) skipped \(still scaling\); [0-9.]+ GPU-hours; ready workers per whole second [0-9.]+ to ([0-9.]+), mean`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("stderr lacks the planner's line:\n%s", stderr)
	}
	rows := readCSV(t, log)
	if strconv.Itoa(len(rows)-1) != m[1] {
		t.Fatalf("--planner-log has %d rows, stderr %s adjustments", len(rows)-1, m[1])
	}
	most := 0
	for i, r := range rows[1:] {
		if r[16] == "true" {
			continue
		}
		n, err := strconv.Atoi(r[15])
		if r[14] != "" || r[17] != "" || err != nil || r[18] == "" {
			t.Fatalf("--planner-log row %d: %v; want the fleet's engines and load in the decode columns", i+1, r)
		}
		most = max(most, n)
	}
	if hi, _ := strconv.ParseFloat(m[3], 64); most < 3 || hi < 3 {
		t.Errorf("the fleet asked for %d engines at most, had %v ready; want it grown past its 2", most, hi)
	}
	if err := os.WriteFile(cfg, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 1\nplanner:\n  policy: dynamo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := opaltrace(t, "replay", "--config", cfg, "-o", filepath.Join(dir, "x.parquet"), sample); err == nil ||
		!strings.Contains(err.Error(), "planner: sizes an aggregated fleet: with disaggregation, disaggregation.planner sizes the pools") {
		t.Errorf("planner with disaggregation: %v", err)
	}
}

// readCSV returns the rows of the CSV file at path.
func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
