package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

const engineSideRTX4090 = "measurements/llmservingsim_vllm_engine_side/RTX4090/Llama-3.1-8B/vllm/requests.jsonl"

// TestCalibrateReplayBadInput: a --train run without latencies is named
// and nothing is written; a fit that runs out of evaluations says it
// did not converge and writes nothing.
func TestCalibrateReplayBadInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cm.yaml")
	_, _, err := opaltrace(t, "calibrate", "-o", out, "--model", "llama-3.1-8b", "--hardware", "h100",
		"--train", "1", "../../ingest/testdata/mooncake/few.jsonl")
	if err == nil || !strings.Contains(err.Error(), "--train run few.jsonl#1") || !strings.Contains(err.Error(), "no latencies") {
		t.Errorf("a training run without latencies: %v", err)
	}
	in := shareddata.Path(t, engineSideRTX4090)
	_, _, err = opaltrace(t, "calibrate", "-o", out, "--max-evals", "3", in)
	if err == nil || !strings.Contains(err.Error(), "did not converge") || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("3 evaluations: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed calibration left %s", out)
	}
}

// TestCalibrateReplayEngineSide fits the RTX 4090 engine-side run (queue,
// prefill and decode quantiles) and replays with the written cost model:
// the table lists every target, in-sample, and the YAML round-trips into
// a replay of the same run.
func TestCalibrateReplayEngineSide(t *testing.T) {
	in := shareddata.Path(t, engineSideRTX4090)
	dir := t.TempDir()
	cm := filepath.Join(dir, "cm.yaml")
	stdout, stderr, err := opaltrace(t, "calibrate", "-o", cm, "--max-evals", "200", in)
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, stderr)
	}
	for _, target := range []string{"queue p50", "prefill p90", "decode p99"} {
		if !strings.Contains(stdout, "train    requests.jsonl#1                             "+target) {
			t.Errorf("no row for %s:\n%s", target, stdout)
		}
	}
	if !strings.Contains(stdout, "cannot separate") && !strings.Contains(stdout, "not determined") {
		t.Errorf("one run at one load leaves coefficients undetermined, and no warning says so:\n%s", stdout)
	}
	if !strings.Contains(stderr, "coefficients fitted by replay (") {
		t.Errorf("the closing line does not say the fit was by replay:\n%s", stderr)
	}
	sim := filepath.Join(dir, "sim.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--model", cm, "-o", sim, in); err != nil {
		t.Fatalf("replay with the fitted cost model: %v\n%s", err, stderr)
	}
}

// TestCalibrateCarriesTheSweepCache: surajssd's four runs went to one
// server one after another with the same prompts, which their metadata
// show, so each run after the first is replayed after the one before
// (--carry-cache auto); off replays them cold; a bad value is an error.
func TestCalibrateCarriesTheSweepCache(t *testing.T) {
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	args := []string{"calibrate", "-o", filepath.Join(t.TempDir(), "cm.yaml"), "--max-evals", "1",
		"--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "a100-40gb", "--tp", "8",
		"--train", "rate=1", "--holdout", "rate=4", "--holdout", "rate=inf"}
	var files []string
	for _, q := range []string{"01", "04", "16", "inf"} {
		files = append(files, shareddata.Path(t, dir+q+".json"))
	}
	for _, tc := range []struct {
		carry string
		after int // runs replayed after the one before
	}{{"auto", 2}, {"off", 0}} {
		_, stderr, err := opaltrace(t, append(append(args, "--carry-cache", tc.carry), files...)...)
		if err == nil || !strings.Contains(err.Error(), "did not converge") {
			t.Fatalf("--carry-cache %s: %v\n%s", tc.carry, err, stderr)
		}
		if n := strings.Count(stderr, "with the prefix cache it left"); n != tc.after {
			t.Errorf("--carry-cache %s: %d runs carried over, want %d:\n%s", tc.carry, n, tc.after, stderr)
		}
		if tc.after > 0 && !strings.Contains(stderr, "replayed after #3 ") {
			t.Errorf("--carry-cache %s: rate inf not replayed after rate 16 (an unselected run):\n%s", tc.carry, stderr)
		}
	}
	if _, _, err := opaltrace(t, append(append(args, "--carry-cache", "maybe"), files...)...); err == nil || !strings.Contains(err.Error(), `--carry-cache "maybe"`) {
		t.Errorf("--carry-cache maybe: %v", err)
	}
}

// TestReplayCarriesTheSweepCache: replay, as calibrate, replays each
// surajssd run after the one before with the cache it left; the runs keep
// their own 200 requests, and rate inf's median TTFT drops below the cold
// replay's.
func TestReplayCarriesTheSweepCache(t *testing.T) {
	carried, cold := sweepMedianTTFT(t, ingestSurajssd(t))
	if !(carried < cold/2) {
		t.Errorf("rate inf median TTFT %v ms carried, %v ms cold", carried, cold)
	}
}

// ingestSurajssd ingests surajssd's four runs into one file and returns
// its path.
func ingestSurajssd(t *testing.T) string {
	t.Helper()
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	in := filepath.Join(t.TempDir(), "sd.parquet")
	args := []string{"ingest", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "8xA100-40GB", "--tp", "8", "-o", in}
	for _, q := range []string{"01", "04", "16", "inf"} {
		args = append(args, shareddata.Path(t, dir+q+".json"))
	}
	if _, stderr, err := opaltrace(t, args...); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	return in
}

// sweepMedianTTFT replays the sweep in with --carry-cache auto and off
// (and the extra flags) and returns rate inf's median TTFT in ms for
// each, checking that auto carried the cache over to three runs, off to
// none, and that the run kept its own 200 requests.
func sweepMedianTTFT(t *testing.T, in string, extra ...string) (carried, cold float64) {
	t.Helper()
	medianTTFT := map[string]string{}
	for _, carry := range []string{"auto", "off"} {
		out := filepath.Join(t.TempDir(), carry+".parquet")
		_, stderr, err := opaltrace(t, append(append([]string{"replay", "--carry-cache", carry, "-o", out}, extra...), in)...)
		if err != nil {
			t.Fatalf("replay --carry-cache %s %q: %v\n%s", carry, extra, err, stderr)
		}
		want := map[string]int{"auto": 3, "off": 0}[carry]
		if n := strings.Count(stderr, "with the prefix cache it left"); n != want {
			t.Errorf("--carry-cache %s: %d runs carried over, want %d:\n%s", carry, n, want, stderr)
		}
		stdout, _, err := opaltrace(t, "stats", "--run", "4", out)
		if err != nil || !strings.Contains(stdout, "Successful requests:                     200 ") {
			t.Fatalf("stats of %s: %v\n%s", out, err, stdout)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(line, "Median TTFT (ms):") {
				medianTTFT[carry] = strings.TrimSpace(strings.TrimPrefix(line, "Median TTFT (ms):"))
			}
		}
	}
	if _, err := fmt.Sscan(medianTTFT["auto"], &carried); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(medianTTFT["off"], &cold); err != nil {
		t.Fatal(err)
	}
	return carried, cold
}

// TestCalibrateSaturationLine: the saturation step follows the error
// table in text, Markdown and JSON. surajssd's sweep (per-request p99s
// of 0.144, 0.068 and 0.120 s at qps 1, 4 and 16) is saturated from qps 1
// at --saturation-ttft 0.13 and nowhere at the default 1 s; a threshold
// that is not a positive number of seconds is refused.
func TestCalibrateSaturationLine(t *testing.T) {
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	args := []string{"calibrate", "-o", filepath.Join(t.TempDir(), "cm.yaml"), "--fit", "mfu",
		"--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "a100-40gb", "--tp", "8",
		"--train", "rate=1", "--holdout", "rate=4", "--holdout", "rate=16", "--holdout", "rate=inf"}
	for _, q := range []string{"01", "04", "16", "inf"} {
		args = append(args, shareddata.Path(t, dir+q+".json"))
	}
	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"(* reported by the source's summary)\nsaturation (first rate whose p99 TTFT > 1 s): observed none; ",
			"calibrated none (none saturated, as observed)", "rate 1: not saturated (p99 0.144 s)"}},
		{[]string{"--saturation-ttft", "0.13"}, []string{"saturation (first rate whose p99 TTFT > 0.13 s): observed rate 1; ",
			"rate 1: saturated (p99 0.144 s)",
			"uncalibrated none (late: none saturated); calibrated rate 1 (same step)", "rate 16: not saturated (p99 0.120 s)"}},
		{[]string{"--markdown"}, []string{"|\n\n**Saturation** (first rate whose p99 TTFT > 1 s): observed none; "}},
		{[]string{"--json"}, []string{`"saturation": {`, `"threshold_s": 1,`, `"observed": "none",`, `"evidence": "p99 0.144 s",`}},
	} {
		stdout, stderr, err := opaltrace(t, append(append([]string{}, args[:1]...), append(tc.flags, args[1:]...)...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.flags, err, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%v: no %q in:\n%s", tc.flags, w, stdout)
			}
		}
	}
	for _, bad := range []string{"0", "-1", "inf"} {
		if _, _, err := opaltrace(t, append([]string{"calibrate", "--saturation-ttft", bad}, args[1:]...)...); err == nil || !strings.Contains(err.Error(), "--saturation-ttft") {
			t.Errorf("--saturation-ttft %s: %v", bad, err)
		}
	}
}

// TestCalibrateFitPlus: --fit +NAME fits the default choice and NAME (on
// surajssd's qps 1 and 4, serial_fraction, which the default leaves out
// with a warning); mixed with a plain --fit NAME it is refused.
func TestCalibrateFitPlus(t *testing.T) {
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	args := []string{"calibrate", "--markdown", "-o", filepath.Join(t.TempDir(), "cm.yaml"),
		"--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "a100-40gb", "--tp", "8",
		"--train", "rate=1", "--train", "rate=4"}
	for _, q := range []string{"01", "04"} {
		args = append(args, shareddata.Path(t, dir+q+".json"))
	}
	stdout, stderr, err := opaltrace(t, append([]string{"calibrate", "--fit", "+serial_fraction"}, args[1:]...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, w := range []string{"mfu 0.", "bandwidth_efficiency 0.", "client_request_overhead_s 0.", "serial_fraction 0."} {
		if !strings.Contains(stdout, w) {
			t.Errorf("no %q in:\n%s", w, stdout)
		}
	}
	if strings.Contains(stdout, "serial_fraction not fitted") {
		t.Errorf("the warning that left serial_fraction out is still there:\n%s", stdout)
	}
	if _, _, err := opaltrace(t, append([]string{"calibrate", "--fit", "mfu", "--fit", "+serial_fraction"}, args[1:]...)...); err == nil || !strings.Contains(err.Error(), "+NAME") {
		t.Errorf("--fit mfu --fit +serial_fraction: %v", err)
	}
}

// TestCalibrateStartFrom: --start-from starts the fit at another cost
// model's coefficients, says so, and records it; a file that is not a
// cost model is an error that names it, and nothing is written.
func TestCalibrateStartFrom(t *testing.T) {
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_405b_online_output.jsonl")
	dir := t.TempDir()
	dc := filepath.Join(dir, "dc405.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "--model", "llama-3.1-405b", "--hardware", "8xH200", "--tp", "8", "--engine", "sglang",
		"--engine-opt", "disable_radix_cache=true", "--engine-opt", "enable_torch_compile=true", "--engine-opt", "mem_fraction_static=0.87", "-o", dc, in); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	first := filepath.Join(dir, "first.yaml")
	fit := []string{"--train", "rate=1&dataset=random", "--train", "rate=2&dataset=random", "--holdout", "rate=4&dataset=random"}
	if _, stderr, err := opaltrace(t, append(append([]string{"calibrate", "-o", first}, fit...), dc)...); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, stderr)
	}
	second := filepath.Join(dir, "second.yaml")
	stdout, stderr, err := opaltrace(t, append(append([]string{"calibrate", "--markdown", "--start-from", first, "-o", second}, fit...), dc)...)
	if err != nil {
		t.Fatalf("calibrate --start-from: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "calibrate: starting from "+first+" (h200, llama-3.1-405b, TP8): bandwidth_efficiency ") ||
		!strings.Contains(stderr, "at first.yaml's coefficients, ") {
		t.Errorf("stderr does not say where the fit started:\n%s", stderr)
	}
	if !strings.Contains(stdout, "at first.yaml's coefficients, where it started") {
		t.Errorf("the table's fit line does not say where it started:\n%s", stdout)
	}
	data, err := os.ReadFile(second)
	if err != nil || !strings.Contains(string(data), "start_from: first.yaml") {
		t.Errorf("the cost model does not record its start (%v):\n%s", err, data)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("not: a cost model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(dir, "third.yaml")
	if _, _, err := opaltrace(t, append(append([]string{"calibrate", "--start-from", bad, "-o", third}, fit...), dc)...); err == nil || !strings.Contains(err.Error(), "--start-from") || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("a start that is not a cost model: %v", err)
	}
	if _, err := os.Stat(third); !os.IsNotExist(err) {
		t.Errorf("a refused start left %s", third)
	}
}

// TestCalibrateReplaysTheKVTiers: calibrate replays the runs with the
// cluster file's KV tiers, as replay does. surajssd's rate-4 run after
// rate 1 (--carry-cache auto) on a GPU cache of 600 blocks finds the
// prompts rate 1 left in a 64 GiB CPU tier: its uncalibrated p90 TTFT
// (the default coefficients, the same in both fits) falls below the
// replay without the tier, which recomputes them.
func TestCalibrateReplaysTheKVTiers(t *testing.T) {
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	tmp := t.TempDir()
	tiers := filepath.Join(tmp, "tiers.yaml")
	if err := os.WriteFile(tiers, []byte("node_override:\n  host_mem_gib: 1024\nscheduler:\n  kv_offloading_size: 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	uncalibrated := map[bool]float64{}
	for _, withTiers := range []bool{false, true} {
		args := []string{"calibrate", "-o", filepath.Join(tmp, "cm.yaml"), "--num-gpu-blocks-override", "600",
			"--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "a100-40gb", "--tp", "8", "--train", "rate=4"}
		if withTiers {
			args = append(args, "--config", tiers)
		}
		for _, q := range []string{"01", "04"} {
			args = append(args, shareddata.Path(t, dir+q+".json"))
		}
		stdout, stderr, err := opaltrace(t, args...)
		if err != nil {
			t.Fatalf("calibrate (tiers %v): %v\n%s", withTiers, err, stderr)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if i := strings.Index(line, "rate=4 ttft p90"); i >= 0 {
				var observed, uncal float64
				if _, err := fmt.Sscan(line[i+len("rate=4 ttft p90"):], &observed, &uncal); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				uncalibrated[withTiers] = uncal
			}
		}
	}
	if with, without := uncalibrated[true], uncalibrated[false]; !(with > 0 && with < 0.8*without) {
		t.Errorf("rate 4's uncalibrated p90 TTFT %v ms with a CPU tier, %v ms without: the tier was not replayed", with, without)
	}
}
