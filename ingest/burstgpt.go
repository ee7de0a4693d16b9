package ingest

import (
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// burstgpt reads the BurstGPT trace (HPMLL/BurstGPT): CSV with the header
// Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type.
// Timestamp is seconds since the trace start; several models share one
// file (the model column); a row with 0 response tokens is a failed
// request (BurstGPT's own convention), kept with status failed and no
// output count. One run per file, streamed row by row.
const burstGPTName = "burstgpt"

var burstGPT = Format{
	Name:      burstGPTName,
	Sniff:     sniffBurstGPT,
	NewReader: newBurstGPTReader,
}

func sniffBurstGPT(head []byte) bool {
	h := string(firstLine(head))
	return strings.HasPrefix(h, "Timestamp,") && strings.Contains(h, "Request tokens") && strings.Contains(h, "Response tokens")
}

type burstGPTReader struct {
	rows  *csvRows
	run   trace.Run
	index int
	cur   Record
	done  bool
}

func newBurstGPTReader(r io.Reader, file, run string, opts Options) Reader {
	return &burstGPTReader{
		rows: newCSVRows(r, file),
		run:  trace.Run{Name: run + "#1", Source: burstGPTName, File: file},
	}
}

func (r *burstGPTReader) Record() Record    { return r.cur }
func (r *burstGPTReader) Err() error        { return r.rows.err }
func (r *burstGPTReader) Runs() []trace.Run { return []trace.Run{r.run} }

func (r *burstGPTReader) Scan() bool {
	r.cur = nil
	if r.done || !r.rows.next() {
		r.done = true
		return false
	}
	c := r.rows
	if c.bad != nil {
		r.cur = c.bad
		return true
	}
	if msg := c.require("Timestamp", "Model", "Request tokens", "Response tokens"); msg != "" {
		r.done = true
		r.cur = badAt(c.file, 1, "%s", msg)
		return true
	}
	index := r.index
	r.index++
	req := newRequest(&r.run, "", index, c.file, c.line)
	req.Model, _ = c.field("Model")
	req.OutputTokensSource = trace.OutputServerUsage
	ts, _ := c.field("Timestamp")
	t, err := strconv.ParseFloat(ts, 64)
	switch {
	case err != nil:
		r.cur = badAt(c.file, c.line, "Timestamp: %q is not a number", ts)
		return true
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0 || t > 1e9:
		r.cur = badAt(c.file, c.line, "Timestamp: out of range (%v)", t)
		return true
	}
	req.Arrival = trace.Some(trace.TimeFromSeconds(t))
	for _, f := range []struct {
		col string
		dst *trace.Opt[int64]
	}{{"Request tokens", &req.InputTokens}, {"Response tokens", &req.OutputTokens}} {
		s, _ := c.field(f.col)
		v, msg := csvCount(s)
		if msg != "" {
			r.cur = badAt(c.file, c.line, "%s: %s", f.col, msg)
			return true
		}
		*f.dst = trace.Some(v)
	}
	if req.OutputTokens.V == 0 {
		req.Status = trace.StatusFailed
		req.Error = "0 response tokens"
		req.OutputTokens = trace.Opt[int64]{}
	}
	r.cur = validated(req)
	return true
}
