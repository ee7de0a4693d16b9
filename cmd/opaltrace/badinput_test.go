package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
)

// TestBadInputGolden runs the command on bad inputs (testdata/badinput)
// and compares what a user sees, stdout and stderr (the error main prints
// last), with golden files, as benchstat's tests do: NAME.stdout and
// NAME.stderr, rewritten with -update. Every case fails (exit status 1);
// the output file exists only where the good records were kept.
//
// Messages that list a registry (formats, hardware, models, cluster keys)
// are left out: they change whenever an entry is added, not when the
// error reporting does.
func TestBadInputGolden(t *testing.T) {
	const in = "testdata/badinput/"
	for _, tc := range []struct {
		name    string
		args    []string // $OUT is the output file in a temporary directory
		written bool     // the good records are written despite the error
	}{
		{"ingest-mooncake-bad-records", []string{"ingest", "--format", "mooncake", "-o", "$OUT", in + "mooncake-bad.jsonl"}, true},
		{"ingest-mooncake-max-errors", []string{"ingest", "--format", "mooncake", "--max-errors", "1", "-o", "$OUT", in + "mooncake-bad.jsonl"}, false},
		{"ingest-azure-bad-records", []string{"ingest", "--format", "azure", "-o", "$OUT", in + "azure-bad.csv"}, true},
		{"ingest-vllm-bench-bad-run", []string{"ingest", "--format", "vllm-bench", "-o", "$OUT", in + "vllm-bad.json"}, false}, // nothing good: nothing written
		{"ingest-missing-file", []string{"ingest", "-o", "$OUT", in + "missing.jsonl"}, false},
		{"stats-truncated-parquet", []string{"stats", in + "truncated.parquet"}, false},
		{"stats-bad-percentile", []string{"stats", "--percentiles", "50,abc", in + "mooncake-bad.jsonl"}, false},
		{"replay-bad-records", []string{"replay", "--workers", "2", "--hardware", "h100", "--model", "llama-3.1-8b", "-o", "$OUT", in + "mooncake-bad.jsonl"}, false},
		{"replay-cluster-negative-workers", []string{"replay", "--config", in + "neg-cluster.yaml", "--hardware", "h100", "--model", "llama-3.1-8b", "-o", "$OUT", in + "mooncake-bad.jsonl"}, false},
		{"replay-no-trace", []string{"replay", "-o", "$OUT"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := filepath.Join(dir, "out.parquet")
			args := []string{"opaltrace"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "$OUT", out))
			}
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), &stdout, &stderr, args)
			if err == nil {
				t.Fatal("succeeded; want an error")
			}
			stderr.WriteString("opaltrace: " + err.Error() + "\n") // as main prints it
			clean := func(b []byte) []byte {
				return bytes.ReplaceAll(b, []byte(dir+string(filepath.Separator)), []byte("$TMP/"))
			}
			golden.Check(t, filepath.Join("testdata", "badinput", tc.name+".stdout"), clean(stdout.Bytes()))
			golden.Check(t, filepath.Join("testdata", "badinput", tc.name+".stderr"), clean(stderr.Bytes()))
			if _, err := os.Stat(out); (err == nil) != tc.written {
				t.Errorf("output file written: %v, want %v", err == nil, tc.written)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 1 || (len(entries) == 1 && entries[0].Name() != "out.parquet") {
				t.Errorf("files left beside the output: %v", entries)
			}
		})
	}
}
