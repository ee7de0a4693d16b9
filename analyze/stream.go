package analyze

import (
	"errors"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// A Source yields the requests of a dataset, in the same order on every
// call; each call is one pass (e.g. one read of a Parquet file).
type Source func(yield func(*trace.Request) error) error

// A StreamDist is a distribution summarized without keeping its values:
// count, numpy-exact mean and population std, median and percentiles.
type StreamDist struct {
	N           int64
	Mean, Std   float64
	Median      float64
	Percentiles []float64 // at StreamSummary.Pcts
}

// A StreamSummary is the part of Summary that SummarizeStream computes in
// bounded memory: counts, token totals, the duration and throughputs, and
// the four latency distributions.
type StreamSummary struct {
	Requests, Completed, Failed         int64
	TotalInputTokens, TotalOutputTokens int64
	// DurationSec is measured from the first arrival to the last end, as
	// Summary's is when the source reported none; 0 without arrivals.
	// The throughputs divide by it, as Summary's do.
	DurationSec                                          float64
	RequestThroughput, InputThroughput, OutputThroughput float64
	TotalTokenThroughput                                 float64
	Pcts                                                 []float64
	TTFT, TPOT, ITL, E2E                                 StreamDist
	Passes                                               int // passes made over the source
}

// collectLimit (a variable so tests can force refinement) bounds the values one selection target keeps in memory
// (8 MiB of float64); a bucket holding more is split by the next 16 bits
// of its values in one more pass.
var collectLimit int64 = 1 << 20

// SummarizeStream computes the latency distributions of Summarize —
// the same numbers to the last bit — in a few passes over src, without
// holding the values: what pooled ITL needs when it has 10⁸ values.
//
//  1. Count the values of each metric and histogram the top 16 bits of
//     an order-preserving integer key of each float64.
//  2. Sum the values in numpy's pairwise order (pairwiseStream, which
//     needs n from pass 1) for the mean; for each rank a median or
//     percentile reads, keep the values of its bucket when at most
//     collectLimit, else histogram the next 16 bits within the bucket.
//  3. Sum the squared deviations from the mean pairwise for the std
//     (numpy computes x − mean first, so the mean must be final); go on
//     refining or collecting the buckets still open.
//
// Further passes run only while a bucket is still too full (at most four
// levels of 16 bits; a 64-bit prefix is a single value).
//
// Note: exact means equal to numpy applied to the pooled array in request
// order (np.mean/np.std of a contiguous float64 array: one pairwise sum
// over the whole array), not merely to the true mean rounded once.
func SummarizeStream(src Source, pcts []float64) (*StreamSummary, error) {
	z := NewStreamSummarizer(pcts)
	// Pass 1: counts and top-level histograms.
	err := src(func(r *trace.Request) error {
		z.Add(r)
		return nil
	})
	z.s.Passes++
	if err != nil {
		return nil, err
	}
	return z.Finish(src)
}

// A StreamSummarizer is SummarizeStream with its first pass fed by the
// caller: Add every request of the dataset (in any order: the first pass
// only counts), then Finish makes the other passes over src, which must
// yield the same requests. A replay that writes its records to a file
// adds them as it writes, and reads the file only twice.
type StreamSummarizer struct {
	s    *StreamSummary
	ms   [4]*metricStream
	pcts []float64
	span span // first arrival to last end
}

// NewStreamSummarizer starts a summary with percentiles pcts.
func NewStreamSummarizer(pcts []float64) *StreamSummarizer {
	z := &StreamSummarizer{s: &StreamSummary{Pcts: pcts}, pcts: pcts, span: newSpan()}
	for i := range z.ms {
		z.ms[i] = &metricStream{hist: make([]int64, 1<<16)}
	}
	return z
}

// Add counts request r (the first pass). It keeps nothing of r.
func (z *StreamSummarizer) Add(r *trace.Request) {
	s := z.s
	s.Requests++
	z.span.add(r)
	if !r.OK() {
		s.Failed++
		return
	}
	s.Completed++
	s.TotalInputTokens += r.InputTokens.Or(0)
	s.TotalOutputTokens += r.OutputTokens.Or(0)
	eachMetric(r, z.count, z.countSlice)
}

func (z *StreamSummarizer) count(m int, v float64) { z.ms[m].count(v) }

func (z *StreamSummarizer) countSlice(m int, vs []float64) {
	ms := z.ms[m]
	ms.n += int64(len(vs))
	for _, v := range vs {
		ms.hist[floatKey(v)>>48]++
	}
}

func (z *StreamSummarizer) visit(m int, v float64) { z.ms[m].visit(v) }

func (z *StreamSummarizer) visitSlice(m int, vs []float64) { z.ms[m].visitSlice(vs) }

// Finish makes the passes over src that the summary still needs; Passes
// counts them (and the first, when SummarizeStream made it).
func (z *StreamSummarizer) Finish(src Source) (*StreamSummary, error) {
	s, ms, pcts := z.s, z.ms, z.pcts
	for _, m := range ms {
		m.plan(pcts)
	}
	for pass := 2; ; pass++ {
		work := false
		for _, m := range ms {
			work = m.startPass(pass) || work
		}
		if !work {
			break
		}
		if pass > 8 {
			return nil, errors.New("analyze: stream summary did not converge") // cannot happen: 4 levels of 16 bits
		}
		err := src(func(r *trace.Request) error {
			if r.OK() {
				eachMetric(r, z.visit, z.visitSlice)
			}
			return nil
		})
		s.Passes++
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			m.endPass()
		}
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = ms[0].result(pcts), ms[1].result(pcts), ms[2].result(pcts), ms[3].result(pcts)
	if z.span.measured() {
		s.DurationSec = z.span.duration()
		s.RequestThroughput, s.InputThroughput, s.OutputThroughput, s.TotalTokenThroughput =
			throughputs(s.Completed, s.TotalInputTokens, s.TotalOutputTokens, s.DurationSec)
	}
	return s, nil
}

// A metricStream per metric: TTFT (0), TPOT (1), ITL (2) and E2E (3).
const (
	mTTFT = iota
	mTPOT
	mITL
	mE2E
)

// eachMetric calls each with each value a completed request adds to TTFT,
// TPOT and E2E, and many with its ITL gaps, in Summarize's order.
//
// Note: the gaps go as one slice: a simulated million requests have 2·10⁸
// of them, and a call per gap through a closure was a fifth of a pass.
func eachMetric(r *trace.Request, each func(m int, v float64), many func(m int, vs []float64)) {
	if r.TTFTSec.OK {
		each(mTTFT, r.TTFTSec.V)
	}
	if n := r.OutputTokens.Or(0); n > 1 && r.E2ESec.OK && r.TTFTSec.OK {
		each(mTPOT, (r.E2ESec.V-r.TTFTSec.V)/float64(n-1))
	}
	if len(r.ITLSec) > 0 {
		many(mITL, r.ITLSec)
	}
	if r.E2ESec.OK {
		each(mE2E, r.E2ESec.V)
	}
}

// floatKey maps a float64 to a uint64 with the same order (−0 just below +0).
func floatKey(v float64) uint64 {
	b := math.Float64bits(v)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

func keyFloat(k uint64) float64 {
	if k>>63 == 1 {
		return math.Float64frombits(k &^ (1 << 63))
	}
	return math.Float64frombits(^k)
}

// A target is one rank being selected: the values whose key starts with
// prefix (the top bits bits) hold it at position within.
type target struct {
	rank   int64
	prefix uint64
	bits   uint
	within int64
	count  int64 // values with this prefix
	value  float64
	done   bool
}

// A bucketJob is the work of one pass on one open prefix: collect its
// values, or histogram their next 16 bits.
type bucketJob struct {
	prefix  uint64
	bits    uint
	collect bool
	values  []float64
	hist    []int64
}

type metricStream struct {
	n       int64
	hist    []int64
	targets []*target
	jobs    []*bucketJob

	sum, sq  *pairwiseStream
	mean     float64
	meanDone bool
	stdDone  bool
	std      float64
}

func (m *metricStream) count(v float64) {
	m.n++
	m.hist[floatKey(v)>>48]++
}

// plan turns the ranks the median and percentiles read into targets in the
// top-level buckets.
func (m *metricStream) plan(pcts []float64) {
	ranks := medianRanks(m.n)
	for _, p := range pcts {
		ranks = append(ranks, percentileRanks(m.n, p)...)
	}
	slices.Sort(ranks)
	ranks = slices.Compact(ranks)
	for _, r := range ranks {
		t := &target{rank: r, bits: 16}
		cum := int64(0)
		for b, c := range m.hist {
			if r < cum+c {
				t.prefix, t.within, t.count = uint64(b), r-cum, c
				break
			}
			cum += c
		}
		m.targets = append(m.targets, t)
	}
	m.hist = nil
	if m.n > 0 {
		m.sum = newPairwiseStream(int(m.n))
	} else {
		m.meanDone, m.stdDone = true, true
	}
}

// startPass sets up the pass's jobs; it reports whether the metric needs
// this pass at all.
func (m *metricStream) startPass(pass int) bool {
	m.jobs = m.jobs[:0]
	for _, t := range m.targets {
		if t.done || m.job(t.prefix, t.bits) != nil {
			continue
		}
		j := &bucketJob{prefix: t.prefix, bits: t.bits, collect: t.count <= collectLimit}
		if j.collect {
			j.values = make([]float64, 0, t.count)
		} else {
			j.hist = make([]int64, 1<<16)
		}
		m.jobs = append(m.jobs, j)
	}
	if m.meanDone && !m.stdDone && m.sq == nil {
		m.sq = newPairwiseStream(int(m.n))
	}
	return len(m.jobs) > 0 || !m.meanDone || !m.stdDone
}

func (m *metricStream) job(prefix uint64, bits uint) *bucketJob {
	for _, j := range m.jobs {
		if j.prefix == prefix && j.bits == bits {
			return j
		}
	}
	return nil
}

func (m *metricStream) visit(v float64) {
	if !m.meanDone {
		m.sum.Add(v)
	} else if m.sq != nil && !m.stdDone {
		d := v - m.mean
		m.sq.Add(d * d)
	}
	if len(m.jobs) == 0 {
		return
	}
	m.select1(v)
}

// select1 gives v to the pass's job on its bucket, if any.
func (m *metricStream) select1(v float64) {
	k := floatKey(v)
	for _, j := range m.jobs {
		if k>>(64-j.bits) != j.prefix {
			continue
		}
		if j.collect {
			j.values = append(j.values, v)
		} else {
			j.hist[(k<<j.bits)>>48]++
		}
	}
}

// visitSlice visits vs in order, as visit does one by one.
func (m *metricStream) visitSlice(vs []float64) {
	if !m.meanDone {
		m.sum.AddSlice(vs)
	} else if m.sq != nil && !m.stdDone {
		var sq [128]float64
		for rest := vs; len(rest) > 0; {
			k := min(len(rest), len(sq))
			for i, v := range rest[:k] {
				d := v - m.mean
				sq[i] = d * d
			}
			m.sq.AddSlice(sq[:k])
			rest = rest[k:]
		}
	}
	if len(m.jobs) == 0 {
		return
	}
	for _, v := range vs {
		m.select1(v)
	}
}

func (m *metricStream) endPass() {
	switch {
	case !m.meanDone:
		sum, _ := m.sum.Sum()
		m.mean, m.meanDone = sum/float64(m.n), true
	case m.sq != nil && !m.stdDone:
		sq, _ := m.sq.Sum()
		m.std, m.stdDone = math.Sqrt(sq/float64(m.n)), true
	}
	for _, t := range m.targets {
		if t.done {
			continue
		}
		j := m.job(t.prefix, t.bits)
		if j.collect {
			slices.Sort(j.values)
			t.value, t.done = j.values[t.within], true
			continue
		}
		cum := int64(0)
		for b, c := range j.hist {
			if t.within < cum+c {
				t.prefix = t.prefix<<16 | uint64(b)
				t.bits += 16
				t.within -= cum
				t.count = c
				break
			}
			cum += c
		}
		if t.bits == 64 { // every value with this key is this value
			t.value, t.done = keyFloat(t.prefix), true
		}
	}
	m.jobs = m.jobs[:0]
}

func (m *metricStream) at(rank int64) float64 {
	for _, t := range m.targets {
		if t.rank == rank {
			return t.value
		}
	}
	panic("analyze: rank not selected")
}

func (m *metricStream) result(pcts []float64) StreamDist {
	d := StreamDist{N: m.n, Mean: m.mean, Std: m.std, Median: medianOf(m.n, m.at)}
	for _, p := range pcts {
		d.Percentiles = append(d.Percentiles, percentileOf(m.n, p, m.at))
	}
	return d
}
