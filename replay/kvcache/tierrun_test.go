package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refTier is a Tier stored block by block, the plain way: a slice in LRU
// order, least recently used first.
type refTier struct {
	cap                        int
	blocks                     []refBlock
	stores, evictions, dropped int64
}

type refBlock struct {
	h     uint64
	ready bool
	pins  int
}

func (r *refTier) find(h uint64) int {
	return slices.IndexFunc(r.blocks, func(b refBlock) bool { return b.h == h })
}

func (r *refTier) store(h uint64) {
	if i := r.find(h); i >= 0 {
		b := r.blocks[i]
		r.blocks = append(slices.Delete(r.blocks, i, i+1), b)
		return
	}
	if len(r.blocks) >= r.cap {
		i := slices.IndexFunc(r.blocks, func(b refBlock) bool { return b.ready && b.pins == 0 })
		if i < 0 {
			r.dropped++
			return
		}
		r.blocks = slices.Delete(r.blocks, i, i+1)
		r.evictions++
	}
	r.blocks = append(r.blocks, refBlock{h: h})
	r.stores++
}

// TestTierRunsMatchBlocks drives a Tier that stores private blocks as
// runs and a tier that stores every block on its own through the same
// random operations (stores of shared and of private blocks, completions,
// lookups, touches, pins, removals, promotions), and checks that they
// agree on every answer, the LRU order, the size and the counters.
func TestTierRunsMatchBlocks(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := rng.IntN(40)
		tr := NewTier("t", int64(capacity))
		ref := &refTier{cap: capacity}
		type pending struct {
			keys  []uint64
			slot  int32 // a block's (Store)
			run   RunRef
			isRun bool
		}
		// Block i of owner o.
		key := func(o uint64, i int64) uint64 { return (o+1)<<32 + uint64(i) }
		var inflight []pending
		visible := map[uint64]bool{}   // keys anyone may look up
		owned := map[uint64][]uint64{} // each owner's blocks, in order
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 2: // a shared block, perhaps held already
				h := uint64(1 + rng.IntN(30))
				visible[h] = true
				s, st, _, _ := tr.Store(h)
				ref.store(h)
				if st == StoreInserted {
					inflight = append(inflight, pending{keys: []uint64{h}, slot: s})
				}
			case op < 4: // a run of fresh private blocks
				owner := uint64(rng.IntN(4))
				first := int64(len(owned[owner]))
				keys := make([]uint64, rng.IntN(12))
				for i := range keys {
					keys[i] = key(owner, first+int64(i))
				}
				run, n := tr.StoreRun(owner, first, int64(len(keys)))
				for _, h := range keys {
					ref.store(h)
				}
				// (Blocks dropped are never offered again.)
				owned[owner] = append(owned[owner], keys...)
				if n > 0 {
					inflight = append(inflight, pending{keys: keys[:n], run: run, isRun: true})
				}
			case op < 6 && len(inflight) > 0: // a store completes
				i := rng.IntN(len(inflight))
				p := inflight[i]
				inflight = slices.Delete(inflight, i, i+1)
				if p.isRun {
					tr.CompleteRun(p.run)
				} else {
					tr.CompleteAt(p.slot, p.keys[0])
				}
				for _, h := range p.keys {
					if j := ref.find(h); j >= 0 {
						ref.blocks[j].ready = true
					}
				}
			case op < 7: // an owner is about to look its blocks up
				owner := uint64(rng.IntN(4))
				tr.Promote(owner, owned[owner])
				for _, h := range owned[owner] {
					visible[h] = true
				}
			default: // a lookup of a block one may ask for
				var keys []uint64
				for h := range visible {
					keys = append(keys, h)
				}
				if len(keys) == 0 {
					continue
				}
				slices.Sort(keys)
				h := keys[rng.IntN(len(keys))]
				j := ref.find(h)
				if got, want := tr.Contains(h), j >= 0 && ref.blocks[j].ready; got != want {
					t.Fatalf("seed %d step %d: Contains(%d) %v, want %v", seed, step, h, got, want)
				}
				if got := tr.Has(h); got != (j >= 0) {
					t.Fatalf("seed %d step %d: Has(%d) %v", seed, step, h, got)
				}
				if j < 0 {
					continue
				}
				switch rng.IntN(4) {
				case 0:
					if rng.IntN(2) == 0 {
						tr.Touch(h)
					} else if _, ok := tr.Hit(h); ok != ref.blocks[j].ready {
						t.Fatalf("seed %d step %d: Hit(%d) %v", seed, step, h, ok)
					} else if !ok {
						break // (Hit touches only a ready block)
					}
					b := ref.blocks[j]
					ref.blocks = append(slices.Delete(ref.blocks, j, j+1), b)
				case 1:
					if s, ok := tr.Find(h); ok {
						tr.PinAt(s)
					} else {
						tr.Pin(h)
					}
					ref.blocks[j].pins++
				case 2:
					if ref.blocks[j].pins > 0 {
						tr.Unpin(h)
						ref.blocks[j].pins--
					}
				case 3:
					want := ref.blocks[j].pins == 0
					if got := tr.Remove(h); got != want {
						t.Fatalf("seed %d step %d: Remove(%d) %v", seed, step, h, got)
					}
					if want {
						ref.blocks = slices.Delete(ref.blocks, j, j+1)
					}
				}
			}
			var want []uint64
			for _, b := range ref.blocks {
				want = append(want, b.h)
			}
			if got := tr.LRU(key); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: LRU %v, want %v", seed, step, got, want)
			}
			if tr.Len() != int64(len(ref.blocks)) || tr.Stores != ref.stores || tr.Evictions != ref.evictions || tr.Dropped != ref.dropped {
				t.Fatalf("seed %d step %d: len %d stores %d evictions %d dropped %d, want %d %d %d %d", seed, step,
					tr.Len(), tr.Stores, tr.Evictions, tr.Dropped, len(ref.blocks), ref.stores, ref.evictions, ref.dropped)
			}
		}
	}
}
