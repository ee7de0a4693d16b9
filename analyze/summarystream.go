package analyze

import (
	"github.com/opaltrace/opaltrace/trace"
)

// StreamOptions choose what a summary made by passes computes. The
// distributions can only answer the quantiles selected here.
type StreamOptions struct {
	Percentiles []float64 // percentiles to select besides the median
	// CDFPoints selects the order statistics Dist.Quantiles(CDFPoints)
	// reads (0: none), at the cost of memory within passBudget and, for
	// large files, a pass or two.
	CDFPoints int
	Goodput   SLO // request goodput under these SLOs, when any is set
}

// SummarizeStream computes the Summary that Summarize computes from
// memory — every field the same to the last bit, the distributions
// answering the quantiles opts selects — in a few passes over src,
// holding neither the requests nor their values: what a file of 10⁶
// simulated requests and 2·10⁸ ITL gaps needs. Summary.Passes counts the
// passes.
//
// The first pass counts (requests, statuses, tokens, semantics, goodput,
// the span, per metric a histogram of the top 16 bits of each value); the
// next sum each metric in numpy's order for the mean, then the std, and
// select the ranks of the median and percentiles (metricStream), and bin
// the peak metrics (peakStream).
func SummarizeStream(src Source, run trace.Run, opts StreamOptions) (*Summary, error) {
	z := NewStreamSummarizer(run, opts)
	err := src(func(r *trace.Request) error {
		z.Add(r)
		return nil
	})
	z.passes++
	if err != nil {
		return nil, err
	}
	return z.Finish(src)
}

// SummarizeStreamGroups is SummarizeStream for every group of src by key
// (GroupBy's keys and order, with runs the dataset's runs), all in the
// same passes. With pooled non-nil it also summarizes all requests
// together, with its own options (a report's CDFs), as a last summary
// named pooledRun.
func SummarizeStreamGroups(src Source, key string, runs []trace.Run, opts StreamOptions, pooledRun trace.Run, pooled *StreamOptions) ([]*Summary, error) {
	g, err := newGrouper(key, runs)
	if err != nil {
		return nil, err
	}
	var zs []*StreamSummarizer
	for _, run := range g.runs {
		zs = append(zs, NewStreamSummarizer(run, opts))
	}
	var all *StreamSummarizer
	if pooled != nil {
		all = NewStreamSummarizer(pooledRun, *pooled)
	}
	route := func(r *trace.Request) int {
		i := g.index(r)
		if i == len(zs) {
			zs = append(zs, NewStreamSummarizer(g.runs[i], opts))
		}
		return i
	}
	// Pass 1 creates the groups; the others find them by the same key.
	err = src(func(r *trace.Request) error {
		zs[route(r)].Add(r)
		if all != nil {
			all.Add(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	set := zs
	switch {
	case all != nil && len(zs) == 1 && zs[0].s.Requests == all.s.Requests:
		// One group of every request (a file of one run): its
		// distributions and peaks are the pooled ones; only the
		// pooled summary makes the passes.
		zs[0].same, set = all, []*StreamSummarizer{all}
	case all != nil:
		set = append(slices0(zs), all)
	}
	for _, z := range set {
		z.passes++
		z.plan()
	}
	for {
		b := &budget{left: passBudget}
		work := false
		for _, z := range set {
			work = z.startPass(b) || work
		}
		if !work {
			break
		}
		err := src(func(r *trace.Request) error {
			if z := zs[route(r)]; z.same == nil {
				z.visit(r)
			}
			if all != nil {
				all.visit(r)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, z := range set {
			z.passes++
			z.endPass()
		}
	}
	var out []*Summary
	for _, z := range zs {
		out = append(out, z.result())
	}
	out = inOrder(g, out)
	if all != nil {
		out = append(out, all.result())
	}
	return out, nil
}

func slices0(zs []*StreamSummarizer) []*StreamSummarizer {
	return append(make([]*StreamSummarizer, 0, len(zs)+1), zs...)
}

// A StreamSummarizer is SummarizeStream with its first pass fed by the
// caller: Add every request of the dataset, in the order src yields them,
// then Finish makes the other passes over src. A replay that writes its
// records to a file adds them as it writes, and reads the file only for
// the later passes.
type StreamSummarizer struct {
	s      *Summary
	opts   StreamOptions
	passes int
	ms     [4]*metricStream

	tally
	peak peakStream
	// same, when set, summarizes the same requests: z makes no passes
	// and takes its distributions and peaks (SummarizeStreamGroups).
	same *StreamSummarizer
}

// NewStreamSummarizer starts the summary of run.
func NewStreamSummarizer(run trace.Run, opts StreamOptions) *StreamSummarizer {
	z := &StreamSummarizer{s: &Summary{Run: run}, opts: opts, tally: newTally(opts.Goodput)}
	for i := range z.ms {
		z.ms[i] = newMetricStream()
	}
	return z
}

// Add counts request r (the first pass). It keeps nothing of r.
func (z *StreamSummarizer) Add(r *trace.Request) {
	z.s.Requests++
	if !z.tally.add(z.s, r) {
		return
	}
	eachMetric(r, z.count, z.countSlice)
	z.peak.add(r)
}

func (z *StreamSummarizer) count(m int, v float64)         { z.ms[m].count(v) }
func (z *StreamSummarizer) countSlice(m int, vs []float64) { z.ms[m].countSlice(vs) }
func (z *StreamSummarizer) visit1(m int, v float64)        { z.ms[m].visit(v) }
func (z *StreamSummarizer) visitMany(m int, vs []float64)  { z.ms[m].visitSlice(vs) }

// plan chooses the ranks to select once pass 1 has counted.
func (z *StreamSummarizer) plan() {
	for _, m := range z.ms {
		ranks := medianRanks(m.n)
		for _, p := range z.opts.Percentiles {
			ranks = append(ranks, percentileRanks(m.n, p)...)
		}
		if z.opts.CDFPoints > 0 {
			ranks = append(ranks, quantileRanks(m.n, z.opts.CDFPoints)...)
		}
		m.plan(ranks)
	}
	z.peak.plan()
}

func (z *StreamSummarizer) startPass(b *budget) bool {
	work := z.peak.startPass()
	for _, m := range z.ms {
		work = m.startPass(b) || work
	}
	return work
}

// visit gives r to the pass under way.
func (z *StreamSummarizer) visit(r *trace.Request) {
	if !r.OK() {
		return
	}
	eachMetric(r, z.visit1, z.visitMany)
	z.peak.visit(r)
}

func (z *StreamSummarizer) endPass() {
	for _, m := range z.ms {
		m.endPass()
	}
	z.peak.endPass()
}

// Finish makes the passes over src that the summary still needs;
// Summary.Passes counts them (and the first, when SummarizeStream made it).
func (z *StreamSummarizer) Finish(src Source) (*Summary, error) {
	z.plan()
	for {
		b := &budget{left: passBudget}
		if !z.startPass(b) {
			break
		}
		err := src(func(r *trace.Request) error {
			z.visit(r)
			return nil
		})
		if err != nil {
			return nil, err
		}
		z.passes++
		z.endPass()
	}
	return z.result(), nil
}

// result fills the summary as SummarizeWith does.
func (z *StreamSummarizer) result() *Summary {
	s := z.s
	ms, peak, passes := z.ms, &z.peak, z.passes
	if z.same != nil {
		ms, peak, passes = z.same.ms, &z.same.peak, z.same.passes
	}
	s.Passes = passes
	z.tally.fill(s, nil)
	s.TTFT, s.TPOT, s.ITL, s.E2E = ms[mTTFT].dist(), ms[mTPOT].dist(), ms[mITL].dist(), ms[mE2E].dist()
	s.Peak, s.PeakMissing = peak.result()
	return s
}
