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

// Files ingests every path in order. A directory contributes every regular
// file below it (recursively, in lexical order, hidden folders excepted)
// that some format recognises; the others are listed in Stats.Skipped, and
// summary files read beside their main file in Stats.Companions. A
// directory with no trace file at all is an error. A path named explicitly
// must be recognised. "-" is standard input.
//
// Files calls emit for every good request in order (the request is valid
// only during the call) and onBad, when not nil, for every bad record. It
// stops with an error when emit fails, on an I/O error, on an unrecognised
// explicit path, or when more than opts.MaxErrors records are bad (an error
// wrapping ErrTooManyErrors). It returns the runs read, whose names are
// unique across all paths: when two inputs would share a run-name prefix
// (opts.Run or the base name), the later one gets "~2", "~3"….
func Files(paths []string, opts Options, emit func(*trace.Request) error, onBad func(*SyntaxError)) ([]trace.Run, Stats, error) {
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
	for _, p := range paths {
		if p != "-" {
			fi, err := os.Stat(p)
			if err != nil {
				return runs, st, err
			}
			if fi.IsDir() {
				before := st.Files
				root := p
				if lfi, err := os.Lstat(p); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
					// WalkDir does not follow a symlinked root; with a
					// trailing separator the system resolves it, and
					// the files keep the names the user gave.
					root = p + string(filepath.Separator)
				}
				err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if d.IsDir() {
						if path != root && strings.HasPrefix(d.Name(), ".") {
							return filepath.SkipDir
						}
						return nil
					}
					if d.Type()&fs.ModeSymlink != 0 {
						// A symlink to a file is read; one to a
						// directory is not followed (it may loop) and
						// is listed, as is anything else skipped.
						fi, err := os.Stat(path)
						switch {
						case err != nil:
							st.Skipped = append(st.Skipped, path+" (broken symlink)")
							return nil
						case fi.IsDir():
							st.Skipped = append(st.Skipped, path+" (symlink to a directory, not followed)")
							return nil
						case !fi.Mode().IsRegular():
							st.Skipped = append(st.Skipped, path+" (symlink to a special file)")
							return nil
						}
					} else if !d.Type().IsRegular() {
						st.Skipped = append(st.Skipped, path+" (not a regular file)")
						return nil
					}
					if main, ok := companionOf(path); ok {
						st.Companions = append(st.Companions, path+" (summary of "+filepath.Base(main)+")")
						return nil
					}
					return input(path, false)
				})
				if err != nil {
					return runs, st, err
				}
				if st.Files == before {
					return runs, st, fmt.Errorf("%s: no trace file in this directory or below (%w)", p, ErrUnrecognized)
				}
				continue
			}
		}
		if err := input(p, true); err != nil {
			return runs, st, err
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
