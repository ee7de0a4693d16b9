package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The defaults Opal config, with the trace its stage 1 names written
// beside it: two stages, two runs, same file twice for the same seed.
func TestReplayOpalWorkload(t *testing.T) {
	cfg, err := os.ReadFile(shareddata.Path(t, "formats/opal/defaults/sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "traces"), 0o755)
	// 40 ids: the stage's chunk_size is 1 token, and --opal-compat
	// expands a request's ids into its prompt, an id a chunk.
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	var lines strings.Builder
	for i := range 12 {
		lines.WriteString(`{"timestamp": ` + strconv.Itoa(i%10*1000) + `, "input_length": 40, "output_length": 4, "hash_ids": [` + strings.Join(ids, ", ") + `]}` + "\n")
	}
	os.WriteFile(filepath.Join(dir, "traces", "hello.jsonl"), []byte(lines.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "sim_config.json"), cfg, 0o644)
	var files [2][]byte
	for i := range files {
		out := filepath.Join(dir, "sim"+string(rune('a'+i))+".parquet")
		if _, stderr, err := opaltrace(t, "replay", "--opal-workload", filepath.Join(dir, "sim_config.json"), "-o", out); err != nil {
			t.Fatalf("replay: %v\n%s", err, stderr)
		}
		files[i], _ = os.ReadFile(out)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("two replays of the same Opal workload wrote different files")
	}
	runs, reqs, err := trace.ReadFile(filepath.Join(dir, "sima.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range reqs {
		n[r.Run+" "+r.Stage]++
	}
	if len(runs) != 2 || runs[0].Name != "simulated/stage_0" || n["simulated/stage_0 stage_0"] != 100 || n["simulated/stage_1 stage_1"] != 10 {
		t.Errorf("runs %v, requests per run and stage %v", runs, n)
	}
	if _, _, err := opaltrace(t, "replay", "--opal-workload", filepath.Join(dir, "sim_config.json"), "-o", filepath.Join(dir, "x.parquet"), "trace.jsonl"); err == nil {
		t.Error("a TRACE with --opal-workload is accepted")
	}
	// --seed in place of the config's simulation.seed (42), with
	// --opal-compat too: the config's own seed writes what no --seed
	// does, another seed other arrivals.
	for _, compat := range []bool{false, true} {
		var seeded [3][]byte
		for i, seed := range []string{"", "42", "7"} {
			out := filepath.Join(dir, "seed"+strconv.Itoa(i)+".parquet")
			args := []string{"replay", "--opal-config", filepath.Join(dir, "sim_config.json"), "-o", out}
			if compat {
				args = append(args, "--opal-compat")
			}
			if seed != "" {
				args = append(args, "--seed", seed)
			}
			if _, stderr, err := opaltrace(t, args...); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, stderr)
			}
			seeded[i], _ = os.ReadFile(out)
		}
		if !bytes.Equal(seeded[0], seeded[1]) || bytes.Equal(seeded[0], seeded[2]) {
			t.Errorf("compat %v: --seed 42 (the config's) wrote another file than no --seed (%v), --seed 7 the same (%v)", compat,
				!bytes.Equal(seeded[0], seeded[1]), bytes.Equal(seeded[0], seeded[2]))
		}
	}
}

// replay --opal-config on Opal's micro run: --print-config shows the
// cluster without -o; --opal-compat gives Opal's TTFT in ttft_s, stats
// --json prints it to full precision, and --opal-stats writes Opal's
// opal_stats.json again byte for byte; the same config replayed with
// opaltrace's semantics writes one too, which stats --compare reads
// beside Opal's own.
func TestReplayOpalConfig(t *testing.T) {
	micro := shareddata.Path(t, "formats/opal/micro_one_long")
	cfg := filepath.Join(micro, "sim_config.json")
	dir := t.TempDir()
	stdout, _, err := opaltrace(t, "replay", "--opal-config", cfg, "--print-config")
	if err != nil || !strings.Contains(stdout, "num_gpu_blocks_override: 26534") || !strings.Contains(stdout, "router: max_prefix") {
		t.Fatalf("--print-config: %v\n%s", err, stdout)
	}
	sim := filepath.Join(dir, "compat.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--opal-config", cfg, "--opal-compat", "-o", sim, "--opal-stats", filepath.Join(dir, "compat")); err != nil {
		t.Fatalf("--opal-compat: %v\n%s", err, stderr)
	}
	_, reqs, err := trace.ReadFile(sim)
	if err != nil || len(reqs) != 1 || reqs[0].TTFTSec.V != 0.8010653623305508 {
		t.Fatalf("compat records %v (%v): want one, TTFT 0.8010653623305508 s", reqs, err)
	}
	if reqs[0].Run != "simulated" {
		t.Errorf("compat run %q, want --run-name's default, simulated", reqs[0].Run)
	}
	stdout, _, err = opaltrace(t, "stats", "--json", sim)
	if err != nil || !strings.Contains(stdout, `"mean_ttft_ms": 801.0653623305508`) {
		t.Errorf("stats --json: %v\n%s", err, stdout)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "compat", "stage_0", "opal_stats.json"))
	want, _ := os.ReadFile(filepath.Join(micro, "opal_stats.json"))
	if !bytes.Equal(got, want) {
		t.Errorf("opal_stats.json:\n%s\nOpal's:\n%s", got, want)
	}
	ours := filepath.Join(dir, "ours.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--opal-config", cfg, "-o", ours, "--run-name", "mine", "--opal-stats", filepath.Join(dir, "ours")); err != nil {
		t.Fatalf("--opal-config: %v\n%s", err, stderr)
	}
	if _, reqs, err := trace.ReadFile(ours); err != nil || len(reqs) != 1 || reqs[0].Run != "mine" {
		t.Errorf("--run-name mine: records %v (%v), want one of run mine", reqs, err)
	}
	if _, _, err := opaltrace(t, "replay", "--opal-config", cfg, "--run", "1", "-o", filepath.Join(dir, "x.parquet")); err == nil || !strings.Contains(err.Error(), "--opal-config has none") {
		t.Errorf("--run with --opal-config: %v, want refused", err)
	}
	stdout, stderr, err := opaltrace(t, "stats", "--compare", filepath.Join(dir, "ours", "stage_0", "opal_stats.json"), filepath.Join(micro, "opal_stats.json"))
	if err != nil || !strings.Contains(stdout, "TTFT") {
		t.Errorf("stats --compare: %v\n%s%s", err, stdout, stderr)
	}
	if _, _, err := opaltrace(t, "replay", "--opal-config", cfg, "--opal-compat", "--opal-quirk", "stale_chunk=maybe", "-o", filepath.Join(dir, "x.parquet")); err == nil {
		t.Error("--opal-quirk stale_chunk=maybe is accepted")
	}
	bad := filepath.Join(dir, "bad.json")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(bad, bytes.Replace(b, []byte(`"num_workers": 1`), []byte(`"num_workers": -1`), 1), 0o644)
	out := filepath.Join(dir, "bad.parquet")
	if _, _, err := opaltrace(t, "replay", "--opal-config", bad, "-o", out); err == nil || !strings.Contains(err.Error(), "bad.json:5: simulation.num_workers") {
		t.Errorf("bad config: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a bad config left an output")
	}
}

// --print-config shows the cluster of an Opal config whose trace stage's
// file is not on this machine, with a note that a replay needs it; the
// replay itself is refused with the file's line.
func TestPrintOpalConfigWithoutTrace(t *testing.T) {
	cfg, err := os.ReadFile(shareddata.Path(t, "formats/opal/defaults/sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sim_config.json")
	os.WriteFile(path, cfg, 0o644)
	stdout, stderr, err := opaltrace(t, "replay", "--opal-config", path, "--print-config")
	if err != nil || !strings.Contains(stdout, "seed: 42") ||
		!strings.Contains(stderr, `note: `+path+`:48: workload.stages[1].workload_params.trace_file: "traces/hello.jsonl" not found`) ||
		!strings.HasSuffix(stderr, ": a replay needs it\n") {
		t.Errorf("--print-config: %v\n%s\n%s", err, stdout, stderr)
	}
	_, _, err = opaltrace(t, "replay", "--opal-config", path, "-o", filepath.Join(t.TempDir(), "x.parquet"))
	if err == nil || !strings.HasPrefix(err.Error(), path+`:48: workload.stages[1].workload_params.trace_file: "traces/hello.jsonl" not found`) {
		t.Errorf("replay without the trace: %v", err)
	}
}
