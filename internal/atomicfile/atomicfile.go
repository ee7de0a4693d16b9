package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A File is an output being written. Commit makes it visible; Abort (or a
// Commit that fails) removes it. Errors of its methods name the target,
// never the temporary file, which the user never asked for.
type File struct {
	*os.File
	target string
	done   bool
}

// live holds the temporary files being written, so that AbortAll can
// remove them when the process is interrupted.
var live = struct {
	sync.Mutex
	files  map[*File]bool
	closed bool // AbortAll ran: no file may be created or committed
}{files: map[*File]bool{}}

// ErrAborted is returned by Create and Commit after AbortAll.
var ErrAborted = errors.New("interrupted: output discarded")

// tempPrefix is the start of the name of path's temporary files:
// ".BASE.tmp-". The rest is "PID-RANDOM": the process that writes it, so
// that a later write to the same path can tell a file left by a dead
// process from one being written.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// Create starts writing path. It first removes the temporary files of
// path that a process no longer running left behind (see Sweep).
func Create(path string) (*File, error) {
	Sweep(path)
	live.Lock()
	defer live.Unlock()
	if live.closed {
		return nil, fmt.Errorf("%s: %w", path, ErrAborted)
	}
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix(path)+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return nil, targetErr(path, err)
	}
	af := &File{File: f, target: path}
	live.files[af] = true
	return af, nil
}

// Write writes to the file; an error names the target.
func (f *File) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	return n, targetErr(f.target, err)
}

// WriteString writes s; an error names the target.
func (f *File) WriteString(s string) (int, error) {
	n, err := f.File.WriteString(s)
	return n, targetErr(f.target, err)
}

// Commit syncs, closes and renames the file into place.
func (f *File) Commit() error {
	live.Lock()
	defer live.Unlock()
	if f.done {
		return fmt.Errorf("atomicfile: %s already finished", f.target)
	}
	f.done = true
	delete(live.files, f)
	fail := func(err error) error {
		f.File.Close()
		os.Remove(f.File.Name())
		return targetErr(f.target, err)
	}
	if live.closed {
		return fail(ErrAborted)
	}
	if err := f.File.Sync(); err != nil {
		return fail(err)
	}
	if err := f.File.Close(); err != nil {
		return fail(err)
	}
	if err := os.Chmod(f.File.Name(), 0o644); err != nil {
		return fail(err)
	}
	if err := os.Rename(f.File.Name(), f.target); err != nil {
		return fail(err)
	}
	return nil
}

// Abort discards the file. It is safe to call after Commit (a no-op), so
// `defer f.Abort()` guards every early return.
func (f *File) Abort() {
	live.Lock()
	defer live.Unlock()
	f.abort()
}

func (f *File) abort() {
	if f.done {
		return
	}
	f.done = true
	delete(live.files, f)
	f.File.Close()
	os.Remove(f.File.Name())
}

// AbortAll removes every file being written and makes later Creates and
// Commits fail with ErrAborted. A command calls it when it is interrupted
// (SIGINT, SIGTERM, SIGHUP), before it exits, so that an interrupted run
// leaves no temporary file. It returns the targets it discarded.
func AbortAll() []string {
	live.Lock()
	defer live.Unlock()
	live.closed = true
	var targets []string
	for f := range live.files {
		targets = append(targets, f.target)
		f.abort()
	}
	return targets
}

// staleAge is how old a temporary file of the form without a process ID
// (written by opaltrace before IDs were added) must be to be swept.
const staleAge = time.Hour

var pidPart = regexp.MustCompile(`^(\d+)-\d+$`)

// Sweep removes path's temporary files (".BASE.tmp-PID-N") whose process
// is no longer running: what a run killed by a signal it could not catch
// (SIGKILL, a power cut) left. Files of a live process are kept, and so
// is everything not named by this package's pattern. Errors are ignored:
// sweeping is best effort and the write that follows reports real ones.
func Sweep(path string) {
	dir, prefix := filepath.Dir(path), tempPrefix(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if m := pidPart.FindStringSubmatch(rest); m != nil {
			if pid, err := strconv.Atoi(m[1]); err == nil && !processRunning(pid) {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		if _, err := strconv.ParseUint(rest, 10, 64); err == nil {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAge {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// targetErr rewrites a path error about the temporary file to name the
// target: "write out.parquet: no space left on device".
func targetErr(target string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: target, Err: pe.Err}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &fs.PathError{Op: le.Op, Path: target, Err: le.Err}
	}
	if errors.Is(err, ErrAborted) {
		return fmt.Errorf("%s: %w", target, err)
	}
	return err
}

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}
