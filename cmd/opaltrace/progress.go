package main

import (
	"io"
	"os"
	"strconv"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/progress"
	"github.com/opaltrace/opaltrace/trace"
)

// largeInput is the size in bytes (a directory's files to read summed,
// ingest.Listing.Size) from which reading an input shows its progress: a
// bar on a terminal, else a line with its timing. Smaller inputs read in
// well under a second, and a timing line after each would be noise.
var largeInput int64 = 32 << 20

// fileSize is the size of the file at path (0 when it cannot be read:
// its reader reports why).
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readMeter is the Meter for reading an input of size bytes: stderr's for
// a large input, nil (nothing shown) for a small one or stdin (size 0).
func readMeter(size int64, stderr io.Writer) *progress.Meter {
	if size < largeInput {
		return nil
	}
	return progress.New(stderr)
}

// countRequests wraps add so that each request is counted on task, in
// batches (progress.Counter).
func countRequests(task *progress.Task, add func(*trace.Request) error) (func(*trace.Request) error, *progress.Counter) {
	c := task.Counter()
	return func(r *trace.Request) error {
		c.Inc()
		return add(r)
	}, c
}

// countingSource wraps src, a summary's source of requests, so that task
// counts the requests of every pass, and its timing line says how many
// passes were made.
func countingSource(src analyze.Source, task *progress.Task) analyze.Source {
	passes := 0
	return func(yield func(*trace.Request) error) error {
		passes++
		if passes == 1 {
			task.Detail("1 pass")
		} else {
			task.Detail(strconv.Itoa(passes) + " passes")
		}
		each, c := countRequests(task, yield)
		err := src(each)
		c.Flush()
		return err
	}
}
