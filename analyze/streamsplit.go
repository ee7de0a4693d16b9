package analyze

import (
	"runtime"
	"sync"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// splitMin is the number of pooled values from which a pass over values
// held in memory (visitPooled) is split between two goroutines. (A
// variable, for tests.)
var splitMin int64 = 1 << 16

// visitPooled makes one pass over pooled, the metric's values in their
// order, as visitSlice on each of its slices would: on two goroutines,
// one per half, when there are enough values and a second core.
//
// Note: the halves are numpy's own: its pairwise sum of n > 128 values is
// the sum of the first pairSplit(n) values plus the sum of the rest, each
// summed pairwise on its own, so each goroutine sums its half with a
// pairwiseStream of that length and the pass adds the two, the same bits
// as one stream over all. The values a job collects from the second half
// are appended after those of the first, in the order one goroutine
// collects them, and histogram counts add. The summary that replay prints
// does these passes (the mean's, then the std's, with the buckets of the
// median and the percentiles collected meanwhile) over millions of ITL
// gaps once the replay has ended, while nothing else runs: on one core
// they were most of what the command waited for after the replay.
func (m *metricStream) visitPooled(pooled [][]float64) {
	if m.n < splitMin || m.n <= 128 || runtime.GOMAXPROCS(0) < 2 {
		for _, vs := range pooled {
			m.visitSlice(vs)
		}
		return
	}
	k := pairSplit(int(m.n))
	first, second := splitValues(pooled, k)
	// The stream this pass feeds, as visitSlice chooses it: the mean's,
	// else the std's (else none: the pass only selects).
	var fed **pairwiseStream
	switch {
	case !m.meanDone:
		fed = &m.sum
	case m.sq != nil && !m.stdDone:
		fed = &m.sq
	}
	other := *m // shares the pass's lookup tables, which the pass only reads
	other.last = 0
	other.jobs = make([]*bucketJob, len(m.jobs))
	for i, j := range m.jobs {
		o := &bucketJob{prefix: j.prefix, bits: j.bits, collect: j.collect, targets: j.targets}
		// As startPass's, mapped at once (prefault.Populate); the
		// second half's values, about half the bucket's, get a little
		// more than half its room, and grow past it if they must.
		if j.collect {
			o.values = make([]float64, 0, cap(j.values)/2+cap(j.values)/8)
			prefault.Populate(prefault.Slice(o.values[:cap(o.values)]))
		} else {
			o.hist = make([]int64, len(j.hist))
			prefault.Populate(prefault.Slice(o.hist))
		}
		other.jobs[i] = o
	}
	var left, right *pairwiseStream
	if fed != nil {
		left, right = newPairwiseStream(k), newPairwiseStream(int(m.n)-k)
		*fed = left
		if fed == &m.sum {
			other.sum = right
		} else {
			other.sq = right
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, vs := range second {
			other.visitSlice(vs)
		}
	})
	for _, vs := range first {
		m.visitSlice(vs)
	}
	wg.Wait()
	if fed != nil {
		l, lok := left.Sum()
		r, rok := right.Sum()
		if !lok || !rok {
			panic("analyze: visitPooled: the pooled values are not the metric's count")
		}
		*fed = &pairwiseStream{sum: l + r, done: true}
	}
	for i, j := range m.jobs {
		o := other.jobs[i]
		if j.collect {
			j.values = append(j.values, o.values...)
			continue
		}
		for b, c := range o.hist {
			j.hist[b] += c
		}
	}
}

// splitValues splits pooled at its k-th value: the slices before it,
// the last cut short, and those from it on.
func splitValues(pooled [][]float64, k int) (first, second [][]float64) {
	for i, vs := range pooled {
		if k < len(vs) {
			first = append(pooled[:i:i], vs[:k])
			second = append([][]float64{vs[k:]}, pooled[i+1:]...)
			return first, second
		}
		k -= len(vs)
	}
	return pooled, nil
}
