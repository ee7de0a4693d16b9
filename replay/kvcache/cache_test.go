package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func mustCheck(t *testing.T, c *Cache) {
	t.Helper()
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestAllocateReleaseLRU(t *testing.T) {
	c := New(4)
	a, ok := c.Allocate(nil, 2) // blocks 0, 1
	if !ok || a[0] != 0 || a[1] != 1 {
		t.Fatalf("Allocate = %v %v", a, ok)
	}
	c.Commit(a[0], 100)
	c.Commit(a[1], 101)
	if c.NumFree() != 2 || c.NumUsed() != 2 {
		t.Fatalf("free %d used %d", c.NumFree(), c.NumUsed())
	}
	if _, ok := c.Allocate(nil, 3); ok {
		t.Fatal("allocated 3 of 2 free blocks")
	}
	mustCheck(t, c)
	c.Release(a, 0) // queue: 2 3 1 0 (released last block first)
	mustCheck(t, c)
	if b, ok := c.Lookup(100); !ok || b != 0 {
		t.Fatalf("freed block lost its hash: %d %v", b, ok)
	}
	// Taking three blocks evicts 2, 3 (uncached) and then 1, the tail
	// block of the freed request, before its head block 0.
	got, ok := c.Allocate(nil, 3)
	if !ok || got[0] != 2 || got[1] != 3 || got[2] != 1 {
		t.Fatalf("Allocate = %v", got)
	}
	if _, ok := c.Lookup(101); ok || c.Evictions != 1 {
		t.Fatalf("block 1 not evicted (evictions %d)", c.Evictions)
	}
	if b, ok := c.Lookup(100); !ok || b != 0 || c.Ref(0) != 0 {
		t.Fatal("block 0 should still be cached and free")
	}
	c.Acquire(0) // a prefix hit on a free block takes it out of the queue
	if c.NumFree() != 0 {
		t.Fatalf("free %d after hit", c.NumFree())
	}
	c.Acquire(0) // a second sharer
	mustCheck(t, c)
	c.Release([]int32{0}, 0)
	if c.NumFree() != 0 {
		t.Fatal("shared block freed while still referenced")
	}
	c.Release([]int32{0}, 0)
	c.Release(got, 0)
	if c.NumFree() != 4 {
		t.Fatalf("free %d, want 4", c.NumFree())
	}
	mustCheck(t, c)
}

func TestCommitDuplicate(t *testing.T) {
	c := New(3)
	a, _ := c.Allocate(nil, 3)
	c.Commit(a[0], 7)
	c.Commit(a[1], 7)
	if b, _ := c.Lookup(7); b != a[0] || c.NumCached() != 2 {
		t.Fatalf("Lookup = %d, %d cached; want the first of two", b, c.NumCached())
	}
	mustCheck(t, c)
	c.Release(a[:1], 0)
	c.Allocate(nil, 1) // evicts a[0]: a[1] still holds 7
	if b, ok := c.Lookup(7); !ok || b != a[1] {
		t.Fatalf("after evicting the first, Lookup = %d %v", b, ok)
	}
	mustCheck(t, c)
}

func TestCommitPrivate(t *testing.T) {
	c := New(2)
	a, _ := c.Allocate(nil, 2)
	c.CommitPrivate(a[0], 9)
	if _, ok := c.Lookup(9); ok || !c.Holds(a[0], 9) || c.NumCached() != 0 {
		t.Fatal("a private block must be held but not indexed")
	}
	mustCheck(t, c)
	c.Release(a, 0)
	if !c.Holds(a[0], 9) {
		t.Fatal("a freed private block keeps its content")
	}
	got, _ := c.Allocate(nil, 2) // evicts both
	if c.Holds(a[0], 9) || c.Evictions != 1 {
		t.Fatalf("private block not evicted (evictions %d)", c.Evictions)
	}
	c.Release(got, 0)
	mustCheck(t, c)
}

func chain(h *BlockHasher, n int64) []uint64 {
	out := make([]uint64, n)
	prev := Root
	for k := range n {
		prev, _ = h.Hash(prev, k)
		out[k] = prev
	}
	return out
}

func TestHasherSharesEqualPrefixes(t *testing.T) {
	// Two Mooncake-style requests: 512-token trace blocks, the first two
	// shared; engine blocks of 16 tokens.
	a := &BlockHasher{HashIDs: []int64{0, 1, 2}, TraceBlock: 512, PromptTokens: 1500, EngineBlock: 16, Unique: 1, SharedIDs: 3}
	b := &BlockHasher{HashIDs: []int64{0, 1, 9}, TraceBlock: 512, PromptTokens: 1536, EngineBlock: 16, Unique: 2, SharedIDs: 3}
	ha, hb := chain(a, 96), chain(b, 96)
	for k := range 64 {
		if ha[k] != hb[k] {
			t.Fatalf("block %d differs inside the shared prefix", k)
		}
	}
	for k := 64; k < 96; k++ {
		if ha[k] == hb[k] {
			t.Fatalf("block %d equal after the prefixes diverge", k)
		}
	}
	// a's prompt ends at 1500: block 93 (tokens 1488..1503) runs past it,
	// so it and every later block are unique to a.
	c := *a
	c.Unique = 3
	hc := chain(&c, 96)
	if ha[92] != hc[92] || ha[93] == hc[93] {
		t.Fatal("blocks past the prompt must be per-request")
	}
	seen := map[uint64]bool{}
	for _, h := range ha {
		if h == 0 || seen[h] {
			t.Fatalf("hash %#x zero or repeated within a chain", h)
		}
		seen[h] = true
	}
}

// Inside a trace block a shared block's hash steps from the one before
// (consecutive low halves inside a group of slotRun; from a group's last
// member to the first of the group whose home slot is the one before),
// as long as its groups start at multiples of slotRun;
// a trace block's first block starts elsewhere, and so does a block at a
// multiple of slotRun after a group cut short (a trace block that starts
// inside a group). Private blocks step in runs of slotRun.
func TestHasherConsecutiveSlots(t *testing.T) {
	for _, c := range []struct {
		trace, shared int64 // engine blocks a trace block, shared trace blocks
	}{
		{4 * slotRun, 2},     // Mooncake's 512 tokens of 16-token blocks
		{slotRun + 4, 3},     // trace blocks starting inside groups
		{2*slotRun + 3, 2},   // and private blocks too
		{slotRun, 4},         // a group a trace block
		{3 * slotRun / 2, 5}, // every other one starting inside one
	} {
		h := &BlockHasher{HashIDs: []int64{4, 5, 6, 7, 8, 9}, TraceBlock: c.trace * 16, PromptTokens: 6 * c.trace * 16, EngineBlock: 16, Unique: 1, SharedIDs: int(c.shared)}
		hs := chain(h, 6*c.trace)
		shared := c.shared * c.trace
		var member uint64 // of block k−1 in its group
		for k := int64(1); k < int64(len(hs)); k++ {
			var stepped bool
			switch {
			case k >= shared:
				stepped = k%slotRun != 0 && k > shared
			case k%c.trace == 0:
				stepped = false
			case k%slotRun != 0:
				stepped = true
			default:
				stepped = member == slotRun-1
			}
			if stepped {
				member = (member + 1) % slotRun
			} else {
				member = 0
			}
			want := uint32(1)
			if k%slotRun == 0 {
				back := contBack
				want = -uint32(back) // contBack's low half, back
			}
			if got := uint32(hs[k])-uint32(hs[k-1]) == want; got != stepped {
				t.Errorf("trace block of %d, %d shared: block %d: low half %#x after %#x, want stepped %v", c.trace, c.shared, k, uint32(hs[k]), uint32(hs[k-1]), stepped)
			}
			if k < shared && hs[k]&(slotRun-1) != member {
				t.Errorf("trace block of %d, %d shared: block %d is member %d, want %d", c.trace, c.shared, k, hs[k]&(slotRun-1), member)
			}
		}
	}
}

func TestHasherWithoutHashIDs(t *testing.T) {
	a := &BlockHasher{PromptTokens: 64, EngineBlock: 16, Unique: 1}
	b := &BlockHasher{PromptTokens: 64, EngineBlock: 16, Unique: 2}
	if chain(a, 4)[0] == chain(b, 4)[0] {
		t.Fatal("requests without hash_ids share a block")
	}
	again := &BlockHasher{PromptTokens: 64, EngineBlock: 16, Unique: 1}
	if chain(a, 4)[3] != chain(again, 4)[3] {
		t.Fatal("hashes not deterministic")
	}
}

func first(h *BlockHasher) uint64 {
	x, _ := h.Hash(Root, 0)
	return x
}

func TestHasherPrivate(t *testing.T) {
	// Ids 0 and 1 are shared, 2 is not: blocks of trace block 2 and
	// everything past the prompt are private.
	h := &BlockHasher{HashIDs: []int64{0, 1, 2}, TraceBlock: 32, PromptTokens: 96, EngineBlock: 16, Unique: 1, SharedIDs: 2}
	prev := Root
	for k, want := range []bool{false, false, false, false, true, true, true} {
		var priv bool
		prev, priv = h.Hash(prev, int64(k))
		if priv != want {
			t.Errorf("block %d private = %v, want %v", k, priv, want)
		}
	}
	// Shared blocks do not depend on SharedIDs; a private one depends
	// on the request and its position only, and is stable.
	g := *h
	g.SharedIDs = 3
	hh, hg := chain(h, 7), chain(&g, 7)
	if hh[3] != hg[3] || hh[4] == hg[4] {
		t.Error("SharedIDs changed a shared hash, or private and shared hashes agree")
	}
	o := *h
	o.HashIDs = []int64{0, 1, 99}
	if ho := chain(&o, 7); ho[4] != hh[4] || ho[6] != hh[6] {
		t.Error("a private hash depends on more than the request and the block")
	}
	u := *h
	u.Unique = 2
	if chain(&u, 7)[4] == hh[4] {
		t.Error("two requests' private blocks hash alike")
	}
}

func TestHasherStraddling(t *testing.T) {
	// Trace blocks of 10 tokens, engine blocks of 16: engine block 0 spans
	// trace blocks 0 and 1, so a difference in trace block 1 must show.
	a := &BlockHasher{HashIDs: []int64{5, 6, 7}, TraceBlock: 10, PromptTokens: 30, EngineBlock: 16, Unique: 1, SharedIDs: 3}
	b := &BlockHasher{HashIDs: []int64{5, 8, 7}, TraceBlock: 10, PromptTokens: 30, EngineBlock: 16, Unique: 2, SharedIDs: 3}
	if first(a) == first(b) {
		t.Fatal("engine block straddling a differing trace block matched")
	}
	c := *b
	c.HashIDs = []int64{5, 6, 9}
	c.SharedIDs = 3
	if first(a) != first(&c) {
		t.Fatal("engine block inside equal trace blocks differs")
	}
}

// TestChainIsTheHasher checks Chain against BlockHasher along whole
// prompts, asked in any order, for block sizes that straddle trace
// blocks and ids that stop being shared part way.
func TestChainIsTheHasher(t *testing.T) {
	for _, h := range []BlockHasher{
		{HashIDs: []int64{0, 1, 2, 3}, TraceBlock: 32, PromptTokens: 128, EngineBlock: 16, Unique: 1, SharedIDs: 2},
		{HashIDs: []int64{5, 6, 7}, TraceBlock: 10, PromptTokens: 30, EngineBlock: 16, Unique: 2, SharedIDs: 3},
		{HashIDs: []int64{5, 6, 7}, TraceBlock: 10, PromptTokens: 27, EngineBlock: 4, Unique: 3, SharedIDs: 3},
		{HashIDs: []int64{9, 8}, TraceBlock: 512, PromptTokens: 1500, EngineBlock: 16, Unique: 4, SharedIDs: 2},
		{PromptTokens: 64, EngineBlock: 16, Unique: 5},
	} {
		want := chain(&h, 100)
		var c Chain
		c.Reset(h)
		asked := []int64{7, 0, 99, 3, 50, 1}
		for k := range int64(100) {
			asked = append(asked, k)
		}
		for _, k := range asked {
			x, priv := c.Hash(k)
			if x != want[k] || priv != h.Private(k) {
				t.Errorf("%+v: block %d: %#x private %v, want %#x %v", h, k, x, priv, want[k], h.Private(k))
			}
			if priv != (k >= c.Shared()) {
				t.Errorf("%+v: block %d private %v with Shared %d", h, k, priv, c.Shared())
			}
		}
	}
}

// TestNewIsOneRun checks that a new cache, one anonymous run of blocks
// without ids, hands out what pushing every block into the queue gave:
// named blocks 0, 1, 2, … in order while no id has gone to the stack,
// never an eviction from it, and ids that stay distinct once anonymous
// and named allocations mix; and that an empty cache is consistent.
func TestNewIsOneRun(t *testing.T) {
	mustCheck(t, New(0))
	const n = 10
	c := New(n)
	mustCheck(t, c)
	if c.NumFree() != n || c.NumUsed() != 0 {
		t.Fatalf("new cache: free %d used %d", c.NumFree(), c.NumUsed())
	}
	a, ok := c.AllocateNamed(nil, 3, 2) // 0, 1, then one without an id
	if !ok || a[0] != 0 || a[1] != 1 || a[2] != Anonymous {
		t.Fatalf("AllocateNamed = %v %v", a, ok)
	}
	mustCheck(t, c)
	b, ok := c.Allocate(nil, 2) // 2, 3: the anonymous one took no id
	if !ok || b[0] != 2 || b[1] != 3 {
		t.Fatalf("Allocate = %v %v", b, ok)
	}
	c.Name(a) // the anonymous block takes the next fresh id
	if a[2] != 4 {
		t.Fatalf("Name gave %v", a)
	}
	mustCheck(t, c)
	rest, ok := c.AllocateNamed(nil, 5, 0) // the run's last 5, anonymous
	if !ok || c.NumFree() != 0 {
		t.Fatalf("AllocateNamed of the rest = %v %v, %d free", rest, ok, c.NumFree())
	}
	mustCheck(t, c)
	c.Release(rest, 0)
	c.Release(b, 0)
	mustCheck(t, c)
	// Queue: a run of 5, then 3, 2. The run is handed out named
	// first: ids 5..9, fresh.
	got, ok := c.Allocate(nil, 7)
	if want := []int32{5, 6, 7, 8, 9, 3, 2}; !ok || !slices.Equal(got, want) {
		t.Fatalf("Allocate = %v %v, want %v", got, ok, want)
	}
	if c.Evictions != 0 {
		t.Fatalf("%d evictions of uncached blocks", c.Evictions)
	}
	mustCheck(t, c)
}

// TestDropsKeepsAnswers drives a cache through random allocations (named
// and anonymous), commits of a few hashes, private commits and releases,
// and checks Drops' promise: while it stays the same, every hash Lookup
// found is still found in the same block, and every block Holds
// confirmed still holds its hash; and that it does change, so the check
// is exercised both ways.
func TestDropsKeepsAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c := New(48)
	var tables [][]int32
	var found map[uint64]int32
	var held map[int32]uint64
	var drops uint64
	snapshot := func() {
		found, held, drops = map[uint64]int32{}, map[int32]uint64{}, c.Drops()
		for h := uint64(1); h <= 24; h++ {
			if b, ok := c.Lookup(h); ok {
				found[h] = b
			}
		}
		for _, tb := range tables {
			for _, b := range tb {
				if b != Anonymous && c.Holds(b, c.hashes[b]) {
					held[b] = c.hashes[b]
				}
			}
		}
	}
	snapshot()
	var kept, changed int
	for range 20000 {
		switch op := rng.IntN(10); {
		case op < 4:
			n := rng.Int64N(6) + 1
			if tb, ok := c.AllocateNamed(nil, n, rng.Int64N(n+1)); ok {
				tables = append(tables, tb)
			}
		case op < 7 && len(tables) > 0:
			tb := tables[rng.IntN(len(tables))]
			if b := tb[rng.IntN(len(tb))]; b != Anonymous {
				if op == 6 {
					c.CommitPrivate(b, 100+uint64(rng.IntN(24)))
				} else {
					c.Commit(b, 1+uint64(rng.IntN(24)))
				}
			}
		case len(tables) > 0:
			i := rng.IntN(len(tables))
			c.Release(tables[i], int64(len(tables[i])))
			tables = append(tables[:i], tables[i+1:]...)
		}
		if c.Drops() != drops {
			changed++
			snapshot()
			continue
		}
		kept++
		for h, b := range found {
			if got, ok := c.Lookup(h); !ok || got != b {
				t.Fatalf("Drops unchanged, but Lookup(%d) = %d %v, was %d", h, got, ok, b)
			}
		}
		for b, h := range held {
			if !c.Holds(b, h) {
				t.Fatalf("Drops unchanged, but block %d no longer holds %d", b, h)
			}
		}
	}
	mustCheck(t, c)
	if kept < 1000 || changed < 1000 {
		t.Fatalf("Drops stayed %d times and changed %d: not exercised both ways", kept, changed)
	}
}

// TestResetIsNew drives a cache through random allocations, commits,
// promotions and releases, resets it, and then drives it and a new cache
// through the same operations: they hand out the same blocks, find the
// same hashes and evict alike.
func TestResetIsNew(t *testing.T) {
	drive := func(c *Cache, seed uint64, steps int) (trace []int64) {
		rng := rand.New(rand.NewPCG(seed, 9))
		var tables [][]int32
		var runs []FreeRun
		for range steps {
			switch op := rng.IntN(10); {
			case op < 4:
				n := rng.Int64N(6) + 1
				tb, ok := c.AllocateNamed(nil, n, rng.Int64N(n+1))
				if ok {
					tables = append(tables, tb)
				}
				for _, b := range tb {
					trace = append(trace, int64(b))
				}
			case op < 6 && len(tables) > 0:
				tb := tables[rng.IntN(len(tables))]
				if b := tb[rng.IntN(len(tb))]; b != Anonymous {
					c.Commit(b, 1+uint64(rng.IntN(24)))
				}
			case op < 7:
				h := 1 + uint64(rng.IntN(24))
				b, ok := c.Lookup(h)
				if ok && c.Ref(b) == 0 {
					c.Acquire(b)
					tables = append(tables, []int32{b})
				}
				trace = append(trace, int64(b))
			case op < 8 && len(runs) > 0:
				r := runs[rng.IntN(len(runs))]
				if _, left, ok := c.RunLeft(r); ok && left > 0 {
					c.Promote(r, []uint64{30 + uint64(rng.IntN(8))})
				}
			case len(tables) > 0:
				i := rng.IntN(len(tables))
				if r := c.ReleaseRun(tables[i], int64(len(tables[i]))); r != (FreeRun{}) {
					runs = append(runs, r)
				}
				tables = append(tables[:i], tables[i+1:]...)
			}
			trace = append(trace, c.Evictions, c.NumFree(), int64(c.NumCached()))
		}
		mustCheck(t, c)
		return trace
	}
	// Long use (every id, the queue compacted and wrapped round the
	// ring), short (few ids and positions, the index cleared entry by
	// entry) and between (a queue compacted before it reached the
	// ring's end): Reset clears what was written, and only that.
	for ops := 3; ops < 400; ops += 11 {
		c := New(40)
		drive(c, 1, ops)
		c.Reset()
		mustCheck(t, c)
		if c.Evictions != 0 || c.NumFree() != 40 || c.NumCached() != 0 {
			t.Fatalf("%d operations, reset: %d evictions, %d free, %d cached", ops, c.Evictions, c.NumFree(), c.NumCached())
		}
		fresh := New(40)
		// The index keeps the size it grew to, empty.
		if !slices.Equal(c.recs, fresh.recs) || !slices.Equal(c.starts, fresh.starts) || !slices.Equal(c.flags, fresh.flags) ||
			!slices.Equal(c.hashes, fresh.hashes) || !slices.Equal(c.ring, fresh.ring) ||
			len(c.index.slots) < len(fresh.index.slots) || slices.ContainsFunc(c.index.slots, func(s islot) bool { return s != islot{} }) {
			t.Fatalf("%d operations, reset: its tables are not a new cache's", ops)
		}
		if a, b := drive(c, 2, 5000), drive(New(40), 2, 5000); !slices.Equal(a, b) {
			t.Fatalf("%d operations: a reset cache and a new one part ways", ops)
		}
	}
	c := New(40)
	drive(c, 1, 5000)
	c.Reset()
	if a, b := drive(c, 2, 5000), drive(New(40), 2, 5000); !slices.Equal(a, b) {
		t.Fatal("after 5000 operations: a reset cache and a new one part ways")
	}
}

// Compaction lowers the free queue's tail below positions it wrote (the
// entries it packed leave copies past it): Reset clears up to the highest
// tail, not the last.
func TestResetAfterCompaction(t *testing.T) {
	c := New(16) // a ring of 32: nothing here wraps it
	var tables [][]int32
	for i := range 6 {
		b, ok := c.AllocateNamed(nil, 1, 1)
		if !ok {
			t.Fatal("no block")
		}
		c.Commit(b[0], uint64(100+i))
		tables = append(tables, b)
	}
	for _, b := range tables {
		c.Release(b, 1)
	}
	for i := 1; i < 5; i++ { // out of the queue's middle: tombstones
		b, ok := c.Lookup(uint64(100 + i))
		if !ok {
			t.Fatalf("hash %d not cached", 100+i)
		}
		c.Acquire(b)
	}
	before := c.tail
	c.compact()
	if c.tail >= before || before >= int64(len(c.ring)) {
		t.Fatalf("tail %d → %d in a ring of %d: not the case to test", before, c.tail, len(c.ring))
	}
	mustCheck(t, c)
	c.Reset()
	mustCheck(t, c)
	if !slices.Equal(c.ring, New(16).ring) {
		t.Fatalf("reset after compaction: ring %v", c.ring)
	}
}

// TestChainIsTheHasherRandom checks Chain against BlockHasher for random
// trace and engine block sizes (engine blocks that divide trace blocks,
// straddle them or cover several), shared-id counts and orders of asking,
// so that runs of continuations start and stop at every offset.
func TestChainIsTheHasherRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 2000 {
		tb := int64(1 + rng.IntN(64))
		ids := make([]int64, 1+rng.IntN(8))
		for j := range ids {
			ids[j] = rng.Int64N(4)
		}
		eb := int64(1 + rng.IntN(20))
		if i%4 == 0 {
			// A trace block a group of engine blocks (Mooncake's:
			// 512 tokens, 16 a block), which extend hashes whole.
			eb = int64(1 + rng.IntN(3))
			tb = slotRun * eb
		}
		h := BlockHasher{HashIDs: ids, TraceBlock: tb, PromptTokens: 1 + rng.Int64N(tb*int64(len(ids))+40),
			EngineBlock: eb, Unique: uint64(i + 1), SharedIDs: rng.IntN(len(ids) + 1)}
		n := int64(5 + rng.IntN(60))
		if i%4 == 0 {
			n = int64(5 + rng.IntN(300))
		}
		want := chain(&h, n)
		var c Chain
		c.Reset(h)
		for range 3 * n {
			k := rng.Int64N(n)
			if x, priv := c.Hash(k); x != want[k] || priv != h.Private(k) {
				t.Fatalf("%+v: block %d: %#x private %v, want %#x %v", h, k, x, priv, want[k], h.Private(k))
			}
		}
	}
}

// stretchStart finds the start of an anonymous stretch as a walk back
// one block at a time does, and fillAnonymous fills as a plain loop, on
// random tables whose stretches have every length and alignment.
func TestStretchStartAndFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for range 20000 {
		blocks := make([]int32, rng.IntN(40))
		for i := range blocks {
			if rng.IntN(4) != 0 {
				blocks[i] = Anonymous
			} else {
				blocks[i] = int32(rng.IntN(100))
			}
		}
		for i, b := range blocks {
			if b != Anonymous {
				continue
			}
			want := i
			for want > 0 && blocks[want-1] == Anonymous {
				want--
			}
			if got := stretchStart(blocks, i); got != want {
				t.Fatalf("%v: stretch ending at %d starts at %d, want %d", blocks, i, got, want)
			}
		}
		lo := rng.IntN(len(blocks) + 1)
		hi := lo + rng.IntN(len(blocks)-lo+1)
		got := slices.Clone(blocks)
		fillAnonymous(got[lo:hi])
		for i := range blocks {
			if want := blocks[i]; (i >= lo && i < hi && got[i] != Anonymous) || ((i < lo || i >= hi) && got[i] != want) {
				t.Fatalf("fillAnonymous of %d..%d in %v gave %v", lo, hi, blocks, got)
			}
		}
	}
}

// TestSteps checks steps against step one block at a time, at run starts
// whose low half wraps within the run (where a step gives 1 for 0) and
// at random ones.
func TestSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	c := contStep
	starts := []uint64{1, 0xffffffff, 0x12345678_fffffff8, 0x12345678_fffffff9, 0xffffffff_fffffffa,
		-(3 * c), -(7 * c), -(8 * c), -c + 1}
	for range 1000 {
		starts = append(starts, rng.Uint64())
	}
	wraps := 0
	for _, x := range starts {
		if x == 0 {
			continue
		}
		var got [slotRun]uint64
		steps(got[:], x)
		want := x
		for i := range slotRun {
			if got[i] != want {
				t.Fatalf("steps from %#x: block %d is %#x, want %#x", x, i, got[i], want)
			}
			if want+contStep == 0 {
				wraps++
			}
			want = step(want)
		}
	}
	if wraps < 2 {
		t.Fatalf("%d runs stepped through 0: not exercised", wraps)
	}
	// stepRun, every length, from the same starts.
	wraps = 0
	for _, x := range starts {
		for n := range slotRun {
			got := make([]uint64, n)
			stepRun(got, x)
			want := x
			for i := range n {
				if want+contStep == 0 {
					wraps++
				}
				if want = step(want); got[i] != want {
					t.Fatalf("stepRun of %d from %#x: block %d is %#x, want %#x", n, x, i, got[i], want)
				}
			}
		}
	}
	if wraps < 2 {
		t.Fatalf("%d stepRuns stepped through 0: not exercised", wraps)
	}
}
