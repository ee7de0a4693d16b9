package analyze

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// A Summary is the vLLM-style benchmark summary of one run (or one group
// of requests), recomputed from its per-request data.
type Summary struct {
	Run trace.Run
	// Label names the run by what distinguishes it from the other runs of
	// its input ("#3 rate=4", trace.RunLabels), where the input has
	// several; empty, its name is all. The command that loaded the runs
	// sets it: a run alone cannot know its siblings.
	Label string

	Requests  int // requests seen
	Completed int // Status ok
	Failed    int // any other status
	// ByStatus counts the requests of each status, in the order of
	// Statuses; statuses with no requests are left out.
	ByStatus []StatusCount

	TotalInputTokens  int64 // over completed requests, as vLLM sums them
	TotalOutputTokens int64

	// DurationSec is the run's duration: the source's own measurement when
	// it recorded one (vLLM's benchmark duration), else the span from the
	// first arrival to the last completion (or the trimmed window).
	// DurationMeasured says which.
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
	// ITLRequests, when Options.ITLByRequest asked for it, holds for
	// each value of ITL (in ITL.Values' ascending order) the request it
	// came from, numbered from 0 among the completed requests with gaps:
	// Compare's bootstrap resamples requests, not gaps. nil otherwise.
	ITLRequests []int32
	E2E         Dist

	// Semantics the values were measured under (from the requests'
	// semantics columns).
	Semantics Semantics

	// TokensPerChunk is the mean number of output tokens per streamed
	// chunk over completed requests with chunk ITLs: Σ output tokens /
	// Σ (len(itl)+1). Zero when the run has no chunked streams.
	TokensPerChunk float64

	// Goodput is set when Options.Goodput names at least one SLO.
	Goodput *Goodput

	// Peak is vLLM's max_output_tokens_per_s and max_concurrent_requests;
	// nil with PeakMissing saying why when the data lacks arrivals.
	Peak        *Peak
	PeakMissing string

	// Trim is the window the summary was restricted to, nil when untrimmed.
	Trim *TrimWindow

	// Warnings are statistical or semantic caveats (mixed semantics, too
	// few values for a percentile), to be shown with the summary.
	Warnings []string

	// Passes is the number of passes over the file a summary made by
	// passes took (SummarizeStream); 0 for a summary made in memory.
	// It is the only field in which the two differ.
	Passes int
}

// mixedWarning is the warning of a summary whose requests mix semantics.
const mixedWarning = "the requests mix measurement semantics; distributions pool values measured differently"

// A StatusCount is the number of requests with one status.
type StatusCount struct {
	Status trace.Status
	N      int
}

// Statuses lists every request status in display order.
var Statuses = []trace.Status{trace.StatusOK, trace.StatusFailed, trace.StatusAborted, trace.StatusRejected, trace.StatusTimeout}

// Semantics are the measurement semantics of a summary's values. A field
// holding several values joined by ", " means the run mixes them (and
// Mixed is true): its distributions pool values that were not measured
// the same way.
type Semantics struct {
	ITLUnit      string // chunk or token
	E2EBasis     string
	TTFTBasis    string
	OutputTokens string // how output tokens were counted
	Mixed        bool
}

// Options choose what Summarize computes beyond vLLM's default summary.
type Options struct {
	Goodput SLO // request goodput under these SLOs, when any is set

	// TrimWarmupSec and TrimCooldownSec drop the start and the end of the
	// run: only requests that arrived at or after first arrival + warmup
	// and completed by last completion − cooldown count, and the duration
	// becomes that window. Zero: no trimming.
	TrimWarmupSec, TrimCooldownSec float64

	// ITLByRequest keeps, for each pooled ITL gap, the request it came
	// from (Summary.ITLRequests), so that Compare resamples whole
	// requests. It costs 4 bytes a gap and a sort: only comparisons ask.
	ITLByRequest bool

	// SelectITL makes the pooled ITL a distribution as SummarizeStream
	// makes it (Dist.Streamed): its count, mean and std, and of its
	// order statistics only the median and ITLPercentiles, selected
	// exactly by passes over the gaps in memory rather than by sorting
	// them, so that a summary that is only printed does not hold a
	// sorted copy of millions of gaps. ITLByRequest, which needs them
	// all, overrides it.
	SelectITL      bool
	ITLPercentiles []float64
}

// Summarize computes the summary of one run from its requests, following
// vLLM's calculate_metrics: only successful requests contribute to
// latencies and token totals; TPOT per request needs E2E, TTFT and more
// than one output token; ITL pools every gap. Absent values are skipped,
// never counted as zero.
func Summarize(run trace.Run, reqs []*trace.Request) *Summary {
	return SummarizeWith(run, reqs, Options{})
}

// SummarizeWith is Summarize with options: goodput SLOs and trimming.
func SummarizeWith(run trace.Run, reqs []*trace.Request, opts Options) *Summary {
	s := &Summary{Run: run}
	if opts.TrimWarmupSec > 0 || opts.TrimCooldownSec > 0 {
		var w TrimWindow
		var err error
		reqs, w, err = Trim(reqs, opts.TrimWarmupSec, opts.TrimCooldownSec)
		if err != nil {
			s.Warnings = append(s.Warnings, err.Error())
		} else {
			s.Trim = &w
		}
	}
	z := newSummarizer(s, opts)
	z.reqs = make([]*trace.Request, 0, len(reqs))
	for _, r := range reqs {
		z.Add(r)
	}
	return z.Summary()
}

// itlRequests returns, for the pooled ITL gaps of the completed requests
// in ascending order of their values, the request each came from (its
// number among the completed requests with gaps). Equal values may come
// in any order: a statistic over the sorted values cannot tell them apart.
func itlRequests(reqs []*trace.Request, gaps int) []int32 {
	type gap struct {
		v float64
		r int32
	}
	all := make([]gap, 0, gaps)
	var k int32
	for _, r := range reqs {
		if !r.OK() || len(r.ITLSec) == 0 {
			continue
		}
		for _, v := range r.ITLSec {
			all = append(all, gap{v, k})
		}
		k++
	}
	slices.SortFunc(all, func(a, b gap) int { return cmp.Compare(a.v, b.v) })
	owner := make([]int32, len(all))
	for i, g := range all {
		owner[i] = g.r
	}
	return owner
}

// duration is a summary's duration and whether it was measured: the
// trimmed window, else the source's own measurement, else the span of the
// requests (0 without arrivals).
func duration(run trace.Run, trim *TrimWindow, sp span) (float64, bool) {
	switch {
	case trim != nil:
		return trim.End - trim.Start, true
	case run.DurationSec.OK:
		return run.DurationSec.V, false
	case sp.measured():
		return sp.duration(), true
	}
	return 0, false
}

// A span is the time a run's requests cover, from the first arrival to the
// last end (arrival plus E2E): the duration a summary measures when the
// source reported none.
type span struct{ first, last float64 }

func newSpan() span { return span{math.Inf(1), math.Inf(-1)} }

func (p *span) add(r *trace.Request) {
	if r.Arrival.OK {
		p.first = math.Min(p.first, r.Arrival.V.Seconds())
		p.last = math.Max(p.last, requestEnd(r))
	}
}

// measured reports whether the span has a positive length.
func (p span) measured() bool { return p.last > p.first }

func (p span) duration() float64 { return p.last - p.first }

// throughputs divides a run's completed requests, input tokens, output
// tokens and all tokens by its duration d.
func throughputs(completed, in, out int64, d float64) (req, input, output, total float64) {
	return float64(completed) / d, float64(in) / d, float64(out) / d, float64(in+out) / d
}

// semanticsSet collects the distinct semantics of a run's requests.
type semanticsSet struct{ itl, e2e, ttft, out map[string]bool }

func (m *semanticsSet) add(r *trace.Request) {
	put := func(p *map[string]bool, v string) {
		if v == "" {
			return
		}
		if *p == nil {
			*p = map[string]bool{}
		}
		(*p)[v] = true
	}
	put(&m.itl, r.ITLUnit)
	put(&m.e2e, r.E2EBasis)
	put(&m.ttft, r.TTFTBasis)
	put(&m.out, r.OutputTokensSource)
}

func (m *semanticsSet) semantics() Semantics {
	var s Semantics
	join := func(set map[string]bool) string {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		slices.Sort(keys) // never let map order reach an output
		if len(keys) > 1 {
			s.Mixed = true
		}
		return strings.Join(keys, ", ")
	}
	s.ITLUnit, s.E2EBasis, s.TTFTBasis, s.OutputTokens = join(m.itl), join(m.e2e), join(m.ttft), join(m.out)
	return s
}

// SummarizeRuns groups requests by run (in the order of runs) and
// summarizes each. Requests whose run is not listed get a run of their own,
// in order of first appearance.
func SummarizeRuns(runs []trace.Run, reqs []*trace.Request) []*Summary {
	return SummarizeRunsWith(runs, reqs, Options{})
}

// SummarizeRunsWith is SummarizeRuns with options.
func SummarizeRunsWith(runs []trace.Run, reqs []*trace.Request, opts Options) []*Summary {
	groups := GroupByRun(runs, reqs)
	out := make([]*Summary, 0, len(groups))
	for _, g := range groups {
		out = append(out, SummarizeWith(g.Run, g.Requests, opts))
	}
	return out
}
