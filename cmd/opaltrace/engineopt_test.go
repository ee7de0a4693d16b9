package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIngestEngineVersionAndOptions: --engine-version records the
// engine's release, which replay then takes the defaults of; an
// --engine-opt no replay reads is kept but said; the version given as an
// engine option is refused, with nothing written.
func TestIngestEngineVersionAndOptions(t *testing.T) {
	const in = "../../samples/mooncake/conversation_trace_first10min.jsonl"
	dir := t.TempDir()
	pq := filepath.Join(dir, "mc.parquet")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), &stdout, &stderr, []string{"opaltrace", "ingest", "--engine", "vllm", "--engine-version", "0.8.3",
		"--engine-opt", "enable_prefix_cashing=false", "--engine-opt", "max_num_seqs=64", "-o", pq, in}); err != nil {
		t.Fatal(err)
	}
	if s := stderr.String(); !strings.Contains(s, "--engine-opt enable_prefix_cashing: kept in the run metadata, but no replay reads it") ||
		strings.Contains(s, "--engine-opt max_num_seqs") {
		t.Errorf("ingest's stderr:\n%s", s)
	}
	stdout.Reset()
	stderr.Reset()
	if err := run(context.Background(), &stdout, &stderr, []string{"opaltrace", "replay", "--workers", "1", "--hardware", "h100", "--model", "llama-3.1-8b",
		"-o", filepath.Join(dir, "sim.parquet"), pq}); err != nil {
		t.Fatal(err)
	}
	if s := stdout.String() + stderr.String(); !strings.Contains(s, "vLLM 0.8.3 per GPU") || !strings.Contains(s, "max_num_seqs=64") {
		t.Errorf("the replay does not take the recorded version and option:\n%s", s)
	}

	bad := filepath.Join(dir, "bad.parquet")
	err := run(context.Background(), &stdout, &stderr, []string{"opaltrace", "ingest", "--engine-opt", "engine_version=0.8.3", "-o", bad, in})
	if err == nil || !strings.Contains(err.Error(), "--engine-version 0.8.3") {
		t.Errorf("--engine-opt engine_version=0.8.3: error %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a refused ingest wrote %s (%v)", bad, err)
	}
}
