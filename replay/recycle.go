package replay

import (
	"math/bits"

	"github.com/opaltrace/opaltrace/trace"
)

// alloc returns a state for a request whose block table holds at most
// need blocks: a recycled one whose table has room for them if there is
// one (the one of the smallest such table, by the power of two of its
// room), else the recycled one of the largest table, else a new one.
//
// Note: by room, where the last state recycled was taken whatever its
// table, because a table that is too short grows (vllm.reserve), a copy
// into fresh memory: with the states in one stack, an autoscaled
// Mooncake replay, whose queues hold more requests at once, grew 1,126
// tables and 881 hash chains (round-robin 221 and 244; callgrind's
// calls). By room, a replay allocates 89.0 MB where it allocated 99.1
// (autoscaling), round-robin 78.4 where 82.2, llm_d 86.4 where 91.2,
// dynamo_kv 83.9 where 88.3 (-benchmem); CPU time against dc40c4f
// (`scripts/enginework --time 10 --against dc40c4f`, medians):
// round-robin 0.978×, autoscaling 0.876×, dynamo_kv 0.994×, llm_d
// 0.983×, and twelve rounds of the first two again 0.942× and 0.950×.
func (e *engine) alloc(need int64) *reqState {
	k := roomClass(need)
	for c := k; c < len(e.free); c++ {
		if n := len(e.free[c]); n > 0 && (c > k || int64(cap(e.free[c][n-1].blocks)) >= need) {
			return e.takeFree(c)
		}
	}
	for c := min(k, len(e.free)-1); c >= 0; c-- {
		if len(e.free[c]) > 0 {
			return e.takeFree(c)
		}
	}
	return &reqState{}
}

// roomClass is the class of a table with room for n blocks: the bits of
// n (0 for none).
func roomClass(n int64) int { return bits.Len64(uint64(max(n, 0))) }

// putFree pushes r, recycled, by its table's room.
func (e *engine) putFree(r *reqState) {
	c := roomClass(int64(cap(r.blocks)))
	for len(e.free) <= c {
		e.free = append(e.free, nil)
	}
	e.free[c] = append(e.free[c], r)
}

// takeFree pops a state of room class c.
func (e *engine) takeFree(c int) *reqState {
	n := len(e.free[c])
	r := e.free[c][n-1]
	e.free[c] = e.free[c][:n-1]
	return r
}

// release recycles r, keeping its block table's capacity (and its ITL
// list's, when records are transient).
func (e *engine) release(r *reqState) {
	e.view.left(r)
	if e.pd != nil {
		e.pd.ended(r.idx)
	}
	e.recycle(r)
}

// recycle keeps r's memory for a later request: release without the
// router's count, for a request that never reached the router
// (scaletozero.go).
func (e *engine) recycle(r *reqState) {
	blocks, ghost := r.blocks[:0], r.ghost[:0]
	keys, from := r.tierKeys[:0], r.loadFrom[:0]
	var itl []float64
	if e.reuse || e.part != nil && e.part.transient {
		itl = r.itl[:0]
	}
	chain := r.chain // its memory; chainBS 0 makes hashChain reset it
	*r = reqState{blocks: blocks, ghost: ghost, itl: itl, tierKeys: keys, loadFrom: from, chain: chain}
	e.putFree(r)
}

// record returns the record of request i to fill: rec when records are
// transient (in a part of a split replay, one the merge has emitted and
// handed back), its place in the slab when they are all kept.
func (e *engine) record(i int32) *trace.Request {
	if e.reuse {
		return &e.rec
	}
	if e.slab != nil {
		if r := e.slab.record(i); r != nil {
			return r
		}
	}
	if e.part != nil {
		return e.part.record()
	}
	return new(trace.Request)
}
