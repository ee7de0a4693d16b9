package kvcache

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCacheMatchesReference drives a Cache and refCache, vLLM's block
// pool one block at a time, through the same random requests, as the
// replay's vLLM scheduler drives its cache (replay/vllm.go, lazy
// indexing in replay/prefixlazy.go): requests on a few chains of shared
// blocks, each sharing a prefix of its chain, look their prefix up
// (LookupAll or Lookup), acquire the hits (AcquireAll or Acquire),
// allocate the rest (AllocateNamed: the blocks not indexed yet without
// ids), commit what fills (CommitAll or Commit), and leave (Release, or
// ReleaseRun when they hold anonymous cached blocks); sharers that arrive
// promote the blocks of the requests on their chain (Name and Commit for
// a running one, Promote out of a finished one's run); a request is
// preempted once in a while (Name, CommitPrivate, Release) and hits its
// own private blocks again (Holds) when it comes back, retrying while
// the cache is full (Kept). After every operation the two must agree on
// every observable: the blocks free, the evictions, the blocks indexed,
// which block each hash finds (the same block in both, by the request
// and place it was handed out for), the reference counts of held blocks,
// what preempted requests still hold, and Check; and a blocked request's
// hits stay cached while the queue's head is below the first free one
// and the tail of then (FreeAmong, Renumbers, Head, Tail).
func TestCacheMatchesReference(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		s := cacheMatchesReference(t, 1, 2, 60, 40000)
		if s.freeHits < 1000 || s.tailHits < 100 || s.promoted < 100 || s.ghostHits < 50 || s.evictions < 1000 || s.kept < 100 || s.partial < 100 || s.watched < 100 {
			t.Fatalf("%+v: not exercised", s)
		}
		t.Logf("%+v", s)
	})
	t.Run("rebase", func(t *testing.T) {
		// Positions past 1,000 renumber the queue, runs and all.
		defer func(p int64) { maxPos = p }(maxPos)
		maxPos = 1000
		cacheMatchesReference(t, 3, 4, 40, 20000)
	})
}

// FuzzCacheMatchesReference is TestCacheMatchesReference from other
// seeds and cache sizes (go test ./replay/kvcache -fuzz
// FuzzCacheMatchesReference).
func FuzzCacheMatchesReference(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(60))
	f.Add(uint64(5), uint64(6), uint8(9))
	f.Add(uint64(7), uint64(8), uint8(200))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, blocks uint8) {
		cacheMatchesReference(t, s1, s2, int(blocks), 3000)
	})
}

// A diffReq is one request of the differential test.
type diffReq struct {
	id, chain    int
	hashes       []uint64 // its blocks': its chain's up to shared, its own after
	shared, size int
	full         int // leading full blocks, once admitted
	vis          int // leading blocks indexed once they fill
	c, r         []int32
	ghostC       []int32 // tables at its preemption
	ghostR       []int32
	preempted    bool
	running      bool
	run          FreeRun // once it left unpreempted
	j            int     // the first block of its run
	// The hits its last admission that failed found, for Kept.
	lastC, lastR []int32
	drops        uint64
	since        int64
}

// diffStats counts what a run of the differential test exercised.
type diffStats struct {
	freeHits, tailHits, ghostHits, promoted, partial, kept int
	evictions                                              int64
	// watched counts the ops after which a blocked request's hits
	// were checked still cached (Head below FreeAmong's first
	// position and the Tail of then, Renumbers the same).
	watched int
}

// A hitWatch is a blocked request's hits, their hashes, the lowest queue
// position of the free ones (FreeAmong's), Tail and Renumbers then.
type hitWatch struct {
	blocks      []int32
	hashes      []uint64
	first, tail int64
	renumbers   uint64
}

// diffPair is the cache under test, the reference, and the pairing of
// their blocks: a Cache block with an id and the reference block handed
// out for the same request and place.
type diffPair struct {
	t      *testing.T
	op     int
	c      *Cache
	r      *refCache
	toRef  map[int32]int32
	toC    map[int32]int32
	hashes map[uint64]bool // every hash committed
}

func (p *diffPair) link(bc, br int32) {
	if old, ok := p.toRef[bc]; ok {
		delete(p.toC, old)
	}
	if old, ok := p.toC[br]; ok {
		delete(p.toRef, old)
	}
	p.toRef[bc], p.toC[br] = br, bc
}

// unlink forgets the pairing of reference block br, handed out anew.
func (p *diffPair) unlink(br int32) {
	if bc, ok := p.toC[br]; ok {
		delete(p.toRef, bc)
		delete(p.toC, br)
	}
}

// same checks that Cache block bc is reference block br; a block Promote
// named (the test does not see its id) is paired when first found.
func (p *diffPair) same(bc, br int32, what string) {
	p.t.Helper()
	if x, ok := p.toRef[bc]; ok && x == br {
		return
	} else if ok {
		p.t.Fatalf("op %d: %s: cache block %d is reference block %d, the reference found %d", p.op, what, bc, x, br)
	}
	if x, ok := p.toC[br]; ok {
		p.t.Fatalf("op %d: %s: the cache found block %d, the reference %d, which is cache block %d", p.op, what, bc, br, x)
	}
	p.link(bc, br)
}

func cacheMatchesReference(t *testing.T, s1, s2 uint64, n, ops int) diffStats {
	rng := rand.New(rand.NewPCG(s1, s2))
	p := &diffPair{t: t, c: New(int64(n)), r: newRefCache(n), toRef: map[int32]int32{}, toC: map[int32]int32{}, hashes: map[uint64]bool{}}
	c, ref := p.c, p.r
	var st diffStats
	var watch hitWatch // the last blocked request's free hits
	const chains, chainLen = 4, 24
	var all, running, waiting []*diffReq // all: those that may be promoted
	next := 0

	newReq := func() *diffReq {
		next++
		x := &diffReq{id: next, chain: rng.IntN(chains), size: 1 + rng.IntN(min(chainLen, max(n/2, 2)))}
		x.shared = rng.IntN(x.size + 1)
		for k := range x.size {
			if k < x.shared {
				// Consecutive members of the index's groups
				// (Hash's continuations), from member 0 of
				// one (chain 0: whole groups) or another.
				x.hashes = append(x.hashes, uint64(x.chain+1)<<40|uint64(3*x.chain)+uint64(k)*contStep)
			} else {
				x.hashes = append(x.hashes, 1<<62|uint64(x.id)<<16|uint64(k))
			}
		}
		return x
	}

	// raise makes q index its first v blocks, for a sharer.
	raise := func(q *diffReq, v int) {
		v = min(v, q.shared)
		if v <= q.vis || q.preempted {
			return
		}
		from := q.vis
		q.vis = v
		switch {
		case q.running:
			end := min(v, len(q.c))
			before := slices.Clone(q.c[from:end])
			c.Name(q.c[from:end])
			for i, b := range before {
				if b == Anonymous {
					p.link(q.c[from+i], q.r[from+i])
				}
			}
			for k := from; k < min(v, q.full); k++ {
				c.Commit(q.c[k], q.hashes[k])
				ref.commit(q.r[k], q.hashes[k])
				p.hashes[q.hashes[k]] = true
			}
		case q.c != nil: // left, with a run
			done, left, ok := c.RunLeft(q.run)
			if !ok {
				return
			}
			m := min(int64(v-q.j), done+left) - done
			if m <= 0 {
				return
			}
			lo := q.j + int(done)
			hs := q.hashes[lo : lo+int(m)]
			c.Promote(q.run, hs)
			for x, h := range hs {
				ref.promote(q.r[lo+x], h)
				p.hashes[h] = true
			}
			st.promoted += int(m)
			if int(m) < len(q.hashes)-lo {
				st.partial++
			}
		}
	}

	// hits walks x's blocks as vllm.walk does, in both.
	hits := func(x *diffReq) (hc, hr []int32) {
		maxBlocks := x.size - 1
		shared := min(maxBlocks, x.shared)
		if rng.IntN(2) == 0 {
			hc = c.LookupAll(hc, x.hashes[:shared])
		} else {
			for _, h := range x.hashes[:shared] {
				b, ok := c.Lookup(h)
				if !ok {
					break
				}
				hc = append(hc, b)
			}
		}
		for _, h := range x.hashes[:shared] {
			b, ok := ref.lookup(h)
			if !ok {
				break
			}
			hr = append(hr, b)
		}
		if len(hc) != len(hr) {
			t.Fatalf("op %d: request %d hits %d blocks in the cache, %d in the reference", p.op, x.id, len(hc), len(hr))
		}
		for i := range hc {
			p.same(hc[i], hr[i], "a prefix hit")
		}
		if len(hc) < shared || !x.preempted {
			return hc, hr
		}
		for k := shared; k < maxBlocks; k++ {
			h := x.hashes[k]
			var bc, br int32
			var okc, okr bool
			if k < len(x.ghostC) && ref.holds(x.ghostR[k], h) {
				if !c.Holds(x.ghostC[k], h) {
					t.Fatalf("op %d: request %d's block %d held in the reference only", p.op, x.id, k)
				}
				bc, br, okc, okr = x.ghostC[k], x.ghostR[k], true, true
				st.ghostHits++
			} else {
				if k < len(x.ghostC) && c.Holds(x.ghostC[k], h) {
					t.Fatalf("op %d: request %d's block %d held in the cache only", p.op, x.id, k)
				}
				bc, okc = c.Lookup(h)
				br, okr = ref.lookup(h)
			}
			if okc != okr {
				t.Fatalf("op %d: request %d's block %d found %v in the cache, %v in the reference", p.op, x.id, k, okc, okr)
			}
			if !okc {
				break
			}
			p.same(bc, br, "a hit after preemption")
			hc, hr = append(hc, bc), append(hr, br)
		}
		return hc, hr
	}

	// start admits x if it fits, as vllm.build does.
	start := func(x *diffReq) bool {
		if x.lastC != nil {
			kc, kr := c.Kept(x.lastC, x.drops), ref.kept(x.lastR, x.since)
			if kc != kr {
				t.Fatalf("op %d: Kept %d of request %d's last hits, the reference %d", p.op, kc, x.id, kr)
			}
			st.kept += kc
		}
		hc, hr := hits(x)
		fresh := x.size - len(hc)
		need := fresh
		for i, b := range hc {
			if c.Ref(b) != ref.ref[hr[i]] {
				t.Fatalf("op %d: hit block %d has %d references, the reference's %d", p.op, b, c.Ref(b), ref.ref[hr[i]])
			}
			if c.Ref(b) == 0 {
				need++
			}
		}
		nfree, first := c.FreeAmong(hc, math.MaxInt64)
		if nfree != int64(need-fresh) {
			t.Fatalf("op %d: FreeAmong %d of the hits, the references say %d", p.op, nfree, need-fresh)
		}
		if most := int64(p.op % (len(hc) + 1)); func() bool { n, _ := c.FreeAmong(hc, most); return n > most }() != (int64(need-fresh) > most) {
			t.Fatalf("op %d: FreeAmong of the hits up to %d, the references say %d", p.op, most, need-fresh)
		}
		if int64(need) > c.NumFree() {
			x.lastC, x.lastR, x.drops, x.since = hc, hr, c.Drops(), ref.evictions
			watch = hitWatch{blocks: slices.Clone(hc), hashes: x.hashes[:len(hc)], first: first, tail: c.Tail(), renumbers: c.Renumbers()}
			free := false
			for _, b := range hc {
				free = free || c.Ref(b) == 0
			}
			if (first == math.MaxInt64) == free {
				t.Fatalf("op %d: FreeAmong's first position %d, free hits %v", p.op, first, free)
			}
			return false
		}
		x.lastC, x.lastR = nil, nil
		for i, b := range hc {
			if ref.ref[hr[i]] == 0 {
				st.freeHits++
				if c.inTail(b) {
					st.tailHits++ // free in a run's tail
				}
			}
		}
		if rng.IntN(2) == 0 {
			c.AcquireAll(hc)
		} else {
			for _, b := range hc {
				c.Acquire(b)
			}
		}
		for _, b := range hr {
			ref.acquire(b)
		}
		named := fresh
		if !x.preempted {
			named = min(max(x.vis-len(hc), 0), fresh)
		}
		var ok bool
		x.c, ok = c.AllocateNamed(append(x.c[:0], hc...), int64(fresh), int64(named))
		if !ok {
			t.Fatalf("op %d: allocation of %d failed with %d free", p.op, fresh, c.NumFree())
		}
		got, ok := ref.allocate(fresh)
		if !ok {
			t.Fatalf("op %d: the reference's allocation failed", p.op)
		}
		for _, b := range got {
			p.unlink(b)
		}
		x.r = append(append(x.r[:0], hr...), got...)
		for i := len(hc); i < len(hc)+named; i++ {
			p.link(x.c[i], x.r[i])
		}
		x.full = x.size - rng.IntN(2)
		// Fill: the indexed blocks by CommitAll or Commit, the others
		// privately (anonymous in the cache).
		k := len(hc)
		if end := min(x.full, max(x.vis, k)); !x.preempted && k < end {
			if rng.IntN(2) == 0 {
				c.CommitAll(x.c[k:end], x.hashes[k:end])
			} else {
				for i := k; i < end; i++ {
					c.Commit(x.c[i], x.hashes[i])
				}
			}
			for i := k; i < end; i++ {
				ref.commit(x.r[i], x.hashes[i])
				p.hashes[x.hashes[i]] = true
			}
			k = end
		}
		for ; k < x.full; k++ {
			if x.preempted {
				c.Commit(x.c[k], x.hashes[k])
				ref.commit(x.r[k], x.hashes[k])
				p.hashes[x.hashes[k]] = true
			} else {
				ref.commitPrivate(x.r[k], x.hashes[k])
			}
		}
		x.running = true
		return true
	}

	arrive := func(x *diffReq) {
		// Sharers on its chain index what they share with it, and
		// it what it shares with them.
		for _, q := range all {
			if q.chain == x.chain && q != x {
				common := min(q.shared, x.shared)
				raise(q, common)
				x.vis = max(x.vis, common)
			}
		}
		all = append(all, x)
		if len(all) > 24 {
			all = all[1:]
		}
	}

	for op := range ops {
		p.op = op
		// A blocked request's hits stay cached while the queue was not
		// renumbered and its head is below the first free one and the
		// tail of then (what vllm.match and vllm.blockedFront rely on).
		if watch.blocks != nil && c.Renumbers() == watch.renumbers && c.Head() < min(watch.first, watch.tail) {
			for i, b := range watch.blocks {
				if !c.Holds(b, watch.hashes[i]) {
					t.Fatalf("op %d: hit block %d lost its hash (first free hit at %d, tail %d then, head %d now)", op, b, watch.first, watch.tail, c.Head())
				}
			}
			st.watched++
		}
		switch k := rng.IntN(20); {
		case k < 7: // a request arrives, or a waiting one is retried
			var x *diffReq
			if len(waiting) > 0 && rng.IntN(2) == 0 {
				x = waiting[0]
			} else {
				x = newReq()
				arrive(x)
				waiting = append(waiting, x)
			}
			if start(x) {
				waiting = slices.DeleteFunc(waiting, func(q *diffReq) bool { return q == x })
				running = append(running, x)
			}
		case k < 15 && len(running) > 0: // one leaves
			i := rng.IntN(len(running))
			x := running[i]
			running = slices.Delete(running, i, i+1)
			x.running = false
			if !x.preempted {
				x.run = c.ReleaseRun(x.c, int64(x.full))
				x.j = slices.Index(x.c, Anonymous)
				if x.j < 0 {
					x.j = len(x.c)
				}
			} else {
				c.Release(x.c, int64(x.full))
			}
			ref.release(x.r)
		case k < 17 && len(running) > 0: // one is preempted
			i := rng.IntN(len(running))
			x := running[i]
			if x.preempted {
				continue
			}
			running = slices.Delete(running, i, i+1)
			x.running = false
			before := slices.Clone(x.c)
			c.Name(x.c)
			for i, b := range before {
				if b == Anonymous {
					p.link(x.c[i], x.r[i])
				}
			}
			for k := x.vis; k < min(x.shared, x.full); k++ {
				c.Commit(x.c[k], x.hashes[k])
				ref.commit(x.r[k], x.hashes[k])
				p.hashes[x.hashes[k]] = true
			}
			x.vis = x.shared
			for k := x.shared; k < x.full; k++ {
				c.CommitPrivate(x.c[k], x.hashes[k])
			}
			c.Release(x.c, int64(x.full))
			ref.release(x.r)
			x.ghostC, x.ghostR = slices.Clone(x.c), slices.Clone(x.r)
			x.c, x.r = x.c[:0], x.r[:0]
			x.preempted = true
			waiting = append([]*diffReq{x}, waiting...)
		default: // a waiting request is retried
			if len(waiting) > 0 {
				x := waiting[rng.IntN(len(waiting))]
				if start(x) {
					waiting = slices.DeleteFunc(waiting, func(q *diffReq) bool { return q == x })
					running = append(running, x)
				}
			}
		}
		p.agree(running, waiting)
	}
	st.evictions = c.Evictions
	return st
}

// agree checks every observable of the two.
func (p *diffPair) agree(running, waiting []*diffReq) {
	t, c, ref := p.t, p.c, p.r
	t.Helper()
	if c.NumFree() != int64(len(ref.free)) || c.Evictions != ref.evictions || c.NumCached() != ref.cached() {
		t.Fatalf("op %d: free %d, evictions %d, cached %d; the reference %d, %d, %d",
			p.op, c.NumFree(), c.Evictions, c.NumCached(), len(ref.free), ref.evictions, ref.cached())
	}
	for h := range p.hashes {
		bc, okc := c.Lookup(h)
		br, okr := ref.lookup(h)
		if okc != okr {
			t.Fatalf("op %d: hash %#x found %v in the cache, %v in the reference", p.op, h, okc, okr)
		}
		if okc {
			p.same(bc, br, "a lookup")
		}
	}
	for _, x := range running {
		for i, b := range x.c {
			if b != Anonymous && c.Ref(b) != ref.ref[x.r[i]] {
				t.Fatalf("op %d: request %d's block %d has %d references, the reference's %d", p.op, x.id, i, c.Ref(b), ref.ref[x.r[i]])
			}
		}
	}
	for _, x := range waiting {
		for k := x.shared; k < len(x.ghostC); k++ {
			if c.Holds(x.ghostC[k], x.hashes[k]) != ref.holds(x.ghostR[k], x.hashes[k]) {
				t.Fatalf("op %d: request %d's private block %d held in one only", p.op, x.id, k)
			}
		}
	}
	if err := c.Check(); err != nil {
		t.Fatalf("op %d: %v", p.op, err)
	}
}
