package analyze

import (
	"math"

	"github.com/opaltrace/opaltrace/trace"
)

// A Summary is the vLLM-style benchmark summary of one run, recomputed
// from its per-request data.
type Summary struct {
	Run trace.Run

	Requests  int // requests seen
	Completed int // Status ok
	Failed    int // any other status

	TotalInputTokens  int64 // over completed requests, as vLLM sums them
	TotalOutputTokens int64

	// DurationSec is the run's duration: the source's own measurement when
	// it recorded one (vLLM's benchmark duration), else the span from the
	// first arrival to the last completion. DurationMeasured says which.
	DurationSec      float64
	DurationMeasured bool

	RequestThroughput    float64 // completed / duration
	InputThroughput      float64 // input tokens / duration
	OutputThroughput     float64 // output tokens / duration
	TotalTokenThroughput float64 // (input + output tokens) / duration

	// Latency distributions in seconds, over completed requests. A Dist
	// with no values means the data has none (e.g. E2E in old vLLM files).
	TTFT Dist
	TPOT Dist // (E2E − TTFT)/(output tokens − 1), requests with > 1 output token
	ITL  Dist // every gap of every request, pooled
	E2E  Dist
}

// Summarize computes the summary of one run from its requests, following
// vLLM's calculate_metrics: only successful requests contribute to
// latencies and token totals; TPOT per request needs E2E, TTFT and more
// than one output token; ITL pools every gap. Absent values are skipped,
// never counted as zero.
func Summarize(run trace.Run, reqs []*trace.Request) *Summary {
	s := &Summary{Run: run, Requests: len(reqs)}
	var ttft, tpot, itl, e2e []float64
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range reqs {
		if a, ok := r.Arrival.Get(); ok {
			first = math.Min(first, a.Seconds())
			end := a.Seconds()
			if r.E2ESec.OK {
				end += r.E2ESec.V
			}
			last = math.Max(last, end)
		}
		if !r.OK() {
			s.Failed++
			continue
		}
		s.Completed++
		s.TotalInputTokens += r.InputTokens.Or(0)
		s.TotalOutputTokens += r.OutputTokens.Or(0)
		if r.TTFTSec.OK {
			ttft = append(ttft, r.TTFTSec.V)
		}
		if r.E2ESec.OK {
			e2e = append(e2e, r.E2ESec.V)
		}
		if n := r.OutputTokens.Or(0); n > 1 && r.E2ESec.OK && r.TTFTSec.OK {
			tpot = append(tpot, (r.E2ESec.V-r.TTFTSec.V)/float64(n-1))
		}
		itl = append(itl, r.ITLSec...)
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = NewDist(ttft), NewDist(tpot), NewDist(itl), NewDist(e2e)
	switch {
	case run.DurationSec.OK:
		s.DurationSec = run.DurationSec.V
	case last > first:
		s.DurationSec, s.DurationMeasured = last-first, true
	}
	if s.DurationSec > 0 {
		d := s.DurationSec
		s.RequestThroughput = float64(s.Completed) / d
		s.InputThroughput = float64(s.TotalInputTokens) / d
		s.OutputThroughput = float64(s.TotalOutputTokens) / d
		s.TotalTokenThroughput = float64(s.TotalInputTokens+s.TotalOutputTokens) / d
	}
	return s
}

// SummarizeRuns groups requests by run (in the order of runs) and
// summarizes each. Requests whose run is not listed get a run of their own,
// in order of first appearance.
func SummarizeRuns(runs []trace.Run, reqs []*trace.Request) []*Summary {
	byRun := make(map[string][]*trace.Request)
	var extra []trace.Run
	known := make(map[string]bool, len(runs))
	for _, r := range runs {
		known[r.Name] = true
	}
	for _, r := range reqs {
		if !known[r.Run] {
			known[r.Run] = true
			extra = append(extra, trace.Run{Name: r.Run, Source: r.Source})
		}
		byRun[r.Run] = append(byRun[r.Run], r)
	}
	all := append(append([]trace.Run(nil), runs...), extra...)
	out := make([]*Summary, 0, len(all))
	for _, run := range all {
		out = append(out, Summarize(run, byRun[run.Name]))
	}
	return out
}
