package replay

import (
	"github.com/opaltrace/opaltrace/trace"
)

func (e *engine) alloc() *reqState {
	if n := len(e.free); n > 0 {
		r := e.free[n-1]
		e.free = e.free[:n-1]
		return r
	}
	return &reqState{}
}

// release recycles r, keeping its block table's capacity (and its ITL
// list's, when records are transient).
func (e *engine) release(r *reqState) {
	e.view.left(r)
	blocks, ghost := r.blocks[:0], r.ghost[:0]
	keys, from := r.tierKeys[:0], r.loadFrom[:0]
	var itl []float64
	if e.reuse || e.part != nil && e.part.transient {
		itl = r.itl[:0]
	}
	chain := r.chain // its memory; chainBS 0 makes hashChain reset it
	*r = reqState{blocks: blocks, ghost: ghost, itl: itl, tierKeys: keys, loadFrom: from, chain: chain}
	e.free = append(e.free, r)
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
