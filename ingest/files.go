package ingest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// Stats counts what Files read.
type Stats struct {
	Files    int      // inputs read
	Requests int      // good requests emitted
	Dropped  int      // bad records reported to onBad
	Skipped  []string // files in directories that no format recognised
	// Warnings are what readers warned of (see Warning), in input order.
	Warnings []*Warning

	// Companions are files in directories read as part of another input
	// (AIPerf's _aiperf.json, llmperf's _summary.json), each with a note.
	Companions []string
}

// companions are summary files that a format reads beside its main file:
// not inputs of their own, so a directory lists them apart from the files
// nobody recognises.
var companions = []struct{ suffix, mainSuffix string }{
	{"_aiperf.json", ".jsonl"},                      // AIPerf aggregate beside profile_export.jsonl
	{"_summary.json", "_individual_responses.json"}, // llmperf summary beside the per-request file
	{"meta.json", "requests.jsonl"},                 // vLLM engine-side run's arguments (vllm-engine)
	{"timeseries.csv", "requests.jsonl"},            // ... and its per-second stat-logger samples
}

// companionOf reports whether path is a companion whose main file exists,
// and returns that main file.
func companionOf(path string) (string, bool) {
	for _, c := range companions {
		if base, ok := strings.CutSuffix(path, c.suffix); ok {
			main := base + c.mainSuffix
			if fi, err := os.Stat(main); err == nil && fi.Mode().IsRegular() {
				return main, true
			}
		}
	}
	return "", false
}

// Files ingests every path in order: List(paths).Read.
func Files(paths []string, opts Options, emit func(*trace.Request) error, onBad func(*SyntaxError)) ([]trace.Run, Stats, error) {
	return List(paths).Read(opts, emit, onBad)
}

// A Listing is the files that inputs name, walked once (List): their total
// size, which a caller may want before reading (to show progress on large
// inputs), and what Read does with each, in order.
type Listing struct {
	items []listItem
	// Size is the bytes of the files to read (0 for stdin).
	Size int64
}

// A listItem is one step of a Listing's Read: a file to read, a file
// skipped or read as a companion (a note for Stats), the start or the end
// of a directory, or an error met while walking, where Read meets it.
type listItem struct {
	kind     listKind
	path     string // the file, the note, or the directory
	explicit bool   // a file the user named: it must be recognised
	err      error
}

type listKind uint8

const (
	listFile listKind = iota
	listSkipped
	listCompanion
	listDirStart
	listDirEnd
	listErr
)

// List walks paths as Files reads them: a directory contributes every
// regular file below it (recursively, in lexical order, hidden folders
// excepted); symlinks to directories, broken ones and special files are
// noted as skipped, and summary files beside their main file as
// companions. Errors (a path that does not exist, an unreadable
// directory) are kept for Read to return where it meets them, after the
// inputs before them were read.
func List(paths []string) *Listing {
	l := &Listing{}
	add := func(it listItem) { l.items = append(l.items, it) }
	for _, p := range paths {
		if p == "-" {
			add(listItem{kind: listFile, path: p, explicit: true})
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			add(listItem{kind: listErr, err: err})
			return l
		}
		if !fi.IsDir() {
			add(listItem{kind: listFile, path: p, explicit: true})
			l.Size += fi.Size()
			continue
		}
		add(listItem{kind: listDirStart, path: p})
		root := p
		if lfi, err := os.Lstat(p); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			// WalkDir does not follow a symlinked root; with a
			// trailing separator the system resolves it, and
			// the files keep the names the user gave.
			root = p + string(filepath.Separator)
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != root && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			var size int64
			if d.Type()&fs.ModeSymlink != 0 {
				// A symlink to a file is read; one to a
				// directory is not followed (it may loop) and
				// is listed, as is anything else skipped.
				fi, err := os.Stat(path)
				switch {
				case err != nil:
					add(listItem{kind: listSkipped, path: path + " (broken symlink)"})
					return nil
				case fi.IsDir():
					add(listItem{kind: listSkipped, path: path + " (symlink to a directory, not followed)"})
					return nil
				case !fi.Mode().IsRegular():
					add(listItem{kind: listSkipped, path: path + " (symlink to a special file)"})
					return nil
				}
				size = fi.Size()
			} else if !d.Type().IsRegular() {
				add(listItem{kind: listSkipped, path: path + " (not a regular file)"})
				return nil
			} else if info, err := d.Info(); err == nil {
				size = info.Size()
			}
			if main, ok := companionOf(path); ok {
				add(listItem{kind: listCompanion, path: path + " (summary of " + filepath.Base(main) + ")"})
				return nil
			}
			add(listItem{kind: listFile, path: path})
			l.Size += size
			return nil
		})
		if err != nil {
			add(listItem{kind: listErr, err: err})
			return l
		}
		add(listItem{kind: listDirEnd, path: p})
	}
	return l
}

// Read ingests the listed files in order. A file in a directory that no
// format recognises is listed in Stats.Skipped, and summary files read
// beside their main file in Stats.Companions. A directory with no trace
// file at all is an error. A path named explicitly must be recognised.
// "-" is standard input.
//
// Read calls emit for every good request in order (the request is valid
// only during the call) and onBad, when not nil, for every bad record. It
// stops with an error when emit fails, on an I/O error, on an unrecognised
// explicit path, or when more than opts.MaxErrors records are bad (an error
// wrapping ErrTooManyErrors). It returns the runs read, whose names are
// unique across all paths: when two inputs would share a run-name prefix
// (opts.Run or the base name), the later one gets "~2", "~3"….
func (l *Listing) Read(opts Options, emit func(*trace.Request) error, onBad func(*SyntaxError)) ([]trace.Run, Stats, error) {
	var (
		runs  []trace.Run
		st    Stats
		used  = map[string]bool{}
		input = func(path string, explicit bool) error {
			o := opts
			o.Run = uniquePrefix(used, runPrefix(opts.Run, path))
			r, c, err := Open(path, o)
			if err != nil {
				if !explicit && errors.Is(err, ErrUnrecognized) {
					st.Skipped = append(st.Skipped, path)
					return nil
				}
				return err
			}
			defer c.Close()
			used[o.Run] = true
			st.Files++
			for r.Scan() {
				switch rec := r.Record().(type) {
				case *trace.Request:
					st.Requests++
					if err := emit(rec); err != nil {
						return err
					}
				case *Warning:
					st.Warnings = append(st.Warnings, rec)
				case *SyntaxError:
					st.Dropped++
					if onBad != nil {
						onBad(rec)
					}
					if opts.MaxErrors > 0 && st.Dropped > opts.MaxErrors {
						return fmt.Errorf("%s: %w (more than %d)", path, ErrTooManyErrors, opts.MaxErrors)
					}
				}
			}
			if err := r.Err(); err != nil {
				return err
			}
			for _, run := range r.Runs() {
				if msgs := run.CheckSizes(); msgs != nil {
					// A run whose metadata is over the limits is a bad
					// record: not kept, so no output carries it.
					for _, m := range msgs {
						st.Dropped++
						if onBad != nil {
							onBad(&SyntaxError{File: path, Line: 1, Msg: "run " + clip([]byte(run.Name), 80) + ": " + m})
						}
					}
					continue
				}
				runs = append(runs, run)
			}
			return nil
		}
	)
	var dirFiles int // st.Files when the directory being read started
	for _, it := range l.items {
		switch it.kind {
		case listFile:
			if err := input(it.path, it.explicit); err != nil {
				return runs, st, err
			}
		case listSkipped:
			st.Skipped = append(st.Skipped, it.path)
		case listCompanion:
			st.Companions = append(st.Companions, it.path)
		case listDirStart:
			dirFiles = st.Files
		case listDirEnd:
			if st.Files == dirFiles {
				return runs, st, fmt.Errorf("%s: no trace file in this directory or below (%w)", it.path, ErrUnrecognized)
			}
		case listErr:
			return runs, st, it.err
		}
	}
	return runs, st, nil
}

func runPrefix(label, path string) string {
	if label != "" {
		return label
	}
	if path == "-" {
		return "stdin"
	}
	return filepath.Base(path)
}

func uniquePrefix(used map[string]bool, p string) string {
	if !used[p] {
		return p
	}
	for n := 2; ; n++ {
		if q := p + "~" + strconv.Itoa(n); !used[q] {
			return q
		}
	}
}
