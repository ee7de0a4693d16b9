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
	var lines strings.Builder
	for i := range 12 {
		lines.WriteString(`{"timestamp": ` + strconv.Itoa(i%10*1000) + `, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 3]}` + "\n")
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
}
