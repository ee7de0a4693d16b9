package ingest

import (
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// lmbenchmark reads the per-request CSV of LMCache/LMBenchmark's ShareGPT
// benchmark (sharegpt/sharegpt-qa.py, as run by sharegpt/run.sh; llm-d's
// exp-0 results are such files): the header
// prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time,
// one row per completed request, sorted by launch_time. What each column
// is, from sharegpt-qa.py (LMBenchmark @ 26d02bd):
//   - launch_time: epoch seconds taken just before the streaming request
//     is created (the send time);
//   - ttft: the first chunk whose delta has non-empty content, minus
//     launch_time (so TTFTBasis first_text);
//   - generation_time: the end of the stream minus that first content
//     chunk (minus launch_time when no content came);
//   - finish_time: epoch seconds taken after generation_time's clock read;
//   - prompt_tokens, generation_tokens: the usage of the last streamed
//     chunk (server counts; prompt_tokens includes the chat template).
//
// E2E is ttft + generation_time, the end of the stream (finish_time is a
// later clock read; a row where it lies before the stream end, beyond
// clock-read tolerance, is a bad record). A request that failed raised in
// the client and has no row, so every row is a success. A request with no
// content has no TTFT. Trace time 0 is the first row's launch_time, which
// is the run's StartUnixN. run.sh names the file KEY_output_QPS.csv; the
// QPS of such a name becomes the run's request rate (LMBenchmark sends at
// fixed spacing 1/QPS). The deployment is not in the file: it comes from
// --model, --hardware, --tp and --engine-opt. One run per file, streamed.
const lmbenchmarkName = "lmbenchmark"

var lmbenchmark = Format{
	Name:      lmbenchmarkName,
	Sniff:     sniffLMBenchmark,
	NewReader: newLMBenchmarkReader,
}

// lmbenchmarkCols are the columns sharegpt-qa.py writes, in its order.
var lmbenchmarkCols = []string{"prompt_tokens", "generation_tokens", "ttft", "generation_time", "launch_time", "finish_time"}

func sniffLMBenchmark(head []byte) bool {
	return string(firstLine(head)) == strings.Join(lmbenchmarkCols, ",")
}

// lmbenchmarkQPS matches run.sh's output name KEY_output_QPS.csv.
var lmbenchmarkQPS = regexp.MustCompile(`_output_([0-9]+(?:\.[0-9]+)?)\.csv$`)

// clockReadTolSec is how far finish_time may precede launch_time + ttft +
// generation_time: the three are separate time.time() reads in float64
// epoch seconds (2^-22 s apart at today's epoch), so an honest row differs
// by rounding only.
const clockReadTolSec = 1e-3

type lmbenchmarkReader struct {
	csvRun
	origin  float64
	started bool
}

func newLMBenchmarkReader(r io.Reader, file, run string, opts Options) Reader {
	rd := &lmbenchmarkReader{csvRun: newCSVRun(r, file, run, lmbenchmarkName)}
	if m := lmbenchmarkQPS.FindStringSubmatch(filepath.Base(file)); m != nil {
		if q, err := strconv.ParseFloat(m[1], 64); err == nil && q > 0 && !math.IsInf(q, 0) {
			rd.run.Workload = &trace.Workload{Dataset: "sharegpt", RequestRate: trace.Rate(q)}
		}
	}
	return rd
}

// lmbenchmarkSec parses a seconds column: finite and in [0, limit).
func lmbenchmarkSec(s string, limit float64) (float64, string) {
	if s == "" {
		return 0, "missing"
	}
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, strconv.Quote(s) + " is not a number"
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v >= limit:
		return 0, "out of range (" + s + ")"
	}
	return v, ""
}

// maxEpochSec bounds launch_time and finish_time: year 2286, far beyond
// any run and small enough that nanoseconds fit an int64.
const maxEpochSec = 1e10

func (r *lmbenchmarkReader) Scan() bool {
	req, ok := r.nextRow(lmbenchmarkCols...)
	if req == nil {
		return ok
	}
	c := r.rows
	req.TTFTBasis = trace.TTFTFirstText
	req.E2EBasis = trace.E2EStreamEnd
	req.OutputTokensSource = trace.OutputServerUsage
	if !r.setCounts(csvCountCol{"prompt_tokens", &req.InputTokens}, csvCountCol{"generation_tokens", &req.OutputTokens}) {
		return true
	}
	var v [4]float64
	for i, col := range []string{"ttft", "generation_time", "launch_time", "finish_time"} {
		limit := trace.MaxLatencySec
		if i >= 2 {
			limit = maxEpochSec
		}
		s, _ := c.field(col)
		x, msg := lmbenchmarkSec(s, limit)
		if msg != "" {
			r.cur = badAt(c.file, c.line, "%s: %s", col, msg)
			return true
		}
		v[i] = x
	}
	ttft, gen, launch, finish := v[0], v[1], v[2], v[3]
	if !r.started {
		r.started, r.origin = true, launch
		r.run.StartUnixN = int64(math.Round(launch * 1e9))
	}
	if launch < r.origin {
		// sharegpt-qa.py sorts by launch_time; an earlier row would need
		// a negative arrival.
		r.cur = badAt(c.file, c.line, "launch_time: %.6f is before the first row's (%.6f)", launch, r.origin)
		return true
	}
	e2e := gen
	if req.OutputTokens.V > 0 {
		e2e = ttft + gen
		req.TTFTSec = trace.Some(ttft)
	}
	if finish < launch+e2e-clockReadTolSec {
		r.cur = badAt(c.file, c.line, "finish_time: %.6f is before launch_time + ttft + generation_time (%.6f)", finish, launch+e2e)
		return true
	}
	req.E2ESec = trace.Some(e2e)
	req.Arrival = trace.Some(trace.TimeFromSeconds(launch - r.origin))
	r.cur = validated(req)
	return true
}
