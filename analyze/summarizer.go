package analyze

import (
	"sync"

	"github.com/opaltrace/opaltrace/trace"
)

// A Summarizer computes SummarizeWith's summary from requests added one at
// a time, as a replay emits them, so that the work that grows with the
// pooled ITL gaps is done as they come: Add counts each request's gaps by
// distinct value (valueCounts) and bins its token times for the peak
// (peakFold), and Summary, once the last request is in, has only the
// sorting of the distinct values and the pairwise sums left, spread over
// the cores. With Options.SelectITL, Add only histograms the gaps, and
// Summary selects the ITL's quantiles by passes over them (selectITL).
// The summary is SummarizeWith's to the last bit: SummarizeWith is a
// Summarizer fed in one loop.
//
// A Summarizer keeps the requests it is given and reads their ITL gaps
// again in Summary: the caller must not change or reuse them. With
// trimming (Options.TrimWarmupSec, TrimCooldownSec), whose window is known
// only once every request is in, Add only keeps them and Summary does all
// the work.
type Summarizer struct {
	s    *Summary
	opts Options
	reqs []*trace.Request
	// deferred: trimming was asked, so Summary runs SummarizeWith over
	// reqs.
	deferred bool

	tally
	ttft, tpot, e2e []float64
	// itl holds each completed request's gaps, in the order added: their
	// concatenation is the pooled ITL, numpy's input order for the mean.
	itl    [][]float64
	gaps   int
	counts valueCounts
	// sel, with Options.SelectITL, histograms the gaps as they come
	// (the first pass of a summary by passes) instead of counting them
	// by value.
	sel *metricStream
	// peak bins the token times as they come.
	peak peakFold
}

// NewSummarizer starts the summary of run.
func NewSummarizer(run trace.Run, opts Options) *Summarizer {
	if opts.TrimWarmupSec > 0 || opts.TrimCooldownSec > 0 {
		return &Summarizer{s: &Summary{Run: run}, opts: opts, deferred: true}
	}
	return newSummarizer(&Summary{Run: run}, opts)
}

// newSummarizer starts filling s, whose requests are not to be trimmed
// (any trimming was done: s.Trim and its warning are set).
func newSummarizer(s *Summary, opts Options) *Summarizer {
	z := &Summarizer{s: s, opts: opts, tally: newTally(opts.Goodput), peak: newPeakFold()}
	if opts.SelectITL && !opts.ITLByRequest {
		z.sel = newMetricStream()
	}
	return z
}

// Add adds request r, which the Summarizer keeps.
func (z *Summarizer) Add(r *trace.Request) {
	z.reqs = append(z.reqs, r)
	if z.deferred {
		return
	}
	z.peak.add(r)
	if !z.tally.add(z.s, r) {
		return
	}
	if r.TTFTSec.OK {
		z.ttft = append(z.ttft, r.TTFTSec.V)
	}
	if r.E2ESec.OK {
		z.e2e = append(z.e2e, r.E2ESec.V)
	}
	if n := r.OutputTokens.Or(0); n > 1 && r.E2ESec.OK && r.TTFTSec.OK {
		z.tpot = append(z.tpot, (r.E2ESec.V-r.TTFTSec.V)/float64(n-1))
	}
	if len(r.ITLSec) > 0 {
		z.itl = append(z.itl, r.ITLSec)
		z.gaps += len(r.ITLSec)
		if z.sel != nil {
			z.sel.countSlice(r.ITLSec)
		} else {
			z.counts.addAll(r.ITLSec)
		}
	}
}

// Summary returns the summary of the requests added. Call it once, after
// the last Add.
func (z *Summarizer) Summary() *Summary {
	if z.deferred {
		return SummarizeWith(z.s.Run, z.reqs, z.opts)
	}
	s := z.s
	s.Requests = len(z.reqs)
	// The pooled ITL, millions of values in a long run, is the work
	// left: its sorted values and its mean and std, each on a core of
	// its own while this one does the rest.
	var wg sync.WaitGroup
	wg.Go(func() { z.itlDist(&s.ITL, &wg) })
	z.tally.fill(s, s.Trim)
	s.TTFT, s.TPOT, s.E2E = NewDist(z.ttft), NewDist(z.tpot), NewDist(z.e2e)
	s.Peak, s.PeakMissing = z.peak.result(z.reqs)
	if z.opts.ITLByRequest {
		s.ITLRequests = itlRequests(z.reqs, z.gaps)
	}
	wg.Wait()
	return s
}

// itlDist sets d to NewDist of the pooled gaps: their values sorted from
// the distinct values counted, and their mean and std, which numpy sums in
// the pooled order, computed meanwhile on a goroutine that wg waits for.
// Without counts (too few repeats) the gaps are pooled and sorted.
func (z *Summarizer) itlDist(d *Dist, wg *sync.WaitGroup) {
	if z.sel != nil {
		*d = z.selectITL()
		return
	}
	values := make([]float64, z.gaps)
	if z.counts.overflow || z.gaps < radixMin {
		i := 0
		for _, g := range z.itl {
			i += copy(values[i:], g)
		}
		*d = NewDist(values)
		return
	}
	wg.Go(func() { d.Mean, d.Std = meanStdPooled(z.itl, z.gaps) })
	z.counts.sorted(values)
	d.Values = values
}

// selectITL returns the pooled gaps' distribution as a summary by passes
// makes it, from the histogram counted by Add and passes over the gaps
// kept: their pairwise sum, then their squared deviations, while the
// median's and the percentiles' buckets are narrowed down and collected;
// each pass split between two cores (visitPooled).
func (z *Summarizer) selectITL() Dist {
	m := z.sel
	ranks := medianRanks(m.n)
	for _, p := range z.opts.ITLPercentiles {
		ranks = append(ranks, percentileRanks(m.n, p)...)
	}
	m.plan(ranks)
	for m.startPass(&budget{left: passBudget}) {
		m.visitPooled(z.itl)
		m.endPass()
	}
	return m.dist()
}
