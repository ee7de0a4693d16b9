package analyze

import (
	"math"

	"github.com/opaltrace/opaltrace/trace"
)

// A peakFold computes PeakMetrics of requests added one at a time, as a
// Summarizer takes them, so that binning the token times, one per ITL
// gap, is done as they come rather than when the last request is in.
//
// A token time's bin is int(t − minStart), minStart the earliest start of
// all the requests, known only at the end. The fold bins from the first
// request's start (origin) instead, and its counts are PeakMetrics' when
// that is the earliest start: a replay emits its records in the order
// they complete, and the first to complete is nearly always one of the
// first to arrive. Otherwise, or when a bin lies beyond maxFoldBins (a run
// spanning months), result says so and the caller runs PeakMetrics.
type peakFold struct {
	started  bool
	origin   float64
	counts   []int32 // token times per bin from origin
	unbinned bool    // a token time past maxFoldBins: the counts are not kept

	// What PeakMetrics finds over the spans: the first reason a
	// successful request gives none, their count, earliest start, latest
	// end, tokens, and whether any has ITL gaps.
	missing          string
	spans            int
	minStart, maxEnd float64
	tokens           int
	hasITL           bool
}

// maxFoldBins bounds the bins (seconds) a peakFold counts: 2²² int32s,
// 16 MiB, over 48 days.
const maxFoldBins = 1 << 22

func newPeakFold() peakFold { return peakFold{minStart: math.Inf(1), maxEnd: math.Inf(-1)} }

// add adds r, in PeakMetrics' order of requests.
func (f *peakFold) add(r *trace.Request) {
	if !r.OK() || f.missing != "" {
		return
	}
	if f.missing = spanMissing(r); f.missing != "" {
		f.counts = nil
		return
	}
	start := r.Arrival.V.Seconds()
	f.spans++
	f.minStart = math.Min(f.minStart, start)
	f.maxEnd = math.Max(f.maxEnd, start+r.E2ESec.V)
	f.tokens += 1 + len(r.ITLSec)
	f.hasITL = f.hasITL || r.ITLSec != nil
	if f.unbinned {
		return
	}
	if !f.started {
		f.started, f.origin = true, start
	}
	// As peakBinDense walks a span: t accumulates the same sums.
	t := start + r.TTFTSec.V
	f.bin(t - f.origin)
	for _, g := range r.ITLSec {
		t += g
		f.bin(t - f.origin)
	}
}

// bin counts a token time x seconds from origin, as countBin does (times
// before it, x ≤ −1, fall outside every bin).
func (f *peakFold) bin(x float64) {
	if !(x > -1) {
		return
	}
	if !(x < maxFoldBins) {
		f.unbinned, f.counts = true, nil
		return
	}
	b := int(x)
	if b >= len(f.counts) {
		if b >= cap(f.counts) {
			f.counts = append(f.counts[:cap(f.counts)], make([]int32, max(b+1, 2*cap(f.counts))-cap(f.counts))...)
		}
		f.counts = f.counts[:cap(f.counts)]
	}
	f.counts[b]++
}

// result returns PeakMetrics of the requests added, given them all (reqs,
// in the same order) for the concurrency sweep and for PeakMetrics itself
// when the fold's bins are not its bins.
func (f *peakFold) result(reqs []*trace.Request) (*Peak, string) {
	if f.missing != "" {
		return nil, f.missing
	}
	if f.spans == 0 {
		return nil, "no successful requests"
	}
	if f.unbinned || f.origin != f.minStart {
		return PeakMetrics(reqs)
	}
	nbins := math.Ceil(f.maxEnd-f.minStart) + 1
	peakBin := int32(0)
	for b, n := range f.counts {
		if float64(b) >= nbins {
			break
		}
		peakBin = max(peakBin, n)
	}
	p := &Peak{OutputTokensPerSec: float64(peakBin), ConcurrentRequests: concurrentPeak(reqs, f.spans)}
	if !f.hasITL {
		p.OutputTokensPerSec, p.TokensMissing = 0, "requests have no ITL gaps"
	}
	return p, ""
}
