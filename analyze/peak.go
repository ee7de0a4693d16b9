package analyze

import (
	"cmp"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// Peak holds vLLM's peak metrics of a run.
type Peak struct {
	// OutputTokensPerSec is vLLM's max_output_tokens_per_s: token times
	// start + ttft + cumsum(itl) (one "token" per chunk, as vLLM counts
	// them) bucketed into 1-s bins from the earliest start, the largest
	// bin count.
	OutputTokensPerSec float64
	// TokensMissing says why OutputTokensPerSec is not computed (no
	// request has ITL gaps, so token times are unknown); "" when it is.
	TokensMissing string
	// ConcurrentRequests is vLLM's max_concurrent_requests: the peak of a
	// sweep line over the half-open intervals [start, start + latency),
	// departures before arrivals at equal times.
	ConcurrentRequests int
}

// PeakMetrics computes vLLM's peak metrics over the successful requests
// (calculate_metrics in vllm/benchmarks/serve.py). It needs each
// successful request's arrival (vLLM's start_time), TTFT and E2E; without
// them it returns nil and the reason.
//
// Note: arrivals are kept in integer nanoseconds of trace time, so a token
// time within a nanosecond of a bin edge may fall in the neighbouring bin
// compared with vLLM's arithmetic on raw perf_counter values.
func PeakMetrics(reqs []*trace.Request) (*Peak, string) {
	var spans []tokenSpan
	hasITL := false
	for _, r := range reqs {
		if !r.OK() {
			continue
		}
		if why := spanMissing(r); why != "" {
			return nil, why
		}
		hasITL = hasITL || r.ITLSec != nil
		spans = append(spans, tokenSpan{r.Arrival.V.Seconds(), r.TTFTSec.V, r.E2ESec.V, r.ITLSec})
	}
	if len(spans) == 0 {
		return nil, "no successful requests"
	}
	minStart, maxEnd := math.Inf(1), math.Inf(-1)
	for _, s := range spans {
		minStart = math.Min(minStart, s.start)
		maxEnd = math.Max(maxEnd, s.start+s.lat)
	}
	nbins := math.Ceil(maxEnd-minStart) + 1
	tokens := 0
	for _, s := range spans {
		tokens += 1 + len(s.itl)
	}
	each := func(f func(x float64)) {
		for _, s := range spans {
			t := s.start + s.ttft
			f(t - minStart)
			for _, g := range s.itl {
				t += g
				f(t - minStart)
			}
		}
	}
	peakBin := 0
	if nbins <= float64(tokens) {
		peakBin = peakBinDense(spans, minStart, int(nbins))
	} else {
		peakBin = peakBinSparse(each, nbins, tokens)
	}
	p := &Peak{OutputTokensPerSec: float64(peakBin)}
	if !hasITL {
		p.OutputTokensPerSec, p.TokensMissing = 0, "requests have no ITL gaps"
	}

	p.ConcurrentRequests = concurrentPeak(reqs, len(spans))
	return p, ""
}

// spanMissing says what successful request r lacks for the peak metrics
// (its start, end or first token), or "".
func spanMissing(r *trace.Request) string {
	switch {
	case !r.Arrival.OK:
		return "requests have no arrival (start) times"
	case !r.E2ESec.OK:
		return "requests have no end-to-end latency"
	case !r.TTFTSec.OK:
		return "requests have no TTFT"
	}
	return ""
}

// concurrentPeak is vLLM's max_concurrent_requests over the n successful
// requests of reqs, every one with an arrival and an E2E: the peak of a
// sweep line over [start, start + latency), departures before arrivals at
// equal times.
func concurrentPeak(reqs []*trace.Request, n int) int {
	type event struct {
		t     float64
		delta int
	}
	events := make([]event, 0, 2*n)
	for _, r := range reqs {
		if r.OK() {
			start := r.Arrival.V.Seconds()
			events = append(events, event{start, 1}, event{start + r.E2ESec.V, -1})
		}
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	cur, peak := 0, 0
	for _, e := range events {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

// The token times are counted per bin in an array when there are no more
// bins than tokens, and otherwise sparsely, from their sorted bin numbers:
// either way the work and memory are bounded by the number of tokens,
// never by the span of the run alone (a run of two requests a year apart
// is two requests, not 31 million bins). A token time x (seconds from the
// first start) is in bin int(x), as Python's int() truncates toward zero,
// and vLLM drops the times outside [0, nbins).

// A tokenSpan is a successful request's times in seconds: its start
// (arrival), TTFT, end-to-end latency and ITL gaps.
type tokenSpan struct {
	start, ttft, lat float64
	itl              []float64
}

// peakBinDense returns the largest count of the spans' token times (start
// + ttft + cumsum(itl), less minStart) in nbins bins, counted in an array.
// It walks the spans itself rather than taking each's times: a call
// through each per token was most of the time of a summary's peaks.
func peakBinDense(spans []tokenSpan, minStart float64, nbins int) int {
	counts := make([]int, nbins)
	for _, s := range spans {
		t := s.start + s.ttft
		countBin(counts, t-minStart)
		for _, g := range s.itl {
			t += g
			countBin(counts, t-minStart)
		}
	}
	return slices.Max(append(counts, 0))
}

// countBin counts a token time x (seconds from the first start) in its
// bin of counts, unless it falls outside them.
//
// Note: x < len(counts) is int(x) < len(counts) (truncation toward zero)
// for every x > −1, len(counts) being an integer, without a call to
// math.Trunc per token.
func countBin(counts []int, x float64) {
	if x > -1 && x < float64(len(counts)) {
		counts[int(x)]++
	}
}

// peakBinSparse is peakBinDense by sorting the bin numbers of the n token
// times.
func peakBinSparse(each func(func(float64)), nbins float64, n int) int {
	tokenBins := make([]int64, 0, n)
	each(func(x float64) {
		if x > -1 && math.Trunc(x) < nbins {
			tokenBins = append(tokenBins, int64(x))
		}
	})
	slices.Sort(tokenBins)
	peakBin := 0
	for i := 0; i < len(tokenBins); {
		j := i + 1
		for j < len(tokenBins) && tokenBins[j] == tokenBins[i] {
			j++
		}
		peakBin = max(peakBin, j-i)
		i = j
	}
	return peakBin
}
