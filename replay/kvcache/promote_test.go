package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPromoteMatchesNamed drives two caches through the same random
// requests. In the named one every block has an id and a request's
// shared blocks are indexed when they fill; in the lazy one a request
// indexes only the shared blocks a sharer has asked for so far (its
// visible level), holds the others anonymous, and promotes them when a
// sharer arrives: a running request by naming and committing them, a
// finished one out of its run (Promote), a preempted one all at once.
// Sharers arrive in groups that start alone, so runs are promoted in
// parts, several times, while eviction cuts them from the front, and the
// promoted blocks are hit from the runs' tails. After every operation
// both caches must agree on free blocks, evictions, which promoted hashes
// are cached and what preempted requests still hold, and pass Check.
func TestPromoteMatchesNamed(t *testing.T) {
	t.Run("plain", func(t *testing.T) { promoteMatchesNamed(t, false) })
	t.Run("rebase", func(t *testing.T) {
		// Positions past 1,000 renumber the queue, runs and all.
		defer func(p int64) { maxPos = p }(maxPos)
		maxPos = 1000
		promoteMatchesNamed(t, true)
	})
}

type lazyReq struct {
	modelReq
	group   int
	vis     int // leading blocks indexed in the lazy cache
	running bool
	run     FreeRun // finished unpreempted: the run of its anonymous blocks
	j       int     // its first block
}

func promoteMatchesNamed(t *testing.T, rebase bool) {
	const n = 60
	a, b := New(n), New(n)
	p := cachePair{a, b, "lazy"}
	rng := rand.New(rand.NewPCG(5, 6))
	var running, waiting []*lazyReq
	groups := map[int][]*lazyReq{}
	next := 0
	var promotedRuns, tailHits, ghostHits int
	hash := func(g, k int) uint64 { return uint64(1000*(g+1) + k) }
	// promote raises r's visible level to v in the lazy cache.
	promote := func(r *lazyReq, v int) {
		if v <= r.vis {
			return
		}
		switch {
		case r.preempted:
			// Promoted in full at its preemption.
		case r.running:
			a.Name(r.a[r.vis:min(v, len(r.a))])
			for k := r.vis; k < min(v, r.full); k++ {
				a.Commit(r.a[k], r.hashes[k])
			}
		case r.a != nil:
			if done, left, ok := a.RunLeft(r.run); ok {
				var hs []uint64
				for x := int(done); x < min(v-r.j, int(done+left)); x++ {
					hs = append(hs, r.hashes[r.j+x])
				}
				a.Promote(r.run, hs)
				if len(hs) > 0 {
					promotedRuns++
				}
			}
		}
		r.vis = v
	}
	start := func(op int, r *lazyReq) bool {
		hitsA, hitsB, ghost := p.hits(t, op, &r.modelReq)
		ghostHits += ghost
		for _, h := range hitsA[:len(hitsA)-ghost] {
			if a.inTail(h) {
				tailHits++
			}
		}
		if !p.admit(t, op, rng, &r.modelReq, hitsA, hitsB, func(fresh int64) int64 {
			if r.preempted {
				return fresh
			}
			return min(max(int64(r.vis-len(hitsA)), 0), fresh)
		}) {
			return false
		}
		for k := len(hitsA); k < r.full; k++ {
			if k < r.shared || r.preempted {
				b.Commit(r.b[k], r.hashes[k])
			} else {
				b.MarkPrivate(r.b[k])
			}
			if k < r.vis || r.preempted {
				a.Commit(r.a[k], r.hashes[k])
			}
		}
		r.running = true
		return true
	}
	for op := range 40000 {
		switch k := rng.IntN(10); {
		case k < 4: // a request arrives or a preempted one comes back
			var r *lazyReq
			if len(waiting) > 0 && rng.IntN(2) == 0 {
				r, waiting = waiting[0], waiting[1:]
			} else {
				next++
				// Groups come and go: a group's first request
				// is alone for a while.
				g := 8*(op/150) + rng.IntN(8)
				r = &lazyReq{modelReq: modelReq{id: next, size: 1 + rng.IntN(12)}, group: g}
				r.shared = min(rng.IntN(8), r.size)
				for k := range r.size {
					if k < r.shared {
						r.hashes = append(r.hashes, hash(g, k))
					} else {
						r.hashes = append(r.hashes, uint64(next)<<20|uint64(k))
					}
				}
				// Each earlier request of its group and r share
				// their common blocks: both index them.
				for _, q := range groups[g] {
					common := min(q.shared, r.shared)
					promote(q, common)
					r.vis = max(r.vis, common)
				}
				if rng.IntN(8) == 0 {
					r.vis = max(r.vis, rng.IntN(r.shared+1)) // more than needed does no harm
				}
				groups[g] = append(groups[g], r)
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
			r.running = false
			if r.preempted {
				a.Release(r.a, int64(r.full))
			} else {
				r.j = min(r.vis, len(r.a))
				r.run = a.ReleaseRun(r.a, int64(r.full))
			}
			b.Release(r.b, int64(r.full))
		case len(running) > 0: // one is preempted, once
			i := rng.IntN(len(running))
			r := running[i]
			if r.preempted {
				continue
			}
			running = slices.Delete(running, i, i+1)
			r.running = false
			a.Name(r.a)
			for k := r.vis; k < min(r.shared, r.full); k++ {
				a.Commit(r.a[k], r.hashes[k])
			}
			r.vis = r.shared
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
		if a.NumFree() != b.NumFree() || a.Evictions != b.Evictions {
			t.Fatalf("op %d: free %d/%d, evictions %d/%d", op, a.NumFree(), b.NumFree(), a.Evictions, b.Evictions)
		}
		// The hashes the lazy cache indexed are cached in both alike.
		for g := 8 * (op / 150); g < 8*(op/150)+8; g++ {
			for _, q := range groups[g] {
				for k := range q.vis {
					_, oka := a.Lookup(hash(g, k))
					_, okb := b.Lookup(hash(g, k))
					if oka != okb {
						t.Fatalf("op %d: group %d block %d cached %v in the lazy cache, %v in the named one", op, g, k, oka, okb)
					}
				}
			}
		}
		ws := make([]*modelReq, len(waiting))
		for i, r := range waiting {
			ws[i] = &r.modelReq
		}
		p.agree(t, op, ws)
	}
	if rebase && a.compactions < 5 || a.Evictions == 0 || promotedRuns == 0 || tailHits == 0 || ghostHits == 0 {
		t.Fatalf("%d compactions, %d evictions, %d promotions out of runs, %d hits on their tails, %d on private blocks after preemption: the test does not exercise them",
			a.compactions, a.Evictions, promotedRuns, tailHits, ghostHits)
	}
	t.Logf("%d compactions, %d evictions, %d promotions out of runs, %d hits on their tails, %d on private blocks after preemption", a.compactions, a.Evictions, promotedRuns, tailHits, ghostHits)
}

// Promote indexes a whole group of stepped hashes as one entry, as
// CommitAll does, and a group's part as another: a run of three groups
// and five blocks promoted in two parts, the second starting inside a
// group. Every hash is then found, one by one and in bulk alike, at a
// distinct block of the run's tail, the cache passes Check, and evicting
// the run drops every hash.
func TestPromoteWholeGroups(t *testing.T) {
	const n = 3*groupLen + 5
	c := New(n)
	blocks, _ := c.AllocateNamed(nil, n, 0) // anonymous, as a private run's
	r := c.ReleaseRun(blocks, n)
	hs := make([]uint64, n)
	k, s := uint64(0xabc)<<40, contStep // k: a key, its low five bits 0
	for i := range hs {
		hs[i] = k + uint64(i)*s
	}
	c.Promote(r, hs[:groupLen+8])
	c.Promote(r, hs[groupLen+8:])
	mustCheck(t, c)
	// Three whole groups (the second's rest joined its first 8, on one
	// line of ids) and the last 5.
	if c.index.used != 4 {
		t.Errorf("%d index entries, want 4", c.index.used)
	}
	found := make([]int32, n)
	seen := map[int32]bool{}
	for i, h := range hs {
		b, ok := c.Lookup(h)
		if !ok || !c.inTail(b) || seen[b] {
			t.Fatalf("hash %d: block %d %v (in the run's tail: %v; seen: %v)", i, b, ok, ok && c.inTail(b), seen[b])
		}
		found[i], seen[b] = b, true
	}
	if all := c.LookupAll(nil, hs); !slices.Equal(all, found) {
		t.Errorf("LookupAll = %v, one by one %v", all, found)
	}
	if _, ok := c.Allocate(nil, n); !ok || c.NumCached() != 0 {
		t.Errorf("after evicting the run: %d hashes cached", c.NumCached())
	}
	mustCheck(t, c)
}
