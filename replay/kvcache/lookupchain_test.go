package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLookupChainIsLookupAll drives a cache through requests that share
// prefixes of a few id sequences (trace and engine block sizes with 32, 8,
// 3 and one engine blocks per trace block, so that groups are hashed and
// looked up whole, from a trace block's first block, and not at all), and
// checks that LookupChain finds what LookupAll finds for the same
// blocks' hashes, from any block on and on chains hashed to any block
// already; that the chain it hashed is the hasher's, block by block; and
// that whole groups were taken at once (the case it is for).
func TestLookupChainIsLookupAll(t *testing.T) {
	for _, sz := range []struct{ tb, eb int64 }{{512, 16}, {64, 8}, {48, 16}, {16, 16}, {128, 4}} {
		groups := lookupChainIsLookupAll(t, 21, uint64(sz.tb), sz.tb, sz.eb, 6000)
		t.Logf("trace block %d, engine block %d: %d whole groups", sz.tb, sz.eb, groups)
		if sz.tb/sz.eb >= slotRun && groups < 500 {
			t.Errorf("trace block %d, engine block %d: %d whole groups looked up at once: not exercised", sz.tb, sz.eb, groups)
		}
	}
}

// FuzzLookupChainIsLookupAll is TestLookupChainIsLookupAll from other
// seeds and block sizes.
func FuzzLookupChainIsLookupAll(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint16(512), uint8(16))
	f.Add(uint64(3), uint64(4), uint16(40), uint8(5))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, tb uint16, eb uint8) {
		if tb == 0 || eb == 0 {
			return
		}
		lookupChainIsLookupAll(t, s1, s2, int64(tb), int64(eb), 800)
	})
}

// lookupChainIsLookupAll is TestLookupChainIsLookupAll's loop; it
// returns how many groups LookupChain took whole from an entry.
func lookupChainIsLookupAll(t *testing.T, s1, s2 uint64, tb, eb int64, ops int) (groups int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(s1, s2))
	c := New(600)
	// A few sequences of ids; a request takes a prefix of one, at
	// times with an id of its own after it.
	seqs := make([][]int64, 3)
	for i := range seqs {
		for range 2 + rng.IntN(6) {
			seqs[i] = append(seqs[i], rng.Int64N(1000))
		}
	}
	type req struct {
		blocks []int32
		hashed int64
	}
	var live []req
	for op := range ops {
		if len(live) > 0 && (rng.IntN(3) == 0 || len(live) > 6) {
			i := rng.IntN(len(live))
			c.Release(live[i].blocks, live[i].hashed)
			live = slices.Delete(live, i, i+1)
			continue
		}
		s := seqs[rng.IntN(len(seqs))]
		ids := slices.Clone(s[:1+rng.IntN(len(s))])
		if rng.IntN(4) == 0 {
			ids = append(ids, 1000+int64(op))
		}
		h := BlockHasher{HashIDs: ids, TraceBlock: tb, PromptTokens: int64(len(ids))*tb - rng.Int64N(tb),
			EngineBlock: eb, Unique: uint64(op + 1), SharedIDs: len(ids)}
		var ch, ref Chain
		ch.Reset(h)
		ref.Reset(h)
		shared := ch.Shared()
		if shared == 0 {
			continue
		}
		// Asked from some block on (a resumed match), to some block,
		// on a chain hashed to some block already.
		from := rng.Int64N(shared)
		if rng.IntN(2) == 0 {
			from = 0
		}
		to := from + 1 + rng.Int64N(shared-from)
		if rng.IntN(2) == 0 {
			to = shared
		}
		if rng.IntN(3) == 0 {
			ch.Hash(rng.Int64N(shared + 3))
		}
		pre := int64(len(ch.hashes))
		prior := []int32{-7}
		got := c.LookupChain(slices.Clone(prior), &ch, from, to)
		want := c.LookupAll(slices.Clone(prior), ref.Hashes(from, to))
		if !slices.Equal(got, want) {
			t.Fatalf("op %d, %+v, blocks %d…%d: LookupChain %v, LookupAll %v", op, h, from, to, got, want)
		}
		for k := range int64(len(ch.hashes)) {
			if x, _ := ref.Hash(k); ch.hashes[k] != x {
				t.Fatalf("op %d, %+v: block %d hashed %#x, want %#x", op, h, k, ch.hashes[k], x)
			}
		}
		if found := int64(len(got) - 1); found == to-from {
			groups += int(found / slotRun)
		} else if miss := from + found; int64(len(ch.hashes)) > max(miss|(slotRun-1)+1, pre) {
			t.Fatalf("op %d, %+v: hashed %d blocks past a miss at %d", op, h, len(ch.hashes), miss)
		}
		// The request from block 0: its hits acquired, the rest
		// allocated and committed (some of them: a scheduler indexes
		// what may be shared), unless the cache is full.
		hits := c.LookupChain(nil, &ch, 0, shared)
		fresh := shared - int64(len(hits))
		if fresh > c.NumFree() {
			continue
		}
		c.AcquireAll(hits)
		blocks, _ := c.Allocate(hits, fresh)
		n := int64(len(hits)) + rng.Int64N(fresh+1)
		c.CommitAll(blocks[len(hits):n], ch.Hashes(int64(len(hits)), n))
		live = append(live, req{blocks: blocks, hashed: n})
		if op%64 == 0 {
			mustCheck(t, c)
		}
	}
	return groups
}

// LookupChain takes a group whole from the entry that holds its member 0
// only when no earlier entry of the key holds one of its members (which
// would hold that member's earliest copy): here members 5 … 31 of the
// trace block's group in an earlier entry, the whole group in a later.
func TestLookupChainEarlierEntries(t *testing.T) {
	h := BlockHasher{HashIDs: []int64{7, 8}, TraceBlock: 512, PromptTokens: 1024, EngineBlock: 16, Unique: 1, SharedIDs: 2}
	var ref Chain
	ref.Reset(h)
	hs := ref.Hashes(0, groupLen)
	k, j := keyOf(hs[0])
	if j != 0 {
		t.Fatalf("the trace block's first block is member %d", j)
	}
	c := New(1024)
	c.index.insert(k, line(205, 5, groupLen-5, false))
	c.index.insert(k, line(300, 0, groupLen, false))
	want := c.LookupAll(nil, hs)
	var ch Chain
	ch.Reset(h)
	if got := c.LookupChain(nil, &ch, 0, groupLen); !slices.Equal(got, want) {
		t.Errorf("LookupChain = %v, want %v", got, want)
	}
	if want[0] != 300 || want[5] != 205 {
		t.Errorf("LookupAll = %v, want 300 … 304 then 205 … 231", want)
	}
}
