package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "update golden files")

// Check compares got with the golden file at path. With -update it writes
// got there instead. A missing golden file counts as empty.
func Check(tb testing.TB, path string, got []byte) {
	tb.Helper()
	CheckOrWrite(tb, path, got, false)
}

// CheckOrWrite is Check for a golden file that a test's own flag (e.g.
// -routertable) also rewrites: with write or -update it writes got to path.
func CheckOrWrite(tb testing.TB, path string, got []byte, write bool) {
	tb.Helper()
	if write || *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	if string(want) != string(got) {
		tb.Errorf("%s differs from the output (rerun with -update to accept):\n%s", path, diff(string(want), string(got)))
	}
}

// diff returns the first ten lines that differ.
func diff(want, got string) string {
	w := strings.Split(want, "\n")
	g := strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a == c {
			continue
		}
		fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, a, c)
		if shown++; shown == 10 {
			b.WriteString("...\n")
			break
		}
	}
	return b.String()
}
