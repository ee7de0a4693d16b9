package ingest

import (
	"bytes"
	"fmt"
	"io"

	"github.com/opaltrace/opaltrace/trace"
)

// A lineRun is what every reader of a line-oriented file holding one run
// keeps: the lines, the run, how many requests it has read (the index of
// a request without an ID of its own) and the current record. Readers
// embed it for Record, Err and Runs, and for the end-of-input handling,
// which must be the same everywhere: a read error is fatal and names the
// line after the last one read.
type lineRun struct {
	lr   *lineReader
	file string
	run  trace.Run
	row  int
	cur  Record
	err  error
}

// newLineRun reads r, file, as the one run named run (suffixed "#1", as
// every single-run format names its run) of format source and engine
// ("" when the lines will say).
func newLineRun(r io.Reader, file, run, source, engine string, opts Options) lineRun {
	return lineRun{
		lr:   newLineReader(r, opts.maxLineBytes()),
		file: file,
		run:  trace.Run{Name: run + "#1", Source: source, File: file, Engine: engine},
	}
}

func (r *lineRun) Record() Record    { return r.cur }
func (r *lineRun) Err() error        { return r.err }
func (r *lineRun) Runs() []trace.Run { return []trace.Run{r.run} }

// nextLine returns the next line, as lineReader.next does. At the end of
// the input it clears the current record and keeps a read error, if any,
// as the fatal error.
func (r *lineRun) nextLine() ([]byte, bool) {
	line, ok := r.lr.next()
	if !ok {
		if r.lr.err != nil {
			r.err = fmt.Errorf("%s:%d: %w", r.file, r.lr.line+1, r.lr.err)
		}
		r.cur = nil
	}
	return line, ok
}

// nextNonBlank is nextLine for formats with one JSON document a line:
// lines trimmed of spaces, blank ones skipped. An over-long line is not
// blank (see overLong).
func (r *lineRun) nextNonBlank() ([]byte, bool) {
	for {
		line, ok := r.nextLine()
		if !ok {
			return nil, false
		}
		if line = bytes.TrimSpace(line); len(line) > 0 || r.lr.over > 0 {
			return line, true
		}
	}
}

// overLong makes the current record a bad record when the line last read
// was over the line limit, and reports whether it was.
func (r *lineRun) overLong() bool {
	if msg := r.lr.overLong(); msg != "" {
		r.cur = r.bad(msg)
		r.row++
		return true
	}
	return false
}

// bad is an error at the line last read.
func (r *lineRun) bad(msg string) *SyntaxError {
	return &SyntaxError{r.file, r.lr.line, msg}
}

// startRequest returns a request of the run at the line last read, with
// the ID id, or a made-up one from the count of requests read when id is "".
func (r *lineRun) startRequest(id string) *trace.Request {
	return newRequest(&r.run, id, r.row, r.file, r.lr.line)
}

// stringOr is *p, or "" when p is nil.
func stringOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// setRequest makes the current record q, or the error msg at the line
// last read when msg is not "", and counts the line as a request read
// either way (a made-up ID stays the line's whether or not it is valid).
func (r *lineRun) setRequest(q *trace.Request, msg string) {
	if msg != "" {
		r.cur = r.bad(msg)
	} else {
		r.cur = q
	}
	r.row++
}
