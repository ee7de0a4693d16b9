package analyze

import (
	"cmp"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// DecompParts names the TTFT components of a decomposition, in order.
// "queue" is the server's queue wait (schedule_s when the source has no
// queue_s), "routing" the time from the router's receipt to the worker's
// (worker_arrival_s − router_arrival_s, when a record has both: a
// gateway holding the request for a ready worker while a fleet scaled to
// zero starts, in a replay), "other" is the rest of TTFT: network,
// tokenization, detokenization and anything the server did not itemize
// (negative when the parts overlap).
// The engines count the queue from the loop pass that takes a request in,
// after the step in flight when it arrived, and so do replays (vLLM's
// request_queue_time_seconds): that step's rest is in "other".
var DecompParts = []string{"queue", "prefill", "kv_fetch", "routing", "other"}

// A DecompBand is the TTFT decomposition of the requests whose TTFT lies in
// a percentile band [LoPct, HiPct) of the run's TTFTs.
type DecompBand struct {
	LoPct, HiPct float64
	N            int
	MeanTTFT     float64   // seconds
	Mean         []float64 // seconds, per DecompParts
	Share        []float64 // Σ part / Σ TTFT, per DecompParts
	Dominant     string    // the part with the largest share
}

// A Decomposition is the TTFT decomposition of a run by percentile band.
type Decomposition struct {
	Requests int // completed requests with TTFT and at least one part
	Bands    []DecompBand
	// PrefillIncludesQueue counts requests whose source measured prefill
	// from the dispatch to the scheduler (SGLang OTel) without a separate
	// queue wait: their queueing is inside "prefill".
	PrefillIncludesQueue int
	// QueueSplit is set when the source splits the queue wait (SGLang):
	// of the queue, the share idle or busy with others and the share
	// blocked by the token or memory budget, over all decomposed requests.
	QueueSplit *QueueSplit
}

// QueueSplit is SGLang's split of the queue wait.
type QueueSplit struct {
	IdleShare, BudgetWaitShare float64
}

// DefaultBands are the TTFT percentile bands of a decomposition.
var DefaultBands = []float64{0, 50, 90, 99, 100}

// Decompose splits TTFT into queue, prefill, KV fetch, routing and other, for the
// completed requests that have TTFT and at least one server-side part, by
// TTFT percentile band (edges in percent, e.g. DefaultBands). A request at
// sorted position i of n is in the band with lo ≤ 100·i/n < hi. It returns
// nil when no request has a decomposition.
func Decompose(reqs []*trace.Request, edges []float64) *Decomposition {
	var z Decomposer
	for _, r := range reqs {
		z.Add(r)
	}
	return z.Finish(edges)
}

// A Decomposer computes Decompose as a fold, for requests read by a pass
// over a file: Add each request in the order Decompose would see them,
// then Finish. It keeps 40 bytes per decomposed request.
type Decomposer struct {
	rows                         []decompRow
	queueSum, idleSum, budgetSum float64
	split                        bool
	mixedPrefill                 int
}

type decompRow struct {
	ttft  float64
	parts [5]float64 // per DecompParts
}

// Add adds one request; requests without a decomposition are skipped.
func (z *Decomposer) Add(r *trace.Request) {
	if !r.OK() || !r.TTFTSec.OK {
		return
	}
	q := r.QueueSec
	if !q.OK {
		q = r.ScheduleSec
	}
	var routing float64
	if r.RouterArrival.OK && r.WorkerArrival.OK {
		routing = max(0, r.WorkerArrival.V.Sub(r.RouterArrival.V).Seconds())
	}
	if !q.OK && !r.PrefillSec.OK && !r.KVFetchSec.OK {
		return
	}
	x := decompRow{ttft: r.TTFTSec.V}
	prefill := r.PrefillSec.Or(0)
	if r.PrefillBasis == trace.PrefillDispatched && r.PrefillSec.OK {
		if q.OK {
			prefill -= q.V // the source's prefill includes the queue wait
		} else {
			z.mixedPrefill++
		}
	}
	x.parts[0], x.parts[1], x.parts[2], x.parts[3] = q.Or(0), prefill, r.KVFetchSec.Or(0), routing
	x.parts[4] = x.ttft - x.parts[0] - x.parts[1] - x.parts[2] - x.parts[3]
	z.rows = append(z.rows, x)
	if r.IdleInQueueSec.OK || r.BudgetWaitSec.OK {
		z.split = true
		z.queueSum += q.Or(0)
		z.idleSum += r.IdleInQueueSec.Or(0)
		z.budgetSum += r.BudgetWaitSec.Or(0)
	}
}

// Finish returns the decomposition by the percentile bands edges (nil
// when no request had one). The Decomposer must not be used after.
func (z *Decomposer) Finish(edges []float64) *Decomposition {
	rows, mixedPrefill := z.rows, z.mixedPrefill
	split, queueSum, idleSum, budgetSum := z.split, z.queueSum, z.idleSum, z.budgetSum
	if len(rows) == 0 {
		return nil
	}
	slices.SortStableFunc(rows, func(a, b decompRow) int { return cmp.Compare(a.ttft, b.ttft) })
	d := &Decomposition{Requests: len(rows), PrefillIncludesQueue: mixedPrefill}
	n := len(rows)
	for k := 0; k+1 < len(edges); k++ {
		lo, hi := edges[k], edges[k+1]
		b := DecompBand{LoPct: lo, HiPct: hi, Mean: make([]float64, len(DecompParts)), Share: make([]float64, len(DecompParts))}
		var ttftSum float64
		for i, x := range rows {
			p := 100 * float64(i) / float64(n)
			if p < lo || p >= hi {
				continue
			}
			b.N++
			ttftSum += x.ttft
			for j, v := range x.parts {
				b.Mean[j] += v
			}
		}
		if b.N > 0 {
			b.MeanTTFT = ttftSum / float64(b.N)
			best := -1
			for j := range b.Mean {
				if ttftSum > 0 {
					b.Share[j] = b.Mean[j] / ttftSum
				}
				b.Mean[j] /= float64(b.N)
				if best < 0 || b.Share[j] > b.Share[best] {
					best = j
				}
			}
			b.Dominant = DecompParts[best]
		}
		d.Bands = append(d.Bands, b)
	}
	if split && queueSum > 0 {
		d.QueueSplit = &QueueSplit{IdleShare: idleSum / queueSum, BudgetWaitShare: budgetSum / queueSum}
	}
	return d
}
