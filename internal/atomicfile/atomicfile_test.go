package atomicfile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.parquet")
	os.WriteFile(target, []byte("old"), 0o644)

	f, err := Create(target)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	f.Abort()
	if b, _ := os.ReadFile(target); string(b) != "old" {
		t.Errorf("an aborted write changed the target to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("an aborted write left %d files behind", len(ents)-1)
	}

	if err := WriteFile(target, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("target holds %q after commit, want new", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a committed write left %d temporary files behind", len(ents)-1)
	}
}

// TestSweepStale: temporary files of the target left by a process that is
// gone are removed by the next write; those of a live process, of other
// targets and files of other patterns are kept.
func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.parquet")
	dead := deadPID(t)
	keep := []string{
		".out.parquet.tmp-" + strconv.Itoa(os.Getpid()) + "-123", // this process: live
		".other.parquet.tmp-" + strconv.Itoa(dead) + "-1",        // another target
		"out.parquet.tmp-" + strconv.Itoa(dead) + "-1",           // not hidden: not ours
		".out.parquet.tmp-notes",                                 // not our pattern
		".out.parquet.tmp-42",                                    // old pattern, but fresh
	}
	stale := []string{".out.parquet.tmp-" + strconv.Itoa(dead) + "-987654"}
	for _, n := range append(keep, stale...) {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644)
	}
	old := filepath.Join(dir, ".out.parquet.tmp-77")
	os.WriteFile(old, []byte("x"), 0o644)
	past := time.Now().Add(-2 * staleAge)
	os.Chtimes(old, past, past)
	stale = append(stale, filepath.Base(old))

	if err := WriteFile(target, []byte("new")); err != nil {
		t.Fatal(err)
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was swept: %v", n, err)
		}
	}
	for _, n := range stale {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("stale %s was kept", n)
		}
	}
}

// deadPID returns the ID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestAbortAll: an interrupt removes every file being written and refuses
// later writes; errors name the target, never the temporary file.
func TestAbortAll(t *testing.T) {
	t.Cleanup(func() { live.Lock(); live.closed = false; live.Unlock() })
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.html")
	fa, err := Create(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := Create(b)
	if err != nil {
		t.Fatal(err)
	}
	fa.Write([]byte("half"))
	got := AbortAll()
	slices.Sort(got)
	if want := []string{a, b}; !slices.Equal(got, want) {
		t.Errorf("AbortAll discarded %v, want %v", got, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("AbortAll left %d files", len(ents))
	}
	if err := fb.Commit(); err == nil || !strings.Contains(err.Error(), b) || strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("Commit after AbortAll: %v, want an error naming %s", err, b)
	}
	if _, err := Create(a); !errors.Is(err, ErrAborted) {
		t.Errorf("Create after AbortAll: %v, want ErrAborted", err)
	}
}

// TestErrorsNameTarget: a failed write names the output, not the hidden
// temporary file.
func TestErrorsNameTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.parquet")
	f, err := Create(target)
	if err != nil {
		t.Fatal(err)
	}
	f.File.Close() // make the next write fail
	_, err = f.Write([]byte("x"))
	if err == nil || !strings.Contains(err.Error(), target) || strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("write error %q does not name %s alone", err, target)
	}
	f.Abort()
	if _, err := Create(filepath.Join(dir, "missing", "out.parquet")); err == nil || strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("create error %q names the temporary file", err)
	}
}
