package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSplitLabel: a dataset is labelled by label=path, or by its file's
// name without the extension; a directory's name is kept whole, dots and
// all (a sweep's folder such as surajssd_llama-3.3-70b_a100-40gb_tp8).
func TestSplitLabel(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "surajssd_llama-3.3-70b_a100-40gb_tp8")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ arg, label, path string }{
		{"observed=run.json", "observed", "run.json"},
		{"/data/qps_1.json", "qps_1", "/data/qps_1.json"},
		{dir, "surajssd_llama-3.3-70b_a100-40gb_tp8", dir},
		{dir + "/", "surajssd_llama-3.3-70b_a100-40gb_tp8", dir + "/"},
	} {
		label, path := splitLabel(c.arg)
		if label != c.label || path != c.path {
			t.Errorf("splitLabel(%q) = %q, %q; want %q, %q", c.arg, label, path, c.label, c.path)
		}
	}
}
