package ingest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// Stats counts what Files read.
type Stats struct {
	Files    int      // inputs read
	Requests int      // good requests emitted
	Dropped  int      // bad records reported to onBad
	Skipped  []string // files in directories that no format recognised
}

// Files ingests every path in order. A directory contributes every regular
// file in it (not recursively, in name order) that some format recognises;
// the others are listed in Stats.Skipped. A path named explicitly must be
// recognised. "-" is standard input.
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
			runs = append(runs, r.Runs()...)
			return r.Err()
		}
	)
	for _, p := range paths {
		if p != "-" {
			fi, err := os.Stat(p)
			if err != nil {
				return runs, st, err
			}
			if fi.IsDir() {
				ents, err := os.ReadDir(p)
				if err != nil {
					return runs, st, err
				}
				for _, e := range ents {
					if !e.Type().IsRegular() {
						continue
					}
					if err := input(filepath.Join(p, e.Name()), false); err != nil {
						return runs, st, err
					}
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
