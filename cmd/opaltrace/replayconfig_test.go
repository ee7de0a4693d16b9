package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// The configuration a simulated run records is the one that ran: replayed
// from it, with no flag, the same input gives the same bytes (records, run
// metadata with that same configuration, per-second file), for each
// engine. It holds every default, so it names the engine's own settings
// and the KV capacity, which the flags and the cluster file left unsaid.
func TestReplayFromRecordedConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 200)
	for _, c := range []struct {
		name string
		args []string
		want []string // keys the recorded configuration must hold
	}{
		{"vllm", []string{"--workers", "3", "--max-num-seqs", "32", "--client-latency", "0.002", "--seed", "9"},
			[]string{"engine: vllm", "max_num_seqs: 32", "kv_cache_tokens:", "block_size: 16", "stream_interval: 1"}},
		{"sglang", []string{"--scheduler", "sglang", "--workers", "2", "--time-scale", "0.5"},
			[]string{"engine: sglang", "chunked_prefill_size: 8192", "max_prefill_tokens: 16384", "max_running_requests:",
				"schedule_policy: lpm", "schedule_conservativeness: 1", "context_length:", "kv_cache_tokens:"}},
	} {
		first := filepath.Join(dir, c.name+"1.parquet")
		firstSec := filepath.Join(dir, c.name+"1.seconds.parquet")
		args := append([]string{"replay", "-o", first, "--per-second", firstSec}, c.args...)
		if _, stderr, err := opaltrace(t, append(args, in)...); err != nil {
			t.Fatalf("%s: replay: %v\n%s", c.name, err, stderr)
		}
		runs, _, err := trace.ReadRuns(first)
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: %v, %d runs", c.name, err, len(runs))
		}
		recorded := runs[0].Extra["config"]
		for _, k := range c.want {
			if !strings.Contains(recorded, k) {
				t.Errorf("%s: recorded configuration lacks %q:\n%s", c.name, k, recorded)
			}
		}
		cfgFile := filepath.Join(dir, c.name+".yaml")
		if err := os.WriteFile(cfgFile, []byte(recorded), 0o644); err != nil {
			t.Fatal(err)
		}
		second := filepath.Join(dir, c.name+"2.parquet")
		secondSec := filepath.Join(dir, c.name+"2.seconds.parquet")
		if _, stderr, err := opaltrace(t, "replay", "-o", second, "--per-second", secondSec, "--config", cfgFile, in); err != nil {
			t.Fatalf("%s: replay from the recorded configuration: %v\n%s", c.name, err, stderr)
		}
		for _, pair := range [][2]string{{first, second}, {firstSec, secondSec}} {
			a, errA := os.ReadFile(pair[0])
			b, errB := os.ReadFile(pair[1])
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s and %s differ: the recorded configuration is not the one that ran", c.name, filepath.Base(pair[0]), filepath.Base(pair[1]))
			}
		}
	}
}
