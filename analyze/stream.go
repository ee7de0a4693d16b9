package analyze

import (
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/internal/prefault"
	"github.com/opaltrace/opaltrace/trace"
)

// A Source yields the requests of a dataset, in the same order on every
// call; each call is one pass (e.g. one read of a Parquet file). The
// request handed to yield may be reused after yield returns.
//
// The passes after the first read only a request's status, output tokens,
// arrival, TTFT, E2E and ITL gaps (and the fields it is grouped by), so a
// source may leave the others absent from its second call on.
type Source func(yield func(*trace.Request) error) error

// collectLimit (a variable so tests can force refinement) bounds the
// values one bucket's selection keeps in memory (8 MiB of float64); a
// bucket holding more is split by the next 16 bits of its values in one
// more pass.
var collectLimit int64 = 1 << 20

// passBudget bounds, in float64 values, what the selection of one pass
// holds over every metric of every summary made together: collected
// bucket values, and 65,536 per histogram of a bucket's next 16 bits. A
// job that does not fit waits for a later pass, so a CDF of thousands of
// quantiles, or a summary per worker, costs passes rather than memory.
var passBudget int64 = 16 << 20

// A budget is what is left of passBudget in the current pass.
type budget struct {
	left int64
	used bool // some job was admitted: one that does not fit waits
}

// take admits a job of cost values, always the pass's first one.
func (b *budget) take(cost int64) bool {
	if b.used && cost > b.left {
		return false
	}
	b.left -= cost
	b.used = true
	return true
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
// values, or histogram their next 16 bits, for its targets.
type bucketJob struct {
	prefix  uint64
	bits    uint
	collect bool
	values  []float64
	hist    []int64
	targets []*target // ascending rank
}

func (j *bucketJob) top() uint64 { return j.prefix >> (j.bits - 16) }

// A metricStream selects the order statistics of one metric in passes
// and sums it for the mean and std.
//
//  1. Count the values and histogram the top 16 bits of an
//     order-preserving integer key of each float64 (count).
//  2. Sum the values in numpy's pairwise order (pairwiseStream, which
//     needs n from pass 1) for the mean; for each bucket holding a rank
//     to select, keep its values when at most collectLimit, else
//     histogram the next 16 bits within the bucket.
//  3. Sum the squared deviations from the mean pairwise for the std
//     (numpy computes x − mean first, so the mean must be final); go on
//     refining or collecting the buckets still open.
//
// Further passes run while a bucket is still open (at most four levels of
// 16 bits: a 64-bit prefix is a single value) or waits for the budget.
type metricStream struct {
	n       int64
	hist    []int64
	targets []*target // ascending rank
	jobs    []*bucketJob
	// The jobs' buckets are disjoint key ranges [los[i], his[i]], in
	// ascending order; with many jobs, byTop holds 1 + the index of the
	// first job of each top-16-bit bucket (0: none), where a binary
	// search for a value's job starts.
	los, his []uint64
	byTop    []int32
	// tops has bit t set when some job's bucket lies in top-16-bit
	// bucket t: most values are in none, and one look at tops turns
	// them away.
	tops [1 << 10]uint64
	// A top bucket with many jobs (a CDF's thousands of quantiles fall
	// in few of them) gets a table of its next 16 bits: subOf holds
	// 1 + its index in subs, and subs[i][next 16 bits] 1 + the index of
	// the first job in that 32-bit bucket, so a value finds its job in
	// one step rather than by a binary search.
	subOf []int32
	subs  [][]int32
	last  int // the job of the previous value: neighbouring gaps of a request are often in one bucket

	sum, sq  *pairwiseStream
	mean     float64
	meanDone bool
	stdDone  bool
	std      float64
}

func newMetricStream() *metricStream { return &metricStream{hist: make([]int64, 1<<16)} }

func (m *metricStream) count(v float64) {
	m.n++
	m.hist[floatKey(v)>>48]++
}

func (m *metricStream) countSlice(vs []float64) {
	m.n += int64(len(vs))
	for _, v := range vs {
		m.hist[floatKey(v)>>48]++
	}
}

// plan turns ranks into targets in the top-level buckets.
func (m *metricStream) plan(ranks []int64) {
	slices.Sort(ranks)
	ranks = slices.Compact(ranks)
	cum, b := int64(0), 0
	for _, r := range ranks {
		for b < len(m.hist) && r >= cum+m.hist[b] {
			cum += m.hist[b]
			b++
		}
		m.targets = append(m.targets, &target{rank: r, bits: 16, prefix: uint64(b), within: r - cum, count: m.hist[b]})
	}
	m.hist = nil
	if m.n > 0 {
		m.sum = newPairwiseStream(int(m.n))
	} else {
		m.meanDone, m.stdDone = true, true
	}
}

// startPass sets up the pass's jobs within the budget; it reports whether
// the metric needs this pass at all.
func (m *metricStream) startPass(b *budget) bool {
	m.jobs = m.jobs[:0]
	var last *bucketJob
	waiting := false
	for _, t := range m.targets {
		if t.done {
			continue
		}
		// Targets are in rank order, so those of one bucket are adjacent.
		if last != nil && last.prefix == t.prefix && last.bits == t.bits {
			last.targets = append(last.targets, t)
			continue
		}
		last = nil
		if waiting {
			continue
		}
		j := &bucketJob{prefix: t.prefix, bits: t.bits, collect: t.count <= collectLimit, targets: []*target{t}}
		cost := int64(1 << 16)
		if j.collect {
			cost = t.count
		}
		if !b.take(cost) {
			waiting = true // the rest waits for the next pass
			continue
		}
		// The pass writes all of a job's values, and its histogram's
		// counts anywhere: one madvise maps their memory at once, many
		// times faster than the writes fault it in page by page (on the
		// 16-worker Mooncake replay, 2,400 of the command's 18,000 page
		// faults were these values').
		if j.collect {
			j.values = make([]float64, 0, t.count)
			prefault.Populate(prefault.Slice(j.values[:t.count]))
		} else {
			j.hist = make([]int64, 1<<16)
			prefault.Populate(prefault.Slice(j.hist))
		}
		m.jobs = append(m.jobs, j)
		last = j
	}
	// Jobs are in rank order, hence in key order; a target's bucket
	// moves down a level with every other target in it, so buckets are
	// disjoint.
	m.los, m.his, m.byTop = m.los[:0], m.his[:0], nil
	m.tops = [1 << 10]uint64{}
	for _, j := range m.jobs {
		lo := j.prefix << (64 - j.bits)
		m.los, m.his = append(m.los, lo), append(m.his, lo|(1<<(64-j.bits)-1))
		m.tops[j.top()>>6] |= 1 << (j.top() & 63)
	}
	m.subOf, m.subs = nil, nil
	if len(m.jobs) > 8 {
		m.byTop = make([]int32, 1<<16)
		for i := len(m.jobs) - 1; i >= 0; i-- {
			m.byTop[m.jobs[i].top()] = int32(i + 1)
		}
		for i := 0; i < len(m.jobs); {
			top := m.jobs[i].top()
			e := i
			for e < len(m.jobs) && m.jobs[e].top() == top {
				e++
			}
			if e-i >= 16 {
				if m.subOf == nil {
					m.subOf = make([]int32, 1<<16)
				}
				tbl := make([]int32, 1<<16)
				for x := e - 1; x >= i; x-- { // the first job of each entry wins
					for b := (m.los[x] >> 32) & 0xffff; ; b++ {
						tbl[b] = int32(x + 1)
						if b == (m.his[x]>>32)&0xffff {
							break
						}
					}
				}
				m.subs = append(m.subs, tbl)
				m.subOf[top] = int32(len(m.subs))
			}
			i = e
		}
	}
	if m.meanDone && !m.stdDone && m.sq == nil {
		m.sq = newPairwiseStream(int(m.n))
	}
	return len(m.jobs) > 0 || waiting || !m.meanDone || !m.stdDone
}

func (m *metricStream) visit(v float64) {
	if !m.meanDone {
		m.sum.Add(v)
	} else if m.sq != nil && !m.stdDone {
		d := v - m.mean
		m.sq.Add(d * d)
	}
	if len(m.jobs) > 0 {
		m.select1(v)
	}
}

// select1 gives v to the pass's job on its bucket, if any.
func (m *metricStream) select1(v float64) {
	k := floatKey(v)
	if m.tops[k>>54]&(1<<((k>>48)&63)) == 0 {
		return
	}
	var j *bucketJob
	if l := m.last; l < len(m.los) && m.los[l] <= k && k <= m.his[l] {
		j = m.jobs[l]
	} else if m.byTop == nil {
		for i, lo := range m.los {
			if lo <= k && k <= m.his[i] {
				j, m.last = m.jobs[i], i
				break
			}
		}
	} else if s := m.subOf; s != nil && s[k>>48] > 0 {
		for i := int(m.subs[s[k>>48]-1][(k>>32)&0xffff]) - 1; i >= 0 && i < len(m.los) && m.los[i] <= k; i++ {
			if k <= m.his[i] {
				j, m.last = m.jobs[i], i
				break
			}
		}
	} else {
		start := int(m.byTop[k>>48]) - 1
		if start < 0 {
			return
		}
		// The last job starting at or below k.
		los := m.los[start:]
		lo, hi := 0, len(los)
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if los[mid] <= k {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		if i := start + lo - 1; lo > 0 && k <= m.his[i] {
			j, m.last = m.jobs[i], i
		}
	}
	if j == nil {
		return
	}
	if j.collect {
		j.values = append(j.values, v)
	} else {
		j.hist[(k<<j.bits)>>48]++
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
		// select1's first look, here so that the values in no job's
		// bucket, most of them, cost no call.
		if k := floatKey(v); m.tops[k>>54]&(1<<((k>>48)&63)) != 0 {
			m.select1(v)
		}
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
	for _, j := range m.jobs {
		if j.collect {
			selectSorted(j.values, withins(j.targets))
			for _, t := range j.targets {
				t.value, t.done = j.values[t.within], true
			}
			continue
		}
		cum, b := int64(0), 0
		for _, t := range j.targets { // ascending within
			for b < len(j.hist) && t.within >= cum+j.hist[b] {
				cum += j.hist[b]
				b++
			}
			t.prefix = t.prefix<<16 | uint64(b)
			t.bits += 16
			t.within -= cum
			t.count = j.hist[b]
			if t.bits == 64 { // every value with this key is this value
				t.value, t.done = keyFloat(t.prefix), true
			}
		}
	}
	m.jobs, m.byTop, m.subOf, m.subs = m.jobs[:0], nil, nil, nil
}

// dist returns the finished distribution: its count, mean, std and the
// selected order statistics.
func (m *metricStream) dist() Dist {
	d := Dist{Mean: m.mean, Std: m.std, n: m.n, ranks: make(map[int64]float64, len(m.targets))}
	for _, t := range m.targets {
		d.ranks[t.rank] = t.value
	}
	return d
}

// withins returns the positions of targets (in ascending rank) within
// their bucket.
func withins(targets []*target) []int64 {
	w := make([]int64, len(targets))
	for i, t := range targets {
		w[i] = t.within
	}
	return w
}
