package replay

import (
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// Dynamo's load-based scaling (PlannerConfig.Policy "dynamo"): the planner
// of its optimization targets throughput (its default), latency and load,
// which scale each pool of a disaggregated fleet (or an aggregated fleet,
// below) by one engine at a time on thresholds, without a profile or SLA
// targets (components/src/dynamo/
// planner: config/planner_config.py, which turns load scaling on and
// throughput scaling off for every target but sla; core/load_scaling.py,
// _prefill_easy_decision, _decode_easy_decision, _advance_load_disagg and
// their thresholds; core/budget.py). Every AdjustmentIntervalSec
// (load_adjustment_interval_seconds, 5 s):
//
//   - nothing is decided while a pool is scaling: a worker it asked for
//     is still starting (Dynamo's scaling-in-progress check, the
//     expected engines not all ready, blocks both pools);
//   - each ready engine reports its load, as its latest forward-pass
//     metrics give it (a rank of a data-parallel server is an engine; the
//     replay's latest built step, as an HPA sees it: a worker
//     fast-forwarded past the adjustment shows the end of its window): a
//     prefill engine its queued requests' tokens still to compute, over
//     the model's context length (throughput, latency) or as they are
//     (load); a decode engine its KV demand, its running requests' KV
//     tokens and its queued ones' tokens, over its KV capacity in tokens;
//   - a pool grows by one engine when any engine's load reaches the up
//     threshold, and otherwise shrinks by one, not below MinEndpoint nor
//     below one, when every engine's is under the down threshold;
//   - the two changes are fitted in MaxGPUBudget as Dynamo's budget
//     guard fits them: a proposal within the budget stands; one beyond
//     it is scaled down in proportion (budget), and held where that
//     would move a pool against its proposal or past it.
//
// The thresholds (module constants of load_scaling.py):
//
//	target      prefill up   prefill down   decode up    decode down
//	throughput  ≥ 1.0        all < 0.1      any > 1.0    all < 0.6
//	latency     ≥ 0.1        all ≤ 0        any > 0.4    all < 0.1
//	load        ≥ up tokens  all ≤ down     any ≥ up %   all ≤ down %
//
// An aggregated fleet (Config.Planner) is one pool whose engines report
// their KV demand with their queued requests' tokens still to compute
// (Dynamo's _agg_easy_decision: queued prefill tokens added to the decode
// KV tokens), scaled on the decode thresholds; its budget holds a
// proposal beyond it at the engines the budget allows.
//
// Not modelled: the cancellation of a starting worker on a scale-down
// signal and the wait for that signal to last an interval (Dynamo's
// newest versions), and the minimum GPU budget.

// decide returns the engines a pool of cur engines is to have, its
// engines' loads those given (the prefill pool's when prefill, else the
// decode pool's): one more when any reaches the up threshold, one fewer
// (not below least, nor below 1) when every one is under the down
// threshold, else cur; an empty pool stays empty (Dynamo returns no
// decision for no workers).
func (th loadThresholds) decide(cur int, loads []float64, prefill bool, least int) int {
	if cur == 0 {
		return 0
	}
	up, down := false, true
	for _, v := range loads {
		if prefill {
			up = up || v >= th.up
			down = down && (v < th.down || th.downAtMost && v <= th.down)
		} else {
			up = up || v > th.kvUp || th.kvUpAt && v >= th.kvUp
			down = down && (v < th.kvDown || th.kvDownAtMost && v <= th.kvDown)
		}
	}
	switch {
	case up:
		return cur + 1
	case down && cur > 1:
		return max(cur-1, least)
	}
	return cur
}

// prefillLoad is a prefill engine's load: its queued requests' tokens
// still to compute, over the context length when perContext.
func (e *engine) prefillLoad(w *worker, perContext bool) float64 {
	if perContext {
		return float64(queuedToCompute(w)) / float64(e.cfg.Scheduler.ContextLength)
	}
	return float64(queuedToCompute(w))
}

// aggLoad is an aggregated engine's load: its running requests' KV
// tokens and its queued requests' tokens still to compute (Dynamo's
// aggregated mode adds queued_requests.sum_prefill_tokens to the decode
// KV tokens; a queued request, new or preempted, is all prefill), over
// its KV capacity.
func (e *engine) aggLoad(w *worker) float64 {
	return e.ofKV(w, runningKV(w)+queuedToCompute(w))
}

// decodeLoad is a decode engine's KV demand: its running requests' KV
// tokens and its queued requests' tokens (their prompts' KV, sent or on
// its way), over its KV capacity.
func (e *engine) decodeLoad(w *worker) float64 {
	tokens := runningKV(w)
	w.waiting.each(func(r *reqState) { tokens += r.numTokens() })
	return e.ofKV(w, tokens)
}

// runningKV is the KV tokens of w's running requests: computed, or being
// computed in the step in flight.
func runningKV(w *worker) (tokens int64) {
	for _, r := range w.running {
		tokens += r.computed
	}
	return tokens
}

// queuedToCompute is the tokens w's queued requests have still to
// compute: a prompt's, or a preempted request's prompt and output.
func queuedToCompute(w *worker) (tokens int64) {
	w.waiting.each(func(r *reqState) { tokens += max(r.numTokens()-r.computed, 0) })
	return tokens
}

// ofKV is tokens as a share of w's KV capacity.
func (e *engine) ofKV(w *worker, tokens int64) float64 {
	return float64(tokens) / float64(e.kvBlocksOf(w.id)*e.cfg.Scheduler.BlockSize)
}

// loadAdjust is the dynamo policy's adjustment at now (see the top of
// this file): the engines each pool is to have (an aggregated fleet's in
// the first), and false when nothing changes (blocked, or no threshold
// crossed).
func (e *engine) loadAdjust(now trace.Time) (int, int, bool) {
	a, p := e.scale, e.scale.plan
	th := p.cfg.thresholds()
	agg := len(a.pools) == 1
	adj := PlannerAdjustment{At: now, PrefillLoad: math.NaN(), DecodeLoad: math.NaN(), Skipped: true}
	defer func() { p.log = append(p.log, adj) }()
	var cur, next [2]int
	for i, pl := range a.pools {
		ready, starting, _ := a.countIn(pl.lo, pl.hi)
		if starting > 0 {
			return 0, 0, false // scaling in progress
		}
		cur[i] = ready / pl.k
	}
	adj.Skipped = false
	for i, pl := range a.pools {
		prefill := i == 0 && !agg
		loads := p.loads[:0]
		for s := pl.lo; s < pl.hi; s++ {
			if a.state[s] != slotReady {
				continue
			}
			switch w := e.workers[s]; {
			case prefill:
				loads = append(loads, e.prefillLoad(w, th.perContext))
			case agg:
				loads = append(loads, e.aggLoad(w))
			default:
				loads = append(loads, e.decodeLoad(w))
			}
		}
		p.loads = loads
		next[i] = th.decide(cur[i], loads, prefill, p.cfg.MinEndpoint)
		most := math.NaN()
		if len(loads) > 0 {
			most = slices.Max(loads)
		}
		if prefill {
			adj.PrefillLoad = most
		} else {
			adj.DecodeLoad = most
		}
	}
	if agg {
		// The fleet's engines and load are logged as the decode
		// pool's: Dynamo's aggregated mode makes the decode decision.
		n := p.guardBudgetAgg(cur[0], next[0])
		adj.Decode = n
		return n, 0, n != cur[0]
	}
	np, nd := p.guardBudget(cur, next)
	adj.Prefill, adj.Decode = np, nd
	return np, nd, np != cur[0] || nd != cur[1]
}

// guardBudgetAgg is guardBudget for an aggregated fleet of cur engines
// proposed next: within the budget it stands, beyond it the budget's
// engines, held at cur where that is not between the two.
func (p *planner) guardBudgetAgg(cur, next int) int {
	fit := min(next, p.cfg.mostAgg())
	if fit < min(cur, next) {
		return cur
	}
	return fit
}

// guardBudget fits the proposed engines of both pools (next) in the GPU
// budget, from cur: within it they stand; beyond it they are scaled down
// in proportion (budget), and a pool whose result leaves the range from
// its current engines to its proposal keeps its current ones.
func (p *planner) guardBudget(cur, next [2]int) (int, int) {
	gp, gd := p.cfg.engineGPUs(true), p.cfg.engineGPUs(false)
	if next[0]*gp+next[1]*gd <= p.cfg.MaxGPUBudget {
		return next[0], next[1]
	}
	var fit [2]int
	fit[0], fit[1] = p.budget(next[0], next[1])
	for i := range fit {
		lo, hi := min(cur[i], next[i]), max(cur[i], next[i])
		if fit[i] < lo || fit[i] > hi {
			fit[i] = cur[i]
		}
	}
	if fit[0]*gp+fit[1]*gd > p.cfg.MaxGPUBudget {
		return cur[0], cur[1]
	}
	return fit[0], fit[1]
}
