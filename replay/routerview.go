package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// A routerView is the engine's side of the router's view of the workers
// (the Cluster a router sees): the scraped loads, refreshed on ticks of
// RouterConfig.ViewIntervalSec; the KV events not yet delivered; and the
// router's own count of what it sent where.
type routerView struct {
	e        *engine
	interval time.Duration // 0: live
	next     trace.Time    // the next scrape tick
	loads    []WorkerLoad  // as of the last scrape (interval > 0)
	live     []WorkerLoad  // the ready workers' loads now (Loads, interval 0)
	out      []Outstanding
	kv       kvObserver    // the router, when fed by KV events; nil otherwise
	act      activeTracker // the router, when it follows its requests; nil otherwise
	pending  []kvEvent     // KV events not yet delivered
	ready    []int         // the workers a request may go to
}

// A kvEvent is a worker's report that it computed a prompt's prefix
// blocks (a vLLM/Dynamo "stored" event), delivered at the first view tick
// at or after at.
type kvEvent struct {
	at        trace.Time
	worker    int32
	fresh     int32 // ids[fresh:] computed, the others hit (kvObserver)
	blockSize int64
	ids       []int64
}

func (v *routerView) NumWorkers() int { return len(v.e.workers) }

func (v *routerView) Ready() []int { return v.ready }

// setReady makes the view follow the autoscaler's ready slots.
//
// With disaggregation the router routes among the prefill pool, and the
// decode router among the decode pool (disagg.setReady).
func (v *routerView) setReady(a *autoscaler) {
	state := a.state
	if pd := v.e.pd; pd != nil {
		pd.setReady(state[pd.prefill:])
		state = state[:pd.prefill]
	}
	v.ready = v.ready[:0]
	for i, s := range state {
		if s == slotReady {
			v.ready = append(v.ready, i)
		}
	}
}

func (v *routerView) Load(i int) WorkerLoad {
	if v.interval == 0 {
		return v.e.liveLoad(i)
	}
	return v.loads[i]
}

func (v *routerView) Loads() []WorkerLoad {
	if v.interval > 0 {
		return v.loads
	}
	live, workers, total := v.live, v.e.workers, v.e.kvBlocks
	for _, i := range v.ready {
		live[i] = workers[i].load(total)
	}
	if v.e.prefillKV > 0 {
		// The prefill pool's capacity is its own (Options.Prefill).
		for _, i := range v.ready {
			live[i].TotalBlocks = v.e.kvBlocksOf(i)
		}
	}
	return live
}

func (v *routerView) Outstanding() []Outstanding { return v.out }

// init sets the view up for router r over the engine's workers.
func (v *routerView) init(e *engine, r Router) {
	v.e = e
	v.interval = trace.DurationSeconds(e.cfg.RouterConfig.ViewIntervalSec)
	v.out = make([]Outstanding, len(e.workers))
	v.ready = make([]int, len(e.workers))
	if e.pd != nil {
		v.ready = v.ready[:e.pd.prefill] // the proxy routes among the prefill pool
	}
	for i := range v.ready {
		v.ready[i] = i
	}
	v.loads = make([]WorkerLoad, len(e.workers))
	v.live = make([]WorkerLoad, len(e.workers))
	v.kv, _ = r.(kvObserver)
	v.act, _ = r.(activeTracker)
	if v.hooked() {
		for _, w := range e.workers[:len(v.ready)] {
			w.onPrefilled = v.prefilled
		}
	}
}

// hooked reports whether the router hears of first tokens (prefilled).
func (v *routerView) hooked() bool { return v.kv != nil || v.act != nil }

// refresh brings the view up to time now: a scrape when a tick has
// passed, and the KV events due by the latest tick.
func (v *routerView) refresh(now trace.Time) {
	tick := now
	if v.interval > 0 {
		tick = now - trace.Time(int64(now)%int64(v.interval)) // the latest tick at or before now
		if now >= v.next {
			for i := range v.loads {
				v.loads[i] = v.e.liveLoad(i)
			}
			v.next = tick.Add(v.interval)
		}
	}
	if len(v.pending) == 0 {
		return
	}
	// Events come nearly in time order (fast-forward windows of
	// different workers interleave), so scan them all; there are few.
	kept := v.pending[:0]
	for _, ev := range v.pending {
		if v.due(ev.at) <= tick {
			v.kv.kvStored(int(ev.worker), ev.ids, ev.blockSize, int(ev.fresh))
			continue
		}
		kept = append(kept, ev)
	}
	clear(v.pending[len(kept):])
	v.pending = kept
}

// due is the tick at which an event of time at is delivered.
func (v *routerView) due(at trace.Time) trace.Time {
	if v.interval == 0 {
		return at
	}
	if r := int64(at) % int64(v.interval); r != 0 {
		return at.Add(v.interval - time.Duration(r))
	}
	return at
}

// prefilled is the workers' hook: r's prompt is computed on worker w at
// time at.
func (v *routerView) prefilled(w *worker, r *reqState, at trace.Time) {
	if v.act != nil {
		v.act.prefillDone(int(r.idx))
	}
	if v.kv == nil || r.in == nil || len(r.in.HashIDs) == 0 || !r.in.BlockSize.OK {
		return
	}
	bs, ids := r.in.BlockSize.V, r.in.HashIDs
	var fresh int64 // whole trace blocks hit at the first schedule
	if bs > 0 {
		fresh = min(r.cached/bs, int64(len(ids)))
	}
	v.pending = append(v.pending, kvEvent{at: at, worker: int32(w.id), fresh: int32(fresh), blockSize: bs, ids: ids})
}

// sent counts request r as outstanding on its worker.
func (v *routerView) sent(r *reqState) {
	o := &v.out[r.worker]
	o.Requests++
	o.Tokens += r.prompt + r.maxOut
}

// left counts r as no longer outstanding: it completed, timed out, or was
// aborted.
func (v *routerView) left(r *reqState) {
	if v.act != nil {
		v.act.freed(int(r.idx))
	}
	o := &v.out[r.worker]
	o.Requests--
	o.Tokens -= r.prompt + r.maxOut
}

// sharedIDs is Routed.SharedIDs of request i, whose ids are n: what the
// replay's sharing passes found (onlineSharing, sharedPrefixes), else n.
func (e *engine) sharedIDs(i int32, n int) int {
	switch {
	case e.online != nil:
		return min(int(e.online.anyShares(i)), n)
	case e.shared != nil:
		return min(int(e.shared[i]), n)
	}
	return n
}

// liveLoad is worker i's state now.
func (e *engine) liveLoad(i int) WorkerLoad { return e.workers[i].load(e.kvBlocksOf(i)) }

// load is w's state now, its KV capacity total blocks.
//
// Note: small enough to be inlined (liveLoad was not), in Loads' loop
// over the ready workers among others: a call a worker, some 10 of the
// 50 instructions a worker's load cost llm_d's router.
func (w *worker) load(total int64) WorkerLoad {
	return WorkerLoad{Running: len(w.running), Waiting: w.waiting.size, FreeBlocks: w.s.freeBlocks(), TotalBlocks: total}
}

// routeNow asks the router, at time now, for r's worker, and keeps its
// score on r.
func (e *engine) routeNow(now trace.Time, r *reqState) int {
	if e.scale != nil {
		e.promote(now)
	}
	e.view.refresh(now)
	q := &e.routed
	*q = Routed{Index: int(r.idx), At: now, Prompt: r.prompt, Out: r.maxOut}
	if in := r.in; in != nil {
		q.Session = in.Session
		if in.BlockSize.OK && len(in.HashIDs) > 0 {
			q.HashIDs, q.BlockSize = in.HashIDs, in.BlockSize.V
			q.SharedIDs = e.sharedIDs(r.idx, len(in.HashIDs))
		}
	}
	wi := e.router.Route(q, &e.view)
	r.score, r.scored = q.Score, q.Scored
	if e.test.routed != nil {
		e.test.routed(e, q, wi)
	}
	return wi
}
