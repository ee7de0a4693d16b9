package ingest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	mcGood = `{"timestamp": 0, "input_length": 5, "output_length": 1}` + "\n"
	mcBad  = `{"timestamp": 0, "input_length": -5, "output_length": 1}` + "\n"
)

func TestFilesDirectory(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a/t.jsonl":  mcGood + mcBad + mcGood,
		"b/t.jsonl":  mcGood,
		"b/README":   "not a trace\n",
		"b/sub/x.js": mcGood, // directories are read recursively
	})
	var ids []string
	var bad []string
	runs, st, err := Files([]string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}, Options{},
		func(r *trace.Request) error { ids = append(ids, r.RequestID); return nil },
		func(e *SyntaxError) { bad = append(bad, e.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids, " "); got != "t.jsonl#1/0 t.jsonl#1/2 x.js#1/0 t.jsonl~2#1/0" {
		t.Errorf("ids = %s", got)
	}
	if len(runs) != 3 || runs[0].Name != "t.jsonl#1" || runs[1].Name != "x.js#1" || runs[2].Name != "t.jsonl~2#1" {
		t.Errorf("runs = %+v", runs)
	}
	if st.Files != 3 || st.Requests != 4 || st.Dropped != 1 || len(st.Skipped) != 1 || filepath.Base(st.Skipped[0]) != "README" {
		t.Errorf("stats = %+v", st)
	}
	if len(bad) != 1 || !strings.HasSuffix(bad[0], "t.jsonl:2: input_length: negative (-5)") {
		t.Errorf("bad = %v", bad)
	}
}

func TestFilesMaxErrors(t *testing.T) {
	dir := writeFiles(t, map[string]string{"t.jsonl": mcBad + mcBad + mcGood + mcBad})
	path := filepath.Join(dir, "t.jsonl")
	emit := func(*trace.Request) error { return nil }
	_, st, err := Files([]string{path}, Options{MaxErrors: 2}, emit, nil)
	if !errors.Is(err, ErrTooManyErrors) || st.Dropped != 3 {
		t.Errorf("MaxErrors 2: err=%v stats=%+v", err, st)
	}
	_, st, err = Files([]string{path}, Options{MaxErrors: 3}, emit, nil)
	if err != nil || st.Dropped != 3 || st.Requests != 1 {
		t.Errorf("MaxErrors 3: err=%v stats=%+v", err, st)
	}
}

func TestFilesExplicitUnrecognized(t *testing.T) {
	dir := writeFiles(t, map[string]string{"README": "hello\n"})
	_, _, err := Files([]string{filepath.Join(dir, "README")}, Options{}, func(*trace.Request) error { return nil }, nil)
	if !errors.Is(err, ErrUnrecognized) {
		t.Errorf("err = %v", err)
	}
	stop := errors.New("stop")
	dir = writeFiles(t, map[string]string{"t.jsonl": mcGood + mcGood})
	_, st, err := Files([]string{filepath.Join(dir, "t.jsonl")}, Options{}, func(*trace.Request) error { return stop }, nil)
	if err != stop || st.Requests != 1 {
		t.Errorf("emit error: err=%v stats=%+v", err, st)
	}
}

func TestFilesEmptyDirectoryIsAnError(t *testing.T) {
	dir := writeFiles(t, map[string]string{"README": "not a trace\n", ".hidden/t.jsonl": mcGood})
	_, st, err := Files([]string{dir}, Options{}, func(*trace.Request) error { return nil }, nil)
	if !errors.Is(err, ErrUnrecognized) {
		t.Errorf("directory without traces: err = %v, want ErrUnrecognized", err)
	}
	if st.Files != 0 {
		t.Errorf("read %d files; hidden folders must be passed over", st.Files)
	}
}

// TestFilesSymlinks: a symlink to a directory given on the command line
// is read like the directory (with or without a trailing slash); inside a
// directory, a symlink to a file is read, and the entries not read (a
// symlink to a directory, a broken one, a FIFO) are listed with why.
func TestFilesSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.MkdirAll(filepath.Join(real, "sub"), 0o755)
	line := "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n"
	os.WriteFile(filepath.Join(real, "a.jsonl"), []byte(line), 0o644)
	os.Symlink("../a.jsonl", filepath.Join(real, "sub", "b.jsonl"))
	os.Symlink("..", filepath.Join(real, "sub", "up"))
	os.Symlink("missing.jsonl", filepath.Join(real, "sub", "broken.jsonl"))
	link := filepath.Join(dir, "linkdir")
	os.Symlink(real, link)
	for _, p := range []string{link, link + "/"} {
		_, st, err := Files([]string{p}, Options{}, func(*trace.Request) error { return nil }, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Files != 2 || st.Requests != 2 {
			t.Errorf("%s: %d files, %d requests; want 2 and 2", p, st.Files, st.Requests)
		}
		want := []string{
			filepath.Join(link, "sub", "broken.jsonl") + " (broken symlink)",
			filepath.Join(link, "sub", "up") + " (symlink to a directory, not followed)",
		}
		if strings.Join(st.Skipped, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: skipped\n%s\nwant\n%s", p, strings.Join(st.Skipped, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestListSizeAndOrder: List walks once; its Size counts the files Read
// reads (not companions, not hidden folders), and an error met while
// listing is returned by Read only after the inputs before it were read.
func TestListSizeAndOrder(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a/t.jsonl":         mcGood + mcGood,
		"a/.hidden/t.jsonl": mcGood,
		"a/p.jsonl":         mcGood,
		"a/p_aiperf.json":   "{}", // AIPerf's aggregate beside p.jsonl: a companion
		"a/README":          "not a trace\n",
	})
	l := List([]string{filepath.Join(dir, "a"), filepath.Join(dir, "missing")})
	if want := int64(3*len(mcGood) + len("not a trace\n")); l.Size != want {
		t.Errorf("Size = %d, want %d (the files to read)", l.Size, want)
	}
	n := 0
	_, st, err := l.Read(Options{}, func(*trace.Request) error { n++; return nil }, nil)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want the missing path's", err)
	}
	if n != 3 || st.Files != 2 || len(st.Companions) != 1 || len(st.Skipped) != 1 {
		t.Errorf("read %d requests before the error, stats %+v; want 3, 2 files, 1 companion, 1 skipped", n, st)
	}
}
