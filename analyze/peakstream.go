package analyze

import (
	"cmp"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// A peakStream computes PeakMetrics' numbers in passes, holding per-second
// counts rather than the requests' spans:
//
//  1. (add) check every successful request has what the metrics need,
//     as PeakMetrics does, and find the first start and the last end;
//  2. bin the token times (vLLM's 1-s bins), and count starts and ends
//     per second: the concurrency after all events before a second is
//     exact, and a second can reach the peak only if that count plus its
//     starts does;
//  3. keep the start and end times of those seconds only and sweep them
//     as PeakMetrics sweeps all of them.
//
// Note: the sweep orders events by (time, departures first); a second's
// events all sort between the seconds before and after it, since the bin
// of a time is a non-decreasing function of it.
type peakStream struct {
	missing            string
	n                  int // successful requests
	hasITL             bool
	minStart, maxEnd   float64
	pass               int // 0 before plan, 2 binning, 3 sweeping, 4 done
	nbins              int
	tokens             bins
	starts, ends       bins
	best               int           // the peak concurrency known so far
	before             map[int]int   // concurrency before each candidate second
	events             map[int][]pev // the events of each candidate second
	tokensPerSec       float64
	concurrentRequests int
}

type pev struct {
	t     float64
	delta int
}

func (p *peakStream) add(r *trace.Request) {
	if p.missing != "" {
		return
	}
	switch {
	case !r.Arrival.OK:
		p.missing = "requests have no arrival (start) times"
		return
	case !r.E2ESec.OK:
		p.missing = "requests have no end-to-end latency"
		return
	case !r.TTFTSec.OK:
		p.missing = "requests have no TTFT"
		return
	}
	if p.n == 0 {
		p.minStart, p.maxEnd = math.Inf(1), math.Inf(-1)
	}
	p.n++
	p.hasITL = p.hasITL || r.ITLSec != nil
	start := r.Arrival.V.Seconds()
	p.minStart = math.Min(p.minStart, start)
	p.maxEnd = math.Max(p.maxEnd, start+r.E2ESec.V)
}

func (p *peakStream) plan() {
	if p.missing != "" || p.n == 0 {
		p.pass = 4
		return
	}
	p.nbins = int(math.Ceil(p.maxEnd-p.minStart)) + 1
	// Dense counts when the span is not much longer than there are
	// requests; sparse ones otherwise, so that far-apart times cost
	// nothing.
	dense := p.nbins <= 4*p.n+4096
	p.tokens, p.starts, p.ends = newBins(dense, p.nbins), newBins(dense, p.nbins), newBins(dense, p.nbins)
	p.pass = 2
}

// bin is the second of an event at time t (clamped: the sweep needs a
// non-decreasing function of t, not vLLM's bins).
func (p *peakStream) bin(t float64) int {
	b := math.Floor(t - p.minStart)
	return int(min(max(b, 0), float64(p.nbins-1)))
}

func (p *peakStream) startPass() bool { return p.pass == 2 || p.pass == 3 }

func (p *peakStream) visit(r *trace.Request) {
	// r is a successful request (the caller checks), with arrival, TTFT
	// and E2E (add checked them all).
	start := r.Arrival.V.Seconds()
	end := start + r.E2ESec.V
	switch p.pass {
	case 2:
		t := start + r.TTFTSec.V
		p.tokenAt(t - p.minStart)
		for _, g := range r.ITLSec {
			t += g
			p.tokenAt(t - p.minStart)
		}
		p.starts.inc(p.bin(start), 1)
		p.ends.inc(p.bin(end), 1)
	case 3:
		if evs, ok := p.events[p.bin(start)]; ok {
			p.events[p.bin(start)] = append(evs, pev{start, 1})
		}
		if evs, ok := p.events[p.bin(end)]; ok {
			p.events[p.bin(end)] = append(evs, pev{end, -1})
		}
	}
}

// tokenAt is addBin: Python's int() truncates toward zero, and vLLM drops
// tokens outside [0, nbins).
func (p *peakStream) tokenAt(x float64) {
	b := int(x)
	if x > -1 && b >= 0 && b < p.nbins {
		p.tokens.inc(b, 1)
	}
}

func (p *peakStream) endPass() {
	switch p.pass {
	case 2:
		p.tokensPerSec = float64(p.tokens.max())
		p.tokens = bins{}
		// The concurrency after all the events of the seconds before b is
		// reached by the sweep; the peak is at least the largest.
		cur := 0
		p.best = 0
		p.starts.eachUnion(p.ends, func(b int, s, e int) {
			cur += s - e
			p.best = max(p.best, cur)
		})
		// Only a second whose count before it plus its starts exceeds
		// that can raise the peak: keep its events for an exact sweep.
		p.before, p.events = map[int]int{}, map[int][]pev{}
		cur = 0
		p.starts.eachUnion(p.ends, func(b int, s, e int) {
			if cur+s > p.best {
				p.before[b] = cur
				p.events[b] = make([]pev, 0, s+e)
			}
			cur += s - e
		})
		p.starts, p.ends = bins{}, bins{}
		p.pass = 3
		if len(p.events) == 0 {
			p.finish()
		}
	case 3:
		for b, evs := range p.events {
			slices.SortFunc(evs, func(x, y pev) int {
				if c := cmp.Compare(x.t, y.t); c != 0 {
					return c
				}
				return cmp.Compare(x.delta, y.delta)
			})
			cur := p.before[b]
			for _, e := range evs {
				cur += e.delta
				p.best = max(p.best, cur)
			}
		}
		p.finish()
	}
}

func (p *peakStream) finish() {
	p.concurrentRequests = p.best
	p.before, p.events = nil, nil
	p.pass = 4
}

func (p *peakStream) result() (*Peak, string) {
	switch {
	case p.missing != "":
		return nil, p.missing
	case p.n == 0:
		return nil, "no successful requests"
	}
	pk := &Peak{OutputTokensPerSec: p.tokensPerSec, ConcurrentRequests: p.concurrentRequests}
	if !p.hasITL {
		pk.OutputTokensPerSec, pk.TokensMissing = 0, "requests have no ITL gaps"
	}
	return pk, ""
}

// bins counts per second, densely or in a map.
type bins struct {
	dense  []int64
	sparse map[int]int64
}

func newBins(dense bool, n int) bins {
	if dense {
		return bins{dense: make([]int64, n)}
	}
	return bins{sparse: map[int]int64{}}
}

func (b bins) inc(i int, d int64) {
	if b.dense != nil {
		b.dense[i] += d
	} else {
		b.sparse[i] += d
	}
}

// max is the largest count, 0 when none.
func (b bins) max() int64 {
	m := int64(0)
	for _, v := range b.dense {
		m = max(m, v)
	}
	for _, v := range b.sparse {
		m = max(m, v)
	}
	return m
}

// eachUnion calls f, in ascending second, for every second either b or o
// counts something in, with both counts.
func (b bins) eachUnion(o bins, f func(i, x, y int)) {
	if b.dense != nil {
		for i := range b.dense {
			if b.dense[i] != 0 || o.dense[i] != 0 {
				f(i, int(b.dense[i]), int(o.dense[i]))
			}
		}
		return
	}
	keys := make([]int, 0, len(b.sparse)+len(o.sparse))
	for k := range b.sparse {
		keys = append(keys, k)
	}
	for k := range o.sparse {
		if _, ok := b.sparse[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		f(k, int(b.sparse[k]), int(o.sparse[k]))
	}
}
