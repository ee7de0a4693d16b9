package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBulkMatchesOneByOne drives two caches through the same random
// requests: one looks up, commits and acquires a stretch of blocks with
// LookupAll, CommitAll and AcquireAll, the other block by block with
// Lookup, Commit and Acquire. Requests share prefixes of a few chains
// (duplicates too: two requests may commit one hash), hit blocks that
// are referenced, free in the queue or promoted into a run's tail, and
// leave; after every operation the two caches must agree on every
// observable and on their free queues, block by block (the runs they
// keep differ: Acquire makes a run of each block), and pass Check.
func TestBulkMatchesOneByOne(t *testing.T) {
	looked, committed, acquired, tailHits := bulkMatchesOneByOne(t, 11, 12, 30000, 96)
	if looked < 1000 || committed < 1000 || acquired < 1000 || tailHits < 30 {
		t.Fatalf("%d blocks looked up, %d committed, %d acquired, %d out of runs' tails: not exercised", looked, committed, acquired, tailHits)
	}
	t.Logf("%d blocks looked up, %d committed, %d acquired (%d out of runs' tails)", looked, committed, acquired, tailHits)
}

// FuzzBulkMatchesOneByOne is TestBulkMatchesOneByOne from other seeds
// and cache sizes (go test -fuzz FuzzBulkMatchesOneByOne).
func FuzzBulkMatchesOneByOne(f *testing.F) {
	f.Add(uint64(11), uint64(12), uint8(96))
	f.Add(uint64(1), uint64(2), uint8(8))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, blocks uint8) {
		bulkMatchesOneByOne(t, s1, s2, 2000, int64(blocks))
	})
}

// A bulkReq is a request of bulkMatchesOneByOne.
type bulkReq struct {
	chain  []uint64
	blocks []int32 // identical in a and b
	run    FreeRun // its run, once it left with anonymous blocks
	hashed int64
}

// sameCaches checks that caches a and b agree on every observable: the
// counts, which block each hash of chains finds, the references of the
// live requests' blocks, the gone requests' runs, and the free queue,
// block by block in eviction order (freeOrder).
func sameCaches(t *testing.T, op int, a, b *Cache, chains [][]uint64, live, gone []*bulkReq) {
	t.Helper()
	if a.NumFree() != b.NumFree() || a.Evictions != b.Evictions || a.Drops() != b.Drops() || a.NumCached() != b.NumCached() {
		t.Fatalf("op %d: free %d, %d; evictions %d, %d; drops %d, %d; cached %d, %d", op, a.NumFree(), b.NumFree(), a.Evictions, b.Evictions, a.Drops(), b.Drops(), a.NumCached(), b.NumCached())
	}
	for _, ch := range chains {
		for _, h := range ch {
			x, okx := a.Lookup(h)
			y, oky := b.Lookup(h)
			if x != y || okx != oky {
				t.Fatalf("op %d: hash %#x finds %d %v, %d %v", op, h, x, okx, y, oky)
			}
		}
	}
	for _, r := range live {
		for _, x := range r.blocks {
			if x != Anonymous && a.Ref(x) != b.Ref(x) {
				t.Fatalf("op %d: block %d has %d references, %d", op, x, a.Ref(x), b.Ref(x))
			}
		}
	}
	for _, r := range gone {
		d1, l1, ok1 := a.RunLeft(r.run)
		d2, l2, ok2 := b.RunLeft(r.run)
		if d1 != d2 || l1 != l2 || ok1 != ok2 {
			t.Fatalf("op %d: run %v left %d %d %v, %d %d %v", op, r.run, d1, l1, ok1, d2, l2, ok2)
		}
	}
	if fa, fb := freeOrder(a), freeOrder(b); !slices.Equal(fa, fb) {
		t.Fatalf("op %d: free queues %v, %v", op, fa, fb)
	}
}

// freeOrder lists c's free blocks in eviction order: a block with an id
// as its id, an anonymous one as −1 (uncached) or −2 (cached).
func freeOrder(c *Cache) []int32 {
	var out []int32
	evictOrder := func(x int32) {
		sp := c.spans[x]
		var ids []int32
		for b := sp.lo; b < sp.hi; {
			r := c.recs[b]
			if r.ref == 0 && r.span == x {
				for y := b; y < b+r.n; y++ {
					ids = append(ids, y)
				}
			}
			b += r.n
		}
		if !sp.up {
			slices.Reverse(ids)
		}
		out = append(out, ids...)
	}
	mask := int64(len(c.ring) - 1)
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		switch {
		case e == tombstone:
		case e&runEntry != 0:
			ru := c.runs[e&^runEntry]
			for range ru.uncached {
				out = append(out, -1)
			}
			for range ru.cached {
				out = append(out, -2)
			}
			for i := len(ru.tail) - 1; i >= 0; i-- {
				evictOrder(ru.tail[i])
			}
		default:
			evictOrder(int32(e))
		}
	}
	return out
}

// bulkMatchesOneByOne runs ops random operations on two caches of n
// blocks from the seeds, and returns how many blocks were looked up,
// committed, acquired, and acquired out of a run's tail.
func bulkMatchesOneByOne(t *testing.T, s1, s2 uint64, ops int, n int64) (looked, committed, acquired, tailHits int) {
	rng := rand.New(rand.NewPCG(s1, s2))
	a, b := New(n), New(n)
	chains := make([][]uint64, 4)
	for i := range chains {
		// Mostly the next member of the previous hash's group (the
		// index's stretches: Hash's continuations), at times a hash
		// of its own.
		for k := range 24 {
			h := uint64(i+1)<<40 | uint64(k+1)<<8 | uint64(rng.IntN(2)*rng.IntN(8))
			if k > 0 && rng.IntN(8) != 0 {
				h = chains[i][k-1] + contStep
			}
			chains[i] = append(chains[i], h)
		}
	}
	type req = bulkReq
	var live, gone []*req
	promote := func(r *req, all bool) {
		done, left, ok := a.RunLeft(r.run)
		if !ok || left == 0 {
			return
		}
		first := slices.Index(r.blocks, Anonymous)
		m := left
		if !all {
			m = 1 + rng.Int64N(left)
		}
		hs := r.chain[int64(first)+done : int64(first)+done+m]
		a.Promote(r.run, hs)
		b.Promote(r.run, hs)
	}
	for op := range ops {
		switch k := rng.IntN(10); {
		case k < 4: // a request arrives: prefix hits, then fresh blocks
			r := &req{chain: chains[rng.IntN(len(chains))]}
			n := 1 + rng.IntN(len(r.chain))
			// As a sharer arrives, a gone request of its chain
			// promotes its anonymous blocks (lazy indexing).
			for _, g := range gone {
				if &g.chain[0] == &r.chain[0] {
					promote(g, true)
				}
			}
			ha := a.LookupAll(nil, r.chain[:n])
			var hb []int32
			for _, h := range r.chain[:n] {
				x, ok := b.Lookup(h)
				if !ok {
					break
				}
				hb = append(hb, x)
			}
			if !slices.Equal(ha, hb) {
				t.Fatalf("op %d: LookupAll %v, Lookup one by one %v", op, ha, hb)
			}
			looked += len(ha)
			for _, x := range hb {
				if b.inTail(x) {
					tailHits++
				}
			}
			fresh := int64(n - len(ha))
			need := fresh
			for _, x := range ha {
				if a.Ref(x) == 0 {
					need++ // it leaves the free queue
				}
			}
			if need > a.NumFree() {
				continue
			}
			a.AcquireAll(ha)
			for _, x := range hb {
				b.Acquire(x)
			}
			acquired += len(ha)
			// Some of its fresh blocks are anonymous (private,
			// or shared blocks not indexed yet).
			named := rng.Int64N(fresh + 1)
			r.blocks, _ = a.AllocateNamed(ha, fresh, named)
			tb, _ := b.AllocateNamed(slices.Clone(hb), fresh, named)
			if !slices.Equal(r.blocks, tb) {
				t.Fatalf("op %d: allocations differ: %v, %v", op, r.blocks, tb)
			}
			// Commit its named blocks' hashes.
			end := len(ha) + int(named)
			a.CommitAll(r.blocks[:end], r.chain[:end])
			for i, x := range r.blocks[:end] {
				b.Commit(x, r.chain[i])
			}
			committed += end
			r.hashed = int64(n)
			live = append(live, r)
		case k < 7 && len(live) > 0: // a request leaves
			i := rng.IntN(len(live))
			r := live[i]
			live = slices.Delete(live, i, i+1)
			r.run = a.ReleaseRun(r.blocks, r.hashed)
			if rb := b.ReleaseRun(r.blocks, r.hashed); rb != r.run {
				t.Fatalf("op %d: runs %v, %v", op, r.run, rb)
			}
			gone = append(gone, r)
			if len(gone) > 16 {
				gone = gone[1:]
			}
		case len(gone) > 0: // a gone request's blocks are promoted
			promote(gone[rng.IntN(len(gone))], false)
		}
		sameCaches(t, op, a, b, chains, live, gone)
		mustCheck(t, a)
	}
	return looked, committed, acquired, tailHits
}

// TestKeptKeepsAnswers drives a cache through random allocations,
// commits (duplicates among them: some requests do not look up what they
// compute) and releases, and checks Kept's
// promise: for the hits a walk along a chain found at some earlier time,
// the first Kept of them are still what Lookup returns, however many
// hashes the cache dropped since; and that Kept keeps hits across drops,
// so the check is exercised.
func TestKeptKeepsAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	c := New(48)
	chains := make([][]uint64, 6)
	for i := range chains {
		for k := range 16 {
			chains[i] = append(chains[i], uint64(i+1)<<40|uint64(k+1))
		}
	}
	walk := func(ch []uint64) []int32 { return c.LookupAll(nil, ch) }
	type seen struct {
		chain []uint64
		hits  []int32
		drops uint64
	}
	var snaps []seen
	var tables [][]int32
	var keptAfterDrop, checks int
	for op := range 20000 {
		switch k := rng.IntN(10); {
		case k < 4:
			ch := chains[rng.IntN(len(chains))]
			n := 1 + rng.IntN(len(ch))
			var hits []int32
			if rng.IntN(3) > 0 { // else it computes what it could hit: duplicates
				hits = walk(ch[:n])
			}
			need := int64(n - len(hits))
			for _, x := range hits {
				if c.Ref(x) == 0 {
					need++
				}
			}
			if need > c.NumFree() {
				continue
			}
			c.AcquireAll(hits)
			tb, _ := c.Allocate(hits, int64(n-len(hits)))
			c.CommitAll(tb, ch[:n])
			tables = append(tables, tb)
		case k < 8 && len(tables) > 0:
			i := rng.IntN(len(tables))
			c.Release(tables[i], int64(len(tables[i])))
			tables = slices.Delete(tables, i, i+1)
		default:
			ch := chains[rng.IntN(len(chains))]
			snaps = append(snaps, seen{ch, walk(ch), c.Drops()})
			if len(snaps) > 20 {
				snaps = snaps[1:]
			}
		}
		for _, s := range snaps {
			kept := c.Kept(s.hits, s.drops)
			now := walk(s.chain)
			if kept > len(now) || !slices.Equal(now[:kept], s.hits[:kept]) {
				t.Fatalf("op %d: Kept %d of %v (drops %d, now %d), but Lookup finds %v", op, kept, s.hits, s.drops, c.Drops(), now)
			}
			checks++
			if kept > 0 && s.drops != c.Drops() {
				keptAfterDrop++
			}
		}
	}
	mustCheck(t, c)
	if keptAfterDrop < 1000 {
		t.Fatalf("%d of %d checks kept hits across drops: not exercised", keptAfterDrop, checks)
	}
}

// A whole group committed on a line of ids, ascending or descending
// (CommitAll's one insert), or past a group's end, is what committing
// its blocks one by one gives: the same lookups, a consistent cache, and
// every hash gone once its blocks are evicted.
func TestCommitAllLines(t *testing.T) {
	for _, c := range []struct {
		name  string
		first uint64 // the first hash's low bits: its member
		desc  bool
		n     int
	}{
		{"ascending group", 0x1000, false, groupLen},
		{"descending group", 0x1000, true, groupLen},
		{"descending groups", 0x1000, true, 3 * groupLen},
		{"ascending across groups", 0x1003, false, 2 * groupLen},
		{"descending across groups", 0x1005, true, 2*groupLen + 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A cache of the table's size: a descending run is what
			// evicting a freed ascending one hands out.
			size := int64(c.n)
			a, b := New(size), New(size)
			table := func(x *Cache) []int32 {
				tx, _ := x.Allocate(nil, size)
				if c.desc {
					x.Release(tx, 0)
					tx, _ = x.Allocate(nil, size)
				}
				return tx
			}
			ta, tb := table(a), table(b)
			if c.desc != (ta[0] > ta[1]) {
				t.Fatalf("table %v", ta)
			}
			hs := []uint64{7<<40 | c.first}
			for len(hs) < c.n {
				hs = append(hs, hs[len(hs)-1]+contStep)
			}
			a.CommitAll(ta, hs)
			for i, h := range hs {
				b.Commit(tb[i], h)
			}
			mustCheck(t, a)
			if got, want := a.LookupAll(nil, hs), b.LookupAll(nil, hs); !slices.Equal(got, want) || !slices.Equal(got, ta) {
				t.Fatalf("lookups %v, one by one %v, table %v", got, want, ta)
			}
			if a.NumCached() != c.n {
				t.Fatalf("%d cached, want %d", a.NumCached(), c.n)
			}
			// Freed, a descending run is evicted upward, an
			// ascending one downward.
			a.Release(ta, int64(c.n))
			mustCheck(t, a)
			a.Allocate(nil, size)
			mustCheck(t, a)
			if a.NumCached() != 0 || len(a.LookupAll(nil, hs)) != 0 {
				t.Fatalf("%d cached after evicting every block", a.NumCached())
			}
		})
	}
}

// A lookup that finds a member of a group in a key's later entry goes on
// along that entry's line only for the members no earlier entry of the
// key holds: an earlier entry holds the earliest copies of its members
// (index.get), here members 5 … 31 of a group whose 0 … 4 were evicted.
func TestLookupAllEarlierEntries(t *testing.T) {
	x := newIndex(1024)
	k := uint64(0xabcdef01_00000400) // a key: its low five bits 0
	x.insert(k, line(205, 5, groupLen-5, false))
	x.insert(k, line(300, 0, groupLen, false))
	c := contStep
	hs := make([]uint64, groupLen)
	want := make([]int32, groupLen)
	for j := range hs {
		hs[j] = k + uint64(j)*c
		want[j] = 300 + int32(j)
		if j >= 5 {
			want[j] = 200 + int32(j)
		}
		if b, ok := x.get(hs[j]); !ok || b != want[j] {
			t.Fatalf("get member %d: %d %v, want %d", j, b, ok, want[j])
		}
	}
	got := make([]int32, groupLen)
	if n := lookupAll(got, hs, x.slots, x.mask, false); n != groupLen || !slices.Equal(got, want) {
		t.Errorf("lookupAll = %d %v, want %v", n, got, want)
	}
}

// TestGroupHelpers checks onLine, recordedAny and setFlags, which look
// at a group's 31 or 32 blocks a word at a time, against a block at a
// time: lines up and down broken at every place, flags recorded at every
// place.
func TestGroupHelpers(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	for range 20000 {
		d := int32(1)
		if rng.IntN(2) == 0 {
			d = -1
		}
		b := int32(rng.IntN(100))
		var bl [groupLen - 1]int32
		for i := range bl {
			bl[i] = b + d*int32(i+1)
		}
		if rng.IntN(3) != 0 {
			bl[rng.IntN(len(bl))] += int32(1 + rng.IntN(3))
		}
		want := true
		for i := range bl {
			want = want && bl[i] == b+d*int32(i+1)
		}
		if got := onLine(&bl, b, d); got != want {
			t.Fatalf("onLine(%v, %d, %d) = %v, want %v", bl, b, d, got, want)
		}
		fl := make([]uint8, groupLen)
		for range rng.IntN(3) {
			fl[rng.IntN(groupLen)] = uint8(rng.IntN(8))
		}
		var rec uint64
		for _, f := range fl {
			rec |= uint64(f & fRecorded)
		}
		if got := recordedAny(fl); (got != 0) != (rec != 0) {
			t.Fatalf("recordedAny(%v) = %#x", fl, got)
		}
		f := uint8(rng.IntN(8))
		setFlags(fl, f)
		for i, g := range fl {
			if g != f {
				t.Fatalf("setFlags(%d): flag %d is %d", f, i, g)
			}
		}
	}
}
