package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFreeQueueMatchesReference drives a small cache through random
// allocations, prefix hits on free blocks (which leave stale ring
// entries) and releases, enough to compact the ring many times, and checks
// after every operation that the blocks Allocate hands out are exactly
// those a plain slice kept in LRU order would give, and that Check holds.
func TestFreeQueueMatchesReference(t *testing.T) {
	t.Run("compaction", func(t *testing.T) { freeQueueMatchesReference(t) })
	t.Run("rebase", func(t *testing.T) {
		// Positions past 1,000 renumber the queue from 0.
		defer func(p int64) { maxPos = p }(maxPos)
		maxPos = 1000
		freeQueueMatchesReference(t)
	})
}

func freeQueueMatchesReference(t *testing.T) {
	const n = 40
	// The test takes free blocks by id (Acquire), which a scheduler
	// does only for blocks it found holding a hash, so named ones:
	// every block is named first, queued 0..n-1.
	c := New(n)
	all, ok := c.Allocate(nil, n)
	if !ok || !slices.Equal(all, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39}) {
		t.Fatalf("a new cache handed out %v, want ids 0..%d in order", all, n-1)
	}
	slices.Reverse(all)
	c.Release(all, 0)
	ref := make([]int32, n) // free blocks, eviction order
	for b := range ref {
		ref[b] = int32(b)
	}
	var held [][]int32 // blocks held by live "requests"
	rng := rand.New(rand.NewPCG(1, 2))
	for op := range 100000 {
		// Allocations are rare, so that hits and releases pile stale
		// entries up behind the live ones and fill the ring.
		switch k := rng.IntN(50); {
		case k == 0 && len(ref) > 0: // allocate
			m := int64(1 + rng.IntN(min(len(ref), 6)))
			got, ok := c.Allocate(nil, m)
			if !ok {
				t.Fatalf("op %d: Allocate(%d) failed with %d free", op, m, len(ref))
			}
			if want := ref[:m]; !slices.Equal(got, want) {
				t.Fatalf("op %d: Allocate gave %v, LRU order says %v", op, got, want)
			}
			ref = slices.Clone(ref[m:])
			held = append(held, got)
		case k < 25 && len(ref) > 0: // a prefix hit takes a free block from the middle
			i := rng.IntN(len(ref))
			b := ref[i]
			c.Acquire(b)
			ref = slices.Delete(ref, i, i+1)
			held = append(held, []int32{b})
		case len(held) > 0: // release a request, tail block first
			i := rng.IntN(len(held))
			bs := held[i]
			c.Release(bs, 0)
			for j := len(bs) - 1; j >= 0; j-- {
				ref = append(ref, bs[j])
			}
			held = slices.Delete(held, i, i+1)
		}
		if c.NumFree() != int64(len(ref)) {
			t.Fatalf("op %d: %d free, reference has %d", op, c.NumFree(), len(ref))
		}
		if err := c.Check(); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	if c.compactions < 10 {
		t.Fatalf("%d compactions; the test does not exercise them", c.compactions)
	}
}

// TestAnonymousRunsMatchNamed drives two caches through the same random
// requests: one gives private blocks no ids (AllocateNamed, runs in the
// free queue), the other names every block and marks private ones one by
// one, as before runs. Requests share prefixes (prefix hits on free and
// referenced blocks), fill all their blocks or all but the last, complete
// or are preempted (Name, then their private blocks are committed) and
// come back to hit their own private blocks again while runs are cut by
// eviction from the front; after every operation both caches must agree
// on free blocks, evictions, the indexed hashes and what the preempted
// requests still hold, and both must pass Check.
func TestAnonymousRunsMatchNamed(t *testing.T) {
	t.Run("plain", func(t *testing.T) { anonymousRunsMatchNamed(t, false) })
	t.Run("rebase", func(t *testing.T) {
		// Positions past 1,000 renumber the queue, runs and all.
		defer func(p int64) { maxPos = p }(maxPos)
		maxPos = 1000
		anonymousRunsMatchNamed(t, true)
	})
}

type modelReq struct {
	id           int
	shared, size int      // leading shared blocks, blocks in all
	full         int      // leading full (hashed) blocks
	a, b         []int32  // block tables: anonymous cache, named cache
	ghostA       []int32  // tables at preemption (named by then)
	ghostB       []int32  //
	prefix       uint64   // which shared prefix it has
	preempted    bool     // it was preempted once
	hashes       []uint64 // its blocks' hashes
}

// A cachePair is the two caches a property test drives alike: a, the one
// under test (called name in failures), and b, which names and indexes
// every block.
type cachePair struct {
	a, b *Cache
	name string
}

// hits finds r's leading hits in both caches, which must agree: its shared
// blocks by hash, then, preempted, its own private blocks where they are
// still held (ghost counts those).
func (p cachePair) hits(t *testing.T, op int, r *modelReq) (hitsA, hitsB []int32, ghost int) {
	t.Helper()
	for k := range r.size - 1 {
		x := r.hashes[k]
		if k >= r.shared {
			if !r.preempted || k >= len(r.ghostA) {
				break
			}
			ha, hb := p.a.Holds(r.ghostA[k], x), p.b.Holds(r.ghostB[k], x)
			if ha != hb {
				t.Fatalf("op %d: request %d block %d held %v in the %s cache, %v in the named one", op, r.id, k, ha, p.name, hb)
			}
			if !ha {
				break
			}
			hitsA, hitsB = append(hitsA, r.ghostA[k]), append(hitsB, r.ghostB[k])
			ghost++
			continue
		}
		ba, oka := p.a.Lookup(x)
		bb, okb := p.b.Lookup(x)
		if oka != okb {
			t.Fatalf("op %d: request %d hash %#x found %v and %v", op, r.id, x, oka, okb)
		}
		if !oka {
			break
		}
		hitsA, hitsB = append(hitsA, ba), append(hitsB, bb)
	}
	return hitsA, hitsB, ghost
}

// admit gives r its hits and size − len(hits) fresh blocks in both caches,
// the first named of them named in a, and draws how many of its blocks
// fill; it reports false, changing nothing, when a has too few free
// blocks.
func (p cachePair) admit(t *testing.T, op int, rng *rand.Rand, r *modelReq, hitsA, hitsB []int32, named func(fresh int64) int64) bool {
	t.Helper()
	need := int64(r.size - len(hitsA))
	for i := range hitsA {
		if p.a.Ref(hitsA[i]) == 0 {
			need++
		}
		if (p.a.Ref(hitsA[i]) == 0) != (p.b.Ref(hitsB[i]) == 0) {
			t.Fatalf("op %d: a hit block free in one cache only", op)
		}
	}
	if need > p.a.NumFree() {
		return false
	}
	for i := range hitsA {
		p.a.Acquire(hitsA[i])
		p.b.Acquire(hitsB[i])
	}
	fresh := int64(r.size - len(hitsA))
	var ok bool
	if r.a, ok = p.a.AllocateNamed(append(r.a[:0], hitsA...), fresh, named(fresh)); !ok {
		t.Fatalf("op %d: %s allocation failed", op, p.name)
	}
	if r.b, ok = p.b.Allocate(append(r.b[:0], hitsB...), fresh); !ok {
		t.Fatalf("op %d: named allocation failed", op)
	}
	r.full = r.size - rng.IntN(2) // the last block may stay partial
	return true
}

// agree checks that the waiting requests' private blocks are held in both
// caches alike and that both pass Check.
func (p cachePair) agree(t *testing.T, op int, waiting []*modelReq) {
	t.Helper()
	for _, r := range waiting {
		for k := r.shared; k < len(r.ghostA); k++ {
			if p.a.Holds(r.ghostA[k], r.hashes[k]) != p.b.Holds(r.ghostB[k], r.hashes[k]) {
				t.Fatalf("op %d: request %d's private block %d held in one cache only", op, r.id, k)
			}
		}
	}
	if err := p.a.Check(); err != nil {
		t.Fatalf("op %d: %s cache: %v", op, p.name, err)
	}
	if err := p.b.Check(); err != nil {
		t.Fatalf("op %d: named cache: %v", op, err)
	}
}

func anonymousRunsMatchNamed(t *testing.T, rebase bool) {
	const n = 60
	a, b := New(n), New(n)
	p := cachePair{a, b, "anonymous"}
	rng := rand.New(rand.NewPCG(3, 4))
	var running, waiting []*modelReq
	next, ghostHits, freeHits := 0, 0, 0
	newReq := func() *modelReq {
		next++
		r := &modelReq{id: next, prefix: uint64(rng.IntN(4)), size: 1 + rng.IntN(12)}
		r.shared = min(rng.IntN(6), r.size)
		for k := range r.size {
			if k < r.shared {
				r.hashes = append(r.hashes, 1000*(r.prefix+1)+uint64(k))
			} else {
				r.hashes = append(r.hashes, uint64(next)<<20|uint64(k))
			}
		}
		return r
	}
	// start admits r: hits on its shared prefix (or, preempted, its own
	// private blocks where they are still held), fresh blocks for the
	// rest, then fills them.
	start := func(op int, r *modelReq) bool {
		hitsA, hitsB, ghost := p.hits(t, op, r)
		ghostHits += ghost
		for _, h := range hitsA {
			if a.Ref(h) == 0 {
				freeHits++
			}
		}
		if !p.admit(t, op, rng, r, hitsA, hitsB, func(fresh int64) int64 {
			if r.preempted {
				return fresh
			}
			return min(max(int64(r.shared-len(hitsA)), 0), fresh)
		}) {
			return false
		}
		for k := len(hitsA); k < r.full; k++ {
			switch {
			case k < r.shared:
				a.Commit(r.a[k], r.hashes[k])
				b.Commit(r.b[k], r.hashes[k])
			case r.preempted: // blocks after a preemption are indexed
				a.Commit(r.a[k], r.hashes[k])
				b.Commit(r.b[k], r.hashes[k])
			default:
				a.MarkPrivate(r.a[k]) // Anonymous: nothing to do
				b.MarkPrivate(r.b[k])
			}
		}
		return true
	}
	for op := range 30000 {
		switch k := rng.IntN(10); {
		case k < 4: // a request arrives or a preempted one comes back
			r := newReq()
			if len(waiting) > 0 && rng.IntN(2) == 0 {
				r, waiting = waiting[0], waiting[1:]
			}
			if start(op, r) {
				running = append(running, r)
			} else if r.preempted {
				waiting = append(waiting, r)
			}
		case k < 8 && len(running) > 0: // one completes
			i := rng.IntN(len(running))
			r := running[i]
			running = slices.Delete(running, i, i+1)
			a.Release(r.a, int64(r.full))
			b.Release(r.b, int64(r.full))
		case len(running) > 0: // one is preempted, once
			i := rng.IntN(len(running))
			r := running[i]
			if r.preempted {
				continue
			}
			running = slices.Delete(running, i, i+1)
			a.Name(r.a)
			for k := r.shared; k < r.full; k++ {
				a.CommitPrivate(r.a[k], r.hashes[k])
				b.CommitPrivate(r.b[k], r.hashes[k])
			}
			a.Release(r.a, int64(r.full))
			b.Release(r.b, int64(r.full))
			r.ghostA, r.ghostB = slices.Clone(r.a), slices.Clone(r.b)
			r.preempted = true
			waiting = append(waiting, r)
		}
		if a.NumFree() != b.NumFree() || a.Evictions != b.Evictions || a.NumCached() != b.NumCached() {
			t.Fatalf("op %d: free %d/%d, evictions %d/%d, cached %d/%d", op, a.NumFree(), b.NumFree(), a.Evictions, b.Evictions, a.NumCached(), b.NumCached())
		}
		p.agree(t, op, waiting)
	}
	if rebase && a.compactions < 5 || a.Evictions == 0 || len(a.runs) == 0 || ghostHits == 0 || freeHits == 0 {
		t.Fatalf("%d compactions, %d evictions, %d runs, %d hits on private blocks after preemption, %d on free blocks: the test does not exercise them",
			a.compactions, a.Evictions, len(a.runs), ghostHits, freeHits)
	}
	t.Logf("%d compactions, %d evictions, %d runs, %d hits on private blocks after preemption, %d on free blocks", a.compactions, a.Evictions, len(a.runs), ghostHits, freeHits)
}
