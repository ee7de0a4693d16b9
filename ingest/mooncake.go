package ingest

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// mooncake reads Mooncake-style workload traces (trace-formats.md §6.6):
// JSON lines {"timestamp": ms, "input_length": n, "output_length": n,
// "hash_ids": [...]}, one request per line, one run per file. The output
// length is the requested one, and there are no latencies.
const mooncakeName = "mooncake"

var mooncake = Format{
	Name:      mooncakeName,
	Sniff:     sniffMooncake,
	NewReader: newMooncakeReader,
}

// sniffMooncake accepts a first line that is a JSON object with the three
// required keys.
func sniffMooncake(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n")
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return len(head) > 0 && head[0] == '{' &&
		bytes.Contains(head, []byte(`"timestamp"`)) &&
		bytes.Contains(head, []byte(`"input_length"`)) &&
		bytes.Contains(head, []byte(`"output_length"`))
}

// A mooncakeReader streams a Mooncake trace line by line.
type mooncakeReader struct {
	lr        *lineReader
	file      string
	run       trace.Run
	blockSize int64
	row       int // index of the next data row
	rec       mooncakeRecord
	idPrefix  []byte          // "RUN/", then the row number: the request id
	slab      []int64         // where kept hash ids are carved from
	reqs      []trace.Request // where requests are carved from
	cur       Record
	err       error
	reuse     bool          // Options.Reuse: every request is one
	one       trace.Request // with reuse
}

func newMooncakeReader(r io.Reader, file, run string, opts Options) Reader {
	bs := opts.blockSize()
	return &mooncakeReader{
		lr:   newLineReader(r, opts.maxLineBytes()),
		file: file,
		run: trace.Run{
			Name:      run + "#1",
			Source:    mooncakeName,
			File:      file,
			BlockSize: bs,
		},
		blockSize: bs,
		reuse:     opts.Reuse,
	}
}

func (r *mooncakeReader) Record() Record    { return r.cur }
func (r *mooncakeReader) Err() error        { return r.err }
func (r *mooncakeReader) Runs() []trace.Run { return []trace.Run{r.run} }

func (r *mooncakeReader) Scan() bool {
	for {
		line, ok := r.lr.next()
		if !ok {
			if r.lr.err != nil {
				r.err = fmt.Errorf("%s:%d: %w", r.file, r.lr.line+1, r.lr.err)
			}
			r.cur = nil
			return false
		}
		if msg := r.lr.overLong(); msg != "" {
			r.row++
			r.cur = &SyntaxError{r.file, r.lr.line, msg}
			return true
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		row := r.row
		r.row++
		req, msg := r.parse(line, row)
		if msg != "" {
			r.cur = &SyntaxError{r.file, r.lr.line, msg}
		} else {
			r.cur = req
		}
		return true
	}
}

// parse converts one line; a non-empty message reports a bad line.
func (r *mooncakeReader) parse(line []byte, row int) (*trace.Request, string) {
	// rec's hash ids are a scratch buffer reused line after line.
	rec := &r.rec
	*rec = mooncakeRecord{hashIDs: rec.hashIDs[:0]}
	if msg := rec.decode(line); msg != "" {
		return nil, msg
	}
	switch {
	case !rec.hasTimestamp:
		return nil, "timestamp: missing"
	case !rec.hasInput:
		return nil, "input_length: missing"
	case !rec.hasOutput:
		return nil, "output_length: missing"
	}
	if msg := checkSec(rec.timestamp); msg != "" {
		return nil, "timestamp: " + msg
	}
	if msg := checkTraceTime(trace.Time(math.Round(rec.timestamp * 1e6))); rec.timestamp > 1e15 || msg != "" {
		return nil, "timestamp: more than 100 days from the trace start"
	}
	in, msg := checkCount(rec.input)
	if msg != "" {
		return nil, "input_length: " + msg
	}
	out, msg := checkCount(rec.output)
	if msg != "" {
		return nil, "output_length: " + msg
	}
	if r.idPrefix == nil {
		r.idPrefix = append([]byte(r.run.Name), '/')
	}
	r.idPrefix = strconv.AppendInt(r.idPrefix[:len(r.run.Name)+1], int64(row), 10)
	// A reused request's hash ids are rec's: the same length, nil
	// when rec's are, as keep's copy.
	req, ids := &r.one, rec.hashIDs
	if !r.reuse {
		req, ids = r.newRequest(), r.keep(rec.hashIDs)
	}
	*req = trace.Request{
		RequestID:          string(r.idPrefix),
		Run:                r.run.Name,
		Source:             mooncakeName,
		Status:             trace.StatusOK,
		InputTokens:        trace.Some(in),
		OutputTokens:       trace.Some(out),
		BlockSize:          trace.Some(r.blockSize),
		HashIDs:            ids,
		Arrival:            trace.Some(trace.Time(math.Round(rec.timestamp * 1e6))),
		OutputTokensSource: trace.OutputRequested,
	}
	req.SetPos(r.file, r.lr.line)
	return req, ""
}

// keep returns a copy of ids (nil stays nil) carved from a shared slab.
//
// Note: one allocation per 4096 ids instead of one per line: allocation
// and the garbage collection it paces were half the reader's time. A
// request kept by the caller keeps its slab (32 KiB) alive.
func (r *mooncakeReader) keep(ids []int64) []int64 {
	if ids == nil {
		return nil
	}
	if r.slab == nil || len(ids) > cap(r.slab)-len(r.slab) {
		r.slab = make([]int64, 0, max(4096, len(ids)))
	}
	n := len(r.slab)
	r.slab = append(r.slab, ids...)
	return r.slab[n:len(r.slab):len(r.slab)]
}

// newRequest returns a zero request carved from a shared slab, like keep.
// A request kept by the caller keeps its slab (60 KiB) alive; a Clone
// does not.
func (r *mooncakeReader) newRequest() *trace.Request {
	if len(r.reqs) == 0 {
		r.reqs = make([]trace.Request, 64)
	}
	q := &r.reqs[0]
	r.reqs = r.reqs[1:]
	return q
}
