package kvcache

import "math"

// A BlockHasher computes the chained hashes of the engine blocks of one
// sequence (a prompt followed by its generated tokens).
//
// Note: engine block k covers tokens [k·B, (k+1)·B) for the engine block
// size B. When those tokens lie inside the prompt and inside the span the
// trace's HashIDs cover, the hash mixes the hash of block k−1 with the ids
// of the trace blocks the tokens lie in: content-addressed, so two requests
// with the same leading hash_ids share blocks. Otherwise (generated tokens,
// prompts without hash_ids, or prompts longer than their hash_ids cover) it
// mixes in Unique, which the caller makes distinct per request. Because the
// chain carries block k−1, once a block is unique every later one is too.
// A block that is not full is never hashed: Hash is only asked for full
// blocks.
type BlockHasher struct {
	HashIDs      []int64 // the trace's prefix block ids
	TraceBlock   int64   // tokens per HashIDs entry; 0 when HashIDs is empty
	PromptTokens int64   // prompt length; tokens past it are generated
	EngineBlock  int64   // tokens per engine block
	Unique       uint64  // distinct per request: the salt for unshared blocks
	// SharedIDs is how many leading HashIDs other requests may also hold
	// (a caller that does not know passes len(HashIDs)). Blocks whose content depends on a later
	// id are private: no other request can hit them, and Hash names them
	// by Unique and position only.
	SharedIDs int
}

// slotRun is the number of consecutive blocks whose hashes step by
// contStep (Hash): one group of the cache index (keyOf).
const slotRun = 32

// Root is the hash that precedes block 0 in every chain.
const Root uint64 = 0x6f70616c74726163 // "opaltrac"

// Hash returns the hash of engine block k given prev, the hash of block k−1
// (Root for k = 0), and whether the block is private to this request
// (mixes in Unique or an id beyond SharedIDs), which Cache.CommitPrivate
// exploits. The hash is never 0, which marks "no hash".
//
// Note: a private block's hash is a function of Unique and k alone. No
// other request can hold its content, so any value that is the same each
// time the request computes the block, and unlike every other request's,
// will do; and every block after a private one is private too, so the
// chain need not be carried past it. This saves the id mixing of the
// blocks no one shares, about half of a Mooncake replay's.
//
// Note: a shared block that lies in the trace block block k−1 ends in
// (a continuation: most of them, 31 of every 32 on Mooncake's 512-token
// trace blocks and 16-token engine blocks) mixes only k into prev, and
// inside a run of slotRun blocks not even that: it is prev moved on by
// a constant (step). Its content is the ids up to that trace block, and
// the block size; block k−1's is the same, so prev already names it, and
// its place tells the two blocks apart. Equal content still gives equal
// hashes (by induction along the chain), and unequal content unequal
// ones but with the odds of a 64-bit collision, as before; it takes one
// mix, or an addition, instead of three mixes, and hashing was the
// largest item of a replay whose router sends sharers together. The
// hashes are identities only: nothing orders or
// picks by their values (the index compares whole hashes, and returns
// the earliest of equal ones), so no result changed.
//
// Note: along runs of slotRun blocks (k from a multiple of slotRun)
// inside one trace block, a shared block's hash is block k−1's plus
// contStep, and a run's first hash has its low five bits 0: so a run's
// hashes are members 0, 1, … of one group of the cache index (keyOf),
// which holds the blocks a request commits, finds or evicts one after
// the other as one entry. A trace block's first run starts at random;
// a later run of the same trace block follows from the run before when
// that one was a whole group (runStart), so the trace block's groups
// have adjacent home slots in the index, and block k's hash still
// depends on all of its content through prev. (Among a request's
// private blocks the low half goes up by one too, and a run of them is
// a group as well; they are indexed only after a preemption.)
func (h *BlockHasher) Hash(prev uint64, k int64) (hash uint64, private bool) {
	first := k * h.EngineBlock
	last := first + h.EngineBlock - 1
	var x uint64
	var low uint32
	if !h.Private(k) {
		if k > 0 && (first-1)/h.TraceBlock == last/h.TraceBlock {
			// Blocks k−1 and k end in the same trace block.
			if k%slotRun != 0 {
				return step(prev), false
			}
			return runStart(prev, k), false
		} else {
			x = prev
			for j := first / h.TraceBlock; j <= last/h.TraceBlock; j++ {
				x = mix(x, uint64(h.HashIDs[j]), 1)
			}
			// The trace block size is part of the content's
			// identity: the same id under another block size
			// names other tokens.
			x = mix(x, uint64(h.TraceBlock), 2)
			x = mix(x, uint64(k), 4)
			low = uint32(x) &^ (slotRun - 1) // member 0 (runStart)
		}
	} else {
		k0 := k &^ (slotRun - 1)
		return privateStart(h.Unique, k0) + uint64(k-k0)*contStep, true
	}
	x = x&^0xffffffff | uint64(low)
	if x == 0 {
		x = 1
	}
	return x, private
}

// privateStart returns the hash of private block k0, a multiple of
// slotRun, of the request whose hashes are unique: Unique and k0 mixed,
// its low five bits 0, never 0 (then 1). Blocks k0+1 … k0+slotRun−1
// are its steps (Hash), so that a run of a request's own blocks is one
// group of the cache index, as a shared run is: a preempted request,
// which commits and finds its own blocks by hash, commits, finds and
// evicts them a group at a time.
func privateStart(unique uint64, k0 int64) uint64 {
	x := mix(mix(unique, 0x7072697661746521, 3), uint64(k0), 4) &^ (slotRun - 1) // "private!"
	if x == 0 {
		x = 1
	}
	return x
}

// continuation is the tag of a block's position mixed into the hash of
// the block before it in the same trace block (Hash).
const continuation = 9

// runStart returns the hash of continuation k that starts a run of
// slotRun blocks (Hash), given the hash of the block before it, prev:
// member 0 of a group in the cache index (its low five bits 0), never 0.
// When prev is the last member of its group (a whole group before it in
// the trace block, as on trace blocks of 64 engine blocks or more),
// that is prev − contBack, the first member of the key whose home slot
// is the one before prev's key's (index); else (a trace block that
// started inside a group) mixedStart's.
//
// Note: mixed at every run, a trace block's groups (when groups were
// eight blocks, a Mooncake trace block's four) went to four
// random places in the cache index, and committing, finding and evicting
// a request's blocks took a cache miss a group: the first load of a probe
// was the largest single cost of BenchmarkReplayMooncakeRouters/
// sglang_cache_aware in CPU time (pprof, -cpu 1: unindex's a fifth,
// insert's and lookupAll's a tenth), though not in instructions. Stepped,
// a trace block's groups are one or two cache lines. Their home slots go
// down, not up, because eviction mostly removes a trace block's groups
// first to last: the slot after each is then empty, and its removal moves
// nothing back (with the homes going up, 2.7 times as many removals
// shifted a probe run back on that benchmark). The step is injective in
// prev, which names the content and k−1 (step's note), so equal content
// still gives equal hashes and unequal content unequal ones; two chains'
// blocks at different positions collide only when their stretches' mixed
// starts differ by a multiple of contStep less than the stretch's length.
func runStart(prev uint64, k int64) uint64 {
	if prev&(slotRun-1) != slotRun-1 || prev == contBack { // the latter: 0
		return mixedStart(prev, k)
	}
	return prev - contBack
}

// mixedStart returns the hash of continuation k that starts a run of
// slotRun blocks after a group cut short: prev and k mixed, its low five
// bits 0 (member 0 of its group), never 0 (then 1).
//
// Note: not inlined, so that runStart, its one caller, is: inlined, it put
// runStart past the compiler's budget, and runStart is called for every
// group that a request's prefix hashes.
//
//go:noinline
func mixedStart(prev uint64, k int64) uint64 {
	x := mix(prev, uint64(k), continuation) &^ (slotRun - 1)
	if x == 0 {
		x = 1
	}
	return x
}

// contBack is 63·contStep modulo 2⁶⁴: from a group's last member (31)
// back to member 0 of the key 32·contStep below its own (runStart).
const contBack uint64 = 0xefa6f487_0000003f

// stepAdd is contStep, loaded: the compiler keeps a variable in a
// register, and writes a constant's sum out as a 64-bit immediate loaded
// and added (three instructions a block in steps where this is two).
var stepAdd = contStep

// contStep is what step adds: its low half 1, so that a run's hashes are
// the next members of one group of the cache index (keyOf); its high
// half odd, so that the blocks of a run differ in the high half too
// (TierKey keeps only that half of a hash).
const contStep uint64 = 0x9e3779b9_00000001

// step returns the hash of a continuation inside a run of slotRun blocks
// (Hash), given the hash of the block before it, prev: prev + contStep,
// never 0.
//
// Note: a continuation's content is its predecessor's and its position,
// and prev names both (by induction along the chain, prev depends on
// every id before and on k−1), so any injective function of prev will do:
// equal content gives equal hashes, and hashes of different blocks at one
// position stay different, as prev's are. Blocks at other positions
// collide only when the mixed starts of two chains' stepped stretches (a
// trace block's, or a run's, runStart) differ by a multiple of contStep
// below the stretch's length: at most 32 of 2⁶¹ per pair of stretches on
// Mooncake's trace blocks (a mixed start has 61 random bits).
// Mixing k in at every block (three multiplications, some 40
// instructions with the block's bookkeeping) was the largest item of
// BenchmarkReplayMooncakeRouters/sglang_cache_aware, whose router makes
// every request hash its whole shared prefix; a trace block's first
// block is still mixed, so that trace blocks start at random.
func step(prev uint64) uint64 {
	x := prev + contStep
	if x == 0 {
		x = 1
	}
	return x
}

// steps sets g[0] to x and each later block of g, a run of slotRun, to
// step of the one before.
//
// Note: contStep's low half is 1, so the low half of x + i·contStep is
// x's plus i, and a sum is 0 only if that wraps: when it cannot, the
// sums are the steps, without step's test for 0 at each (a third of
// Chain.extend on BenchmarkReplayMooncakeRouters/sglang_cache_aware).
func steps(g []uint64, x uint64) {
	g = g[:slotRun]
	if uint32(x) <= math.MaxUint32-(slotRun-1) {
		a, c := (*[slotRun]uint64)(g), stepAdd
		for i := 0; i < slotRun; i += 8 {
			a[i] = x
			x += c
			a[i+1] = x
			x += c
			a[i+2] = x
			x += c
			a[i+3] = x
			x += c
			a[i+4] = x
			x += c
			a[i+5] = x
			x += c
			a[i+6] = x
			x += c
			a[i+7] = x
			x += c
		}
		return
	}
	for i := range g {
		g[i] = x
		x = step(x)
	}
}

// stepRun sets each block of g, fewer than slotRun continuations after
// a block whose hash is prev, to step of the one before (g[0] to
// step(prev)).
//
// Note: as in steps, the low half of prev + i·contStep is prev's plus
// i, so the sums are the steps when that cannot wrap.
func stepRun(g []uint64, prev uint64) {
	if uint64(uint32(prev))+uint64(len(g)) <= math.MaxUint32 {
		c, x := contStep, prev
		for len(g) >= 8 {
			g8 := (*[8]uint64)(g)
			g8[0], g8[1], g8[2], g8[3] = x+c, x+2*c, x+3*c, x+4*c
			g8[4], g8[5], g8[6], g8[7] = x+5*c, x+6*c, x+7*c, x+8*c
			x += 8 * c
			g = g[8:]
		}
		for i := range g {
			x += c
			g[i] = x
		}
		return
	}
	for i := range g {
		prev = step(prev)
		g[i] = prev
	}
}

// Private reports whether engine block k is private to the request: its
// hash, which Hash returns with private true, depends on Unique and k
// alone.
func (h *BlockHasher) Private(k int64) bool {
	last := (k+1)*h.EngineBlock - 1
	return !(h.TraceBlock > 0 && last < h.PromptTokens && last/h.TraceBlock < int64(min(len(h.HashIDs), h.SharedIDs)))
}

// mix folds v into the running hash x (a splitmix64 finaliser over the
// combination; tag keeps the roles of v apart).
func mix(x, v, tag uint64) uint64 {
	z := x ^ (v+tag*0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31) ^ x<<1
}

// A Chain is a BlockHasher that keeps the hashes it computed, so that a
// request's blocks are hashed once however often they are asked for: its
// prefix is looked up again at every step that fails to admit it, and
// again, with its private blocks, by every match after a preemption.
// Chain.Hash(k) equals BlockHasher.Hash(Chain.Hash(k−1), k) bit for bit.
//
// Note: recomputing the hashes was an eighth of the instructions of a
// 4-worker Mooncake replay (2.5 million lookups for 16,664 prefix
// matches), and each BlockHasher.Hash divides by the block sizes three
// times; the chain walks the trace blocks instead (extend).
type Chain struct {
	h BlockHasher
	// hashes holds the hashes of blocks 0 … len−1, computed in order as
	// they are asked for.
	hashes []uint64
	// shared is the number of leading blocks that are not private.
	shared int64
	// The trace block that holds the next block's first token, and
	// that token's offset in it.
	j, off int64
}

// Reset makes c the chain of h's blocks, keeping c's memory.
func (c *Chain) Reset(h BlockHasher) {
	*c = Chain{h: h, hashes: c.hashes[:0]}
	// Private is monotone in k (once a block depends on content no one
	// else has, so does every later one): count the shared blocks.
	if h.TraceBlock > 0 && h.EngineBlock > 0 {
		covered := min(int64(min(len(h.HashIDs), h.SharedIDs))*h.TraceBlock, h.PromptTokens)
		c.shared = max(covered/h.EngineBlock, 0)
	}
}

// Hasher returns the hasher c was reset with.
func (c *Chain) Hasher() *BlockHasher { return &c.h }

// Shared returns the number of leading blocks that are not private: block
// k is private exactly when k ≥ Shared.
func (c *Chain) Shared() int64 { return c.shared }

// Hash returns the hash of block k and whether it is private, as
// BlockHasher.Hash does along the chain from Root.
func (c *Chain) Hash(k int64) (hash uint64, private bool) {
	if k >= int64(len(c.hashes)) {
		c.extend(k)
	}
	return c.hashes[k], k >= c.shared
}

// Hashes returns the hashes of blocks from … to−1, as Hash does; the
// slice is the chain's, valid until it is extended.
func (c *Chain) Hashes(from, to int64) []uint64 {
	if to > int64(len(c.hashes)) {
		c.extend(to - 1)
	}
	return c.hashes[from:to]
}

// ahead is how far past a block asked for extend hashes the shared
// blocks, ending at a multiple of it: callers ask for a request's blocks
// one by one, in order, and a call per block was half of hashing's cost.
// Past the blocks a request ever asks for, at most ahead−1 are hashed for
// nothing.
const ahead = 8

// extend computes the hashes up to block k's, as BlockHasher.Hash does,
// without its divisions: the shared blocks' trace blocks are walked
// along, a block size at a time, in locals.
func (c *Chain) extend(k int64) {
	h := &c.h
	// The shared blocks up to the end of k's group of ahead.
	upto := min(k|(ahead-1), c.shared-1)
	hs := c.hashes
	if m := max(k, upto) + 1; int64(cap(hs)) < m {
		hs = grow(hs, int(max(m, 2*int64(cap(hs))))-len(hs))
	}
	eb, tb := h.EngineBlock, h.TraceBlock
	j, off := c.j, c.off
	n := int64(len(hs))
	prev := Root
	if n > 0 {
		prev = hs[n-1]
	}
	// whole: a trace block is one group of slotRun engine blocks (tb is
	// slotRun·eb, so a trace block starts where a group does).
	whole := tb == slotRun*eb
	for n <= upto {
		// Block n covers tokens [n·eb, n·eb+eb): from offset off of
		// trace block j on.
		if whole && off == 0 && n+slotRun <= c.shared {
			// A whole trace block, shared: its first block mixed
			// (the case below, for one trace block), the other
			// slotRun−1 its steps (the continuations' case), as
			// nextGroup hashes a group. It may pass upto, by less
			// than a group: hashed for nothing, if at all.
			//
			// Note: a block mixed and then, in a pass of the loop
			// of its own, the continuations stepped by stepRun,
			// 31 blocks its slice resliced every eight, were 300
			// instructions a trace block: 24 million of
			// BenchmarkReplayMooncakeRouters/llm_d, which hashes
			// 2.5 million blocks here.
			x := mix(prev, uint64(h.HashIDs[j]), 1)
			x = mix(x, uint64(tb), 2)
			x = mix(x, uint64(n), 4)
			x = x&^0xffffffff | uint64(uint32(x)&^(slotRun-1))
			if x == 0 {
				x = 1 // then not member 0: steps steps from it all the same
			}
			if int64(cap(hs)) < n+slotRun {
				hs = grow(hs, int(max(n+slotRun, 2*int64(cap(hs))))-len(hs))
			}
			hs = hs[:n+slotRun]
			steps(hs[n:], x)
			n += slotRun
			prev = hs[n-1]
			j++
			continue
		}
		if off > 0 && off+eb <= tb {
			// Continuations (see Hash): block n−1 ends in trace
			// block j, and so do blocks n … n+run−1. One loop
			// over them without the checks the other case needs:
			// they were a third of extend's instructions.
			run := min((tb-off)/eb, upto-n+1)
			end := n + run
			hs = hs[:end]
			// Up to the next multiple of slotRun, stepped; then
			// whole runs of slotRun, each's first block mixed and
			// the others stepped; then the start of one.
			//
			// Note: block by block, with the tests of which case
			// it is at each, the stepped blocks before the first
			// whole run (seven of a Mooncake trace block's 32)
			// were a fifth of extend's instructions on
			// BenchmarkReplayMooncakeRouters/sglang_cache_aware.
			if lead := min(-n&(slotRun-1), end-n); lead > 0 {
				stepRun(hs[n:n+lead], prev)
				n += lead
				prev = hs[n-1]
			}
			for ; end-n >= slotRun; n += slotRun {
				steps(hs[n:n+slotRun], runStart(prev, n))
				prev = hs[n+slotRun-1]
			}
			if n < end {
				x := runStart(prev, n)
				hs[n] = x
				stepRun(hs[n+1:end], x)
				n = end
				prev = hs[n-1]
			}
			if off += run * eb; off >= tb {
				off -= tb
				j++
			}
			continue
		}
		x := prev
		last, end := j, off+eb-1
		for end >= tb {
			end -= tb
			last++
		}
		for ; j <= last; j++ {
			x = mix(x, uint64(h.HashIDs[j]), 1)
		}
		x = mix(x, uint64(tb), 2)
		x = mix(x, uint64(n), 4)
		low := uint32(x) &^ (slotRun - 1) // as Hash's
		// Block n ends in trace block last at offset end: the next
		// starts after it.
		j, off = last, end+1
		if off >= tb {
			off -= tb
			j++
		}
		x = x&^0xffffffff | uint64(low)
		if x == 0 {
			x = 1
		}
		hs = append(hs, x)
		prev = x
		n++
	}
	c.j, c.off = j, off
	for ; n <= k; n++ {
		// Private: a function of Unique and n alone, stepped inside
		// a run (Hash).
		var x uint64
		if n&(slotRun-1) != 0 && n > c.shared {
			x = step(hs[n-1])
		} else {
			x, _ = h.Hash(Root, n)
		}
		hs = append(hs, x)
	}
	c.hashes = hs
}
