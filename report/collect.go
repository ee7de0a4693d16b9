package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// A Collector gathers, in one pass over a dataset's requests, what the
// report draws beyond the summaries: length histograms, TTFT by input
// length, ITL by output position, per-second counts, per-worker load and
// prefix-cache hits. Its memory is bounded by the number of bins, seconds
// and workers, not by the number of requests (TTFTs are kept per input
// length bin, 8 bytes a request, for exact per-bin percentiles), so a
// dataset summarized by passes gets the same sections from one more pass.
//
// Use: NewCollector, Add every request (in any order), then Extras.
type Collector struct {
	x Extras
	// ttftByInput holds the TTFTs (s) of completed requests per input
	// length bin, for the bins' exact median and p99.
	ttftByInput [lengthBins][]float64
	itlSum      [positionBins]float64
	itlN        [positionBins]int64
	// Per second since trace time 0: arrivals, completions, and a
	// difference array of running requests.
	arrivals, completions, runningDiff []int64
	workers, prefillWorkers            map[string]*WorkerLoad
	spanTooLong                        bool
	decomp                             analyze.Decomposer
	// curve holds what the ideal cache curve needs of each request with
	// hash ids (a copy: a reader may reuse its records), up to
	// maxCurveBlocks block ids.
	curve       []trace.Request
	curveBlocks int64
	curveOver   bool
}

// CollectorColumns are the columns of an opaltrace Parquet file a
// Collector reads, for a pass that scans only them.
var CollectorColumns = []string{"status", "worker", "prefill_worker", "input_tokens", "output_tokens", "cached_tokens",
	"device_hit_tokens", "host_hit_tokens", "storage_hit_tokens", "remote_hit_tokens",
	"arrival_s", "ttft_s", "e2e_s", "itl_s", "queue_s", "schedule_s", "prefill_s", "kv_fetch_s", "prefill_basis",
	"idle_in_queue_s", "budget_wait_s", "block_size", "hash_ids"}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{workers: map[string]*WorkerLoad{}, prefillWorkers: map[string]*WorkerLoad{}}
}

// Extras is what a Collector gathered.
type Extras struct {
	Requests int // requests added
	// InputHist and OutputHist count completed requests by token count
	// in log-spaced bins (lengthEdges).
	InputHist, OutputHist [lengthBins]int64
	// TTFTByInput is, per input length bin with requests, the count and
	// the exact median and p99 TTFT (s) of its completed requests.
	TTFTByInput []LengthBin
	// ITLByPosition is the mean ITL gap (s) by the gap's position in its
	// stream (log-spaced bins of positionEdges), over completed requests.
	ITLByPosition []PositionBin
	// Seconds are per-second counts from the requests' own times; nil
	// when no request has an arrival or the span exceeds maxSeconds.
	Seconds *RequestSeconds
	// Workers are the per-worker loads, by worker name (numbers in numeric
	// order: w2 before w10); nil when
	// no request names its worker.
	Workers []WorkerLoad
	// PrefillWorkers are, disaggregated, the prefill workers' loads, by
	// prefill_worker: the router's choices, and their prefix hits (a
	// decode worker's record counts none); nil when no request names one.
	PrefillWorkers []WorkerLoad
	// Prompt tokens over completed requests with a known input length,
	// and of them those served from a prefix cache (CachedTokens, or the
	// sum of the tiers' hit tokens), over the requests that record hits.
	HitInputTokens, HitTokens int64
	HitKnown                  bool
	// Decomp is the TTFT decomposition by percentile band
	// (analyze.DefaultBands), nil when no request has one.
	Decomp *analyze.Decomposition
	// CacheCurve is the ideal LRU prefix cache's hit rate by capacity
	// over the requests' hash ids; nil, with CacheCurveErr saying why,
	// when it could not be computed (none has hash ids: both empty).
	CacheCurve    *analyze.CacheCurve
	CacheCurveErr string
}

// A LengthBin is one input-length bin of TTFTByInput.
type LengthBin struct {
	Lo, Hi      int64 // tokens, [Lo, Hi)
	N           int
	Median, P99 float64 // seconds
}

// A PositionBin is one output-position bin of ITLByPosition.
type PositionBin struct {
	Lo, Hi int64 // gap index in the stream (1 = the gap after the first chunk), [Lo, Hi)
	N      int64
	Mean   float64 // seconds
}

// RequestSeconds are per-second counts from request times: second k is
// [Start+k, Start+k+1) s of trace time.
type RequestSeconds struct {
	Start                          int64
	Arrivals, Completions, Running []int64
}

// A WorkerLoad is the load one worker served.
type WorkerLoad struct {
	Worker                    string
	Requests                  int64 // routed to it, any status
	InputTokens, OutputTokens int64 // of its completed requests
	HitTokens                 int64 // prompt tokens it found cached
}

const (
	lengthBins   = 40 // half-octaves up to 2^19.5 tokens; the last bin is open
	positionBins = 30
	// maxSeconds bounds the per-second arrays (8 bytes × 3 per second):
	// a span of more than 30 days is not drawn per second.
	maxSeconds = 30 * 86400
	// maxCurveBlocks bounds the hash ids kept for the cache curve (8
	// bytes each): 50 million, a trace of 10⁶ Mooncake-shaped requests.
	maxCurveBlocks = 50_000_000
)

// lengthEdge is the lower edge of length bin k: 0, then 1, 2, 3, 4, 5, 8,
// 11, 16, 22, … (max(k, ⌊2^(k/2)⌋), half-octaves once they are distinct).
func lengthEdge(k int) int64 {
	if k == 0 {
		return 0
	}
	return max(int64(k), int64(math.Floor(math.Pow(2, float64(k)/2))))
}

// lengthEdges and positionEdges are the bins' lower edges, and one more.
var lengthEdges, positionEdges = edges(lengthBins+1, lengthEdge), edges(positionBins+1, positionEdge)

func edges(n int, edge func(int) int64) []int64 {
	e := make([]int64, n)
	for k := range e {
		e[k] = edge(k)
	}
	return e
}

// binOf returns the bin of x among the lower edges (the last bin is open).
func binOf(edges []int64, x int64) int {
	k, found := slices.BinarySearch(edges[:len(edges)-1], x)
	if !found {
		k--
	}
	return max(k, 0)
}

// lengthBin returns the bin of a token count.
func lengthBin(n int64) int { return binOf(lengthEdges, n) }

// positionEdge is the lower edge of position bin k: 1, 2, 3, 4, 6, 8, …
// (⌊2^(k/2)⌋, distinct, from 1).
func positionEdge(k int) int64 { return max(int64(k+1), int64(math.Floor(math.Pow(2, float64(k)/2)))) }

func positionBin(i int64) int { return binOf(positionEdges, i) }

// Add counts one request.
func (c *Collector) Add(r *trace.Request) {
	c.x.Requests++
	if r.Worker != "" {
		// A disaggregated request's hits were its prefill worker's.
		addLoad(c.workers, r.Worker, r, r.PrefillWorker == "")
	}
	if r.PrefillWorker != "" {
		addLoad(c.prefillWorkers, r.PrefillWorker, r, true)
	}
	c.addSeconds(r)
	c.decomp.Add(r)
	if len(r.HashIDs) > 0 && !c.curveOver {
		c.curveBlocks += int64(len(r.HashIDs))
		if c.curveBlocks > maxCurveBlocks {
			c.curveOver, c.curve = true, nil
		} else {
			c.curve = append(c.curve, trace.Request{Arrival: r.Arrival, BlockSize: r.BlockSize, InputTokens: r.InputTokens,
				HashIDs: slices.Clone(r.HashIDs)})
		}
	}
	if r.Status != trace.StatusOK {
		return
	}
	if r.InputTokens.OK {
		k := lengthBin(r.InputTokens.V)
		c.x.InputHist[k]++
		if r.TTFTSec.OK {
			c.ttftByInput[k] = append(c.ttftByInput[k], r.TTFTSec.V)
		}
		if h, ok := hitTokens(r); ok {
			c.x.HitKnown = true
			c.x.HitInputTokens += r.InputTokens.V
			c.x.HitTokens += h
		}
	}
	if r.OutputTokens.OK {
		c.x.OutputHist[lengthBin(r.OutputTokens.V)]++
	}
	k, next := 0, positionEdges[1]
	for i, g := range r.ITLSec {
		if int64(i+1) >= next && k < positionBins-1 {
			k = positionBin(int64(i + 1))
			next = positionEdges[k+1]
		}
		c.itlSum[k] += g
		c.itlN[k]++
	}
}

// hitTokens returns the prompt tokens a request found cached: the sum of
// the tiers' hits when any is recorded, else CachedTokens.
func hitTokens(r *trace.Request) (int64, bool) {
	if r.DeviceHitTokens.OK || r.HostHitTokens.OK || r.StorageHitTokens.OK || r.RemoteHitTokens.OK {
		return r.DeviceHitTokens.V + r.HostHitTokens.V + r.StorageHitTokens.V + r.RemoteHitTokens.V, true
	}
	return r.CachedTokens.V, r.CachedTokens.OK
}

// addSeconds bins a request's arrival, completion and activity per second
// (as analyze.PerSecond does: a request runs in every second that
// [arrival, arrival + E2E) touches).
func (c *Collector) addSeconds(r *trace.Request) {
	if !r.Arrival.OK || c.spanTooLong {
		return
	}
	a := r.Arrival.V.Seconds()
	lo := int64(math.Floor(a))
	hi, end := lo+1, lo // running: [lo, hi); completion second: end
	if r.E2ESec.OK {
		e := a + r.E2ESec.V
		end = int64(math.Floor(e))
		hi = max(int64(math.Ceil(e)), lo+1)
	}
	if !c.grow(lo, hi) {
		return
	}
	base := c.x.Seconds.Start
	c.arrivals[lo-base]++
	if r.E2ESec.OK {
		c.completions[end-base]++
		c.runningDiff[lo-base]++
		c.runningDiff[hi-base]--
	}
}

// grow makes the per-second arrays cover seconds [lo, hi]; false (and no
// per-second section) when the span would exceed maxSeconds.
func (c *Collector) grow(lo, hi int64) bool {
	if c.x.Seconds == nil {
		c.x.Seconds = &RequestSeconds{Start: lo}
	}
	s := c.x.Seconds
	start, end := min(s.Start, lo), max(s.Start+int64(len(c.arrivals)), hi+1)
	if end-start > maxSeconds {
		c.spanTooLong = true
		c.x.Seconds = nil
		c.arrivals, c.completions, c.runningDiff = nil, nil, nil
		return false
	}
	if start < s.Start {
		pad := int(s.Start - start)
		c.arrivals = append(make([]int64, pad), c.arrivals...)
		c.completions = append(make([]int64, pad), c.completions...)
		c.runningDiff = append(make([]int64, pad), c.runningDiff...)
		s.Start = start
	}
	for n := int(end - s.Start); len(c.arrivals) < n; {
		c.arrivals = append(c.arrivals, 0)
		c.completions = append(c.completions, 0)
		c.runningDiff = append(c.runningDiff, 0)
	}
	return true
}

// Extras returns what was gathered. The collector must not be used after.
func (c *Collector) Extras() *Extras {
	x := c.x
	for k := range c.ttftByInput {
		v := c.ttftByInput[k]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		x.TTFTByInput = append(x.TTFTByInput, LengthBin{Lo: lengthEdge(k), Hi: lengthEdge(k + 1), N: len(v),
			Median: sortedPercentile(v, 50), P99: sortedPercentile(v, 99)})
	}
	for k := range c.itlN {
		if c.itlN[k] > 0 {
			x.ITLByPosition = append(x.ITLByPosition, PositionBin{Lo: positionEdge(k), Hi: positionEdge(k + 1), N: c.itlN[k], Mean: c.itlSum[k] / float64(c.itlN[k])})
		}
	}
	if s := x.Seconds; s != nil {
		// The last slot only closes the difference array.
		n := len(c.arrivals) - 1
		s.Arrivals, s.Completions, s.Running = c.arrivals[:n], c.completions[:n], make([]int64, n)
		run := int64(0)
		for i := range n {
			run += c.runningDiff[i]
			s.Running[i] = run
		}
	}
	x.Decomp = c.decomp.Finish(analyze.DefaultBands)
	switch {
	case c.curveOver:
		x.CacheCurveErr = fmt.Sprintf("more than %d block ids", maxCurveBlocks)
	case len(c.curve) > 0:
		reqs := make([]*trace.Request, len(c.curve))
		for i := range c.curve {
			reqs[i] = &c.curve[i]
		}
		cc, err := analyze.ComputeCacheCurve(reqs)
		if err != nil {
			x.CacheCurveErr = err.Error()
		}
		x.CacheCurve = cc
		c.curve = nil
	}
	x.Workers = sortedLoads(c.workers)
	x.PrefillWorkers = sortedLoads(c.prefillWorkers)
	return &x
}

// addLoad counts request r in the load of worker name in m, its prefix
// hits with hits.
func addLoad(m map[string]*WorkerLoad, name string, r *trace.Request, hits bool) {
	w := m[name]
	if w == nil {
		w = &WorkerLoad{Worker: name}
		m[name] = w
	}
	w.Requests++
	if r.Status == trace.StatusOK {
		w.InputTokens += r.InputTokens.V
		w.OutputTokens += r.OutputTokens.V
		if h, ok := hitTokens(r); ok && hits {
			w.HitTokens += h
		}
	}
}

// sortedLoads returns the loads of m by worker name (w2 before w10); nil
// when m is empty.
func sortedLoads(m map[string]*WorkerLoad) []WorkerLoad {
	var ws []WorkerLoad
	for _, w := range m {
		ws = append(ws, *w)
	}
	slices.SortFunc(ws, func(a, b WorkerLoad) int { return compareWorkers(a.Worker, b.Worker) })
	return ws
}

// sortedPercentile is numpy's linear percentile of sorted values.
func sortedPercentile(v []float64, p float64) float64 {
	h := float64(len(v)-1) * (p / 100)
	i := int(math.Floor(h))
	if i >= len(v)-1 {
		return v[len(v)-1]
	}
	return v[i] + (v[i+1]-v[i])*(h-float64(i))
}

// Imbalance is the load imbalance of workers: the largest load over the
// mean load, by requests and by prompt plus output tokens (1: even).
// It returns zeros for fewer than two workers.
func Imbalance(ws []WorkerLoad) (byRequests, byTokens float64) {
	if len(ws) < 2 {
		return 0, 0
	}
	var sumR, maxR, sumT, maxT float64
	for _, w := range ws {
		r, t := float64(w.Requests), float64(w.InputTokens+w.OutputTokens)
		sumR, maxR = sumR+r, max(maxR, r)
		sumT, maxT = sumT+t, max(maxT, t)
	}
	n := float64(len(ws))
	if sumR > 0 {
		byRequests = maxR / (sumR / n)
	}
	if sumT > 0 {
		byTokens = maxT / (sumT / n)
	}
	return byRequests, byTokens
}
