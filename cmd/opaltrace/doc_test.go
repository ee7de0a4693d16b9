package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocExamples runs every "$ opaltrace …" line of doc.go, in order, in
// a scratch directory that sees the repository's samples/.
func TestDocExamples(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	samples, err := filepath.Abs("../../samples")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(samples, filepath.Join(dir, "samples")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	n := 0
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		cmd, ok := strings.CutPrefix(line, "$ opaltrace ")
		if !ok {
			continue
		}
		n++
		if _, stderr, err := opaltrace(t, strings.Fields(cmd)...); err != nil {
			t.Fatalf("$ opaltrace %s: %v\n%s", cmd, err, stderr)
		}
	}
	if n < 5 {
		t.Fatalf("doc.go has %d examples; the test expects the documented session", n)
	}
	for _, f := range []string{"mooncake.parquet", "sim4.parquet", "sim8.parquet", "report.html"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("example session did not write %s: %v", f, err)
		}
	}
}
