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
	csvRun
}

func newBurstGPTReader(r io.Reader, file, run string, opts Options) Reader {
	return &burstGPTReader{newCSVRun(r, file, run, burstGPTName)}
}

func (r *burstGPTReader) Scan() bool {
	req, ok := r.nextRow("Timestamp", "Model", "Request tokens", "Response tokens")
	if req == nil {
		return ok
	}
	c := r.rows
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
	if !r.setCounts(csvCountCol{"Request tokens", &req.InputTokens}, csvCountCol{"Response tokens", &req.OutputTokens}) {
		return true
	}
	if req.OutputTokens.V == 0 {
		req.Status = trace.StatusFailed
		req.Error = "0 response tokens"
		req.OutputTokens = trace.Opt[int64]{}
	}
	r.cur = validated(req)
	return true
}
