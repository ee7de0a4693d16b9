package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/trace"
)

// A dataset is one input of stats, replay or report, loaded whole.
type dataset struct {
	Name     string
	Runs     []trace.Run
	Requests []*trace.Request
	// Loaded is every run the input had, before --run chose Runs: the
	// runs a label's "#3" counts among (labelRuns).
	Loaded []trace.Run
}

// splitLabel splits "label=path" (benchfmt's convention); a plain path is
// labelled by its base name without extension.
func splitLabel(arg string) (label, path string) {
	if i := strings.Index(arg, "="); i > 0 {
		if _, err := os.Stat(arg); err != nil {
			return arg[:i], arg[i+1:]
		}
	}
	base := filepath.Base(arg)
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		// A directory has no extension: "llama-3.3-70b_tp8" keeps its ".3-70b_tp8".
		return base, arg
	}
	return strings.TrimSuffix(base, filepath.Ext(base)), arg
}

// isParquet reports whether path starts with Parquet's magic bytes.
func isParquet(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && bytes.Equal(magic[:], []byte("PAR1"))
}

// loadDataset reads an opaltrace Parquet file, or any ingestible file or
// directory, whole. Bad records of an ingestible input are printed to
// stderr and make the load fail, as they would make ingest fail, unless
// allowErrors.
func loadDataset(arg string, opts ingest.Options, allowErrors bool, stderr io.Writer) (*dataset, error) {
	label, path := splitLabel(arg)
	ds := &dataset{Name: label}
	runs, err := eachRequest(path, nil, opts, allowErrors, stderr, func(r *trace.Request) error {
		ds.Requests = append(ds.Requests, r.Clone())
		return nil
	})
	if err != nil {
		return nil, err
	}
	ds.Runs = runs
	return ds, nil
}

// eachRequest streams the requests of the input at path (an opaltrace
// Parquet file, of which only the columns cols are read, all when nil;
// or any ingestible file or directory) to add, which must copy what it
// keeps: the request may be reused. It returns the input's runs. Bad
// records of an ingestible input are printed to stderr and fail the read,
// unless allowErrors.
//
// A large input shows its progress on stderr (readMeter).
func eachRequest(path string, cols []string, opts ingest.Options, allowErrors bool, stderr io.Writer, add func(*trace.Request) error) ([]trace.Run, error) {
	if path != "-" && isParquet(path) {
		meter := readMeter(fileSize(path), stderr)
		runs, rows, err := trace.ReadRuns(path)
		if err != nil {
			return nil, err
		}
		task := meter.Start("read "+filepath.Base(path), "requests", rows)
		each, c := countRequests(task, add)
		if err := trace.ScanColumns(path, cols, each); err != nil {
			task.Abort()
			return nil, err
		}
		c.Flush()
		task.Finish()
		return runs, nil
	}
	list := ingest.List([]string{path}) // a directory is walked once, for its size and its files
	task := readMeter(list.Size, stderr).Start("read "+filepath.Base(path), "requests", 0)
	each, c := countRequests(task, add)
	bad := badRecords{stderr: task.Out(stderr)}
	runs, st, err := list.Read(opts, each, bad.report)
	if err != nil {
		task.Abort()
		return nil, err
	}
	c.Flush()
	task.Finish()
	printWarnings(stderr, st.Warnings)
	if err := bad.check(path, allowErrors); err != nil {
		return nil, err
	}
	return runs, nil
}

// badRecords reports each bad record of an input on stderr and counts
// them, for commands that read inputs to use rather than to convert.
type badRecords struct {
	n      int
	stderr io.Writer
}

func (b *badRecords) report(e *ingest.SyntaxError) {
	b.n++
	fmt.Fprintf(b.stderr, "opaltrace: %v\n", e)
}

// check fails when path had bad records and they are not allowed.
func (b *badRecords) check(path string, allowErrors bool) error {
	if b.n > 0 && !allowErrors {
		return fmt.Errorf("%s: %d bad records (use --allow-errors to go on without them)", path, b.n)
	}
	return nil
}
