package kvcache

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"unsafe"
)

// Named runs: a request's blocks with ids as stretches of consecutive ids.
//
// A router that sends requests sharing a prefix to one worker makes its
// cache acquire, release and evict millions of shared blocks, each with
// an id, and each did per-block work at every step of its life: its
// record read and written at acquisition, at release, at allocation; a
// free-queue entry each; its id pushed to the stack and popped again
// (on BenchmarkReplayMooncakeRouters/sglang_cache_aware some 400 million
// instructions beyond round-robin's). So every block with an id lies in
// a run: ids lo..lo+n-1 that one or more block tables hold whole, in
// order (ascending, or descending: desc), with one reference count and
// one record, at lo (runRec), and a bit set at lo in starts, so that the
// run of any id is found by a scan back to it (runStart). A table
// acquiring part of a run splits it (split), so tables hold whole runs
// always, and release walks a table a run at a time: a run whose last
// reference goes becomes one span, one entry of the free queue.
//
// A span is the ids of a run freed at once, evicted in the order
// releasing its blocks one by one, last block first, would have queued
// them: for an ascending run its highest id first, for a descending one
// its lowest (up). Pieces of it acquired since are runs of their own,
// referenced, or freed again into a later span; a piece is free in the
// span while its record says so (ref 0 and the span's slot), and
// eviction passes the others by. The ids of a span's range stay in runs
// while it lasts: a piece acquired out of it can only be evicted from a
// later span, after this one. Promote's blocks are spans too, in their
// run's tail.
//
// Ids of no block are a stack of ranges (ids), and big ranges beside it
// (takeIDs); a run is made from one range, so a request's shared blocks
// get consecutive ids. An evicted block is handed out in eviction order,
// as before: a span evicted from its highest id down gives a descending
// run.
//
// Per block there remain what is per block in vLLM's pool too: a hash
// indexed at commit and deleted at eviction, and the eviction's stamp.

// A runRec is the record of a run, at its lowest id.
type runRec struct {
	ref  int32
	n    int32 // its ids: lo..lo+n-1
	span int32 // free (ref 0): the span it is in
	desc bool  // its tables hold it from lo+n-1 down to lo
}

// A span is a run freed into the free queue (owner −1, at its ring
// position at) or promoted into the tail of anonymous run owner.
type span struct {
	lo, hi int32 // its pieces lie within
	live   int32 // its blocks free in it
	up     bool  // evicted from lo upward; else from hi−1 down
	owner  int32
	// top is, evicted downward, where evictSpan last found the piece
	// that ends at hi: a hint, taken while it is a run's first id
	// within lo..hi−1 whose run ends at hi (ids there all lie in runs,
	// whose records are current, so that proves it).
	//
	// Note: a decode step evicts one block at a time from the top of
	// a span, often a long one, and finding its piece's first id
	// (runStart, a scan back over the start bits) each time was some
	// 45 of the 200 instructions a piece cost evictSpan
	// (BenchmarkReplayMooncakeRouters/sglang_cache_aware).
	top int32
	at  int64
}

// An idRange is the ids lo..hi−1 of no block.
type idRange struct{ lo, hi int32 }

// Per-id flags (Cache.flags).
const (
	fHashed   uint8 = 1
	fPrivate  uint8 = 2
	fRecorded uint8 = 4 // hashes[b] holds the hash (MarkPrivate does not record it)
)

// runStart returns the lowest id of the run that holds id b.
func (c *Cache) runStart(b int32) int32 {
	w := int(b >> 6)
	m := c.starts[w] & (^uint64(0) >> (63 - uint(b&63)))
	for m == 0 {
		w--
		m = c.starts[w]
	}
	return int32(w<<6 + 63 - bits.LeadingZeros64(m))
}

// makeRun makes ids lo..lo+r.n−1 a run with record r.
func (c *Cache) makeRun(lo int32, r runRec) {
	c.recs[lo] = r
	// The starts inside it cleared: ids of no block keep stale bits.
	for x, hi := lo+1, lo+r.n; x < hi; {
		w := x >> 6
		end := min(hi, (w+1)<<6)
		c.starts[w] &^= (^uint64(0) >> (64 - uint(end-x))) << uint(x&63)
		x = end
	}
	c.starts[lo>>6] |= 1 << uint(lo&63)
}

// split splits the run at lo after its first off blocks in its tables'
// order (0 < off < n), and returns the lowest ids of the two parts, in
// that order. Both keep its reference count and span.
func (c *Cache) split(lo, off int32) (first, second int32) {
	r := &c.recs[lo]
	rest := *r
	if !r.desc {
		rest.n -= off
		r.n = off
		first, second = lo, lo+off
		c.recs[second] = rest
		c.starts[second>>6] |= 1 << uint(second&63)
		return first, second
	}
	// Descending: its first off blocks are its highest ids.
	rest.n = off
	r.n -= off
	first, second = lo+r.n, lo
	c.recs[first] = rest
	c.starts[first>>6] |= 1 << uint(first&63)
	return first, second
}

// takeIDs takes up to n consecutive ids of no block (at least one; the
// caller knows there are n) and returns the first and how many: from the
// stack's top range when it has n ids, or bigRange; else from a big
// range, the lowest ids first, after a compaction of the stack
// (compactIDs) if there is none and the stack has doubled since the last.
//
// Note: the top alone left a long replay's named blocks on ids one or
// two apart: a decode step's block, anonymous, takes the place of one
// named block at the free queue's head and gives its id back alone, and
// the request that named blocks next took those ids one at a time, while
// whole stretches of ids lay below them on the stack. Over the Mooncake
// conversation trace replayed 80 times over (962,480 requests, llm_d on
// 16 workers), the stacks ended 4,800 to 11,800 ranges deep, the GPU
// caches' index with an entry for every 1.5 blocks where a fresh cache
// has one for 20 to 30 (a group of 32 on one line of ids), and
// `opaltrace replay` took 87.6 s of user time against round-robin's
// 25.2; with big ranges, 21.1 against 17.0 (README: long replays).
func (c *Cache) takeIDs(n int32) (lo, k int32) {
	want := min(n, bigRange)
	if t := len(c.ids); t == 0 || c.ids[t-1].hi-c.ids[t-1].lo < want {
		if len(c.big) == 0 && len(c.ids) >= 2*c.idsCompacted+2 {
			c.compactIDs()
		}
		if len(c.big) > 0 {
			g := &c.big[len(c.big)-1]
			lo = g.lo
			k = min(n, g.hi-g.lo)
			c.idsUsed = max(c.idsUsed, lo+k)
			if g.lo += k; g.hi-g.lo < bigRange {
				// Its rest, if any, on the stack, where the next
				// small takings find it.
				rest := *g
				c.big = c.big[:len(c.big)-1]
				if rest.lo < rest.hi {
					c.freeIDs(rest.lo, rest.hi)
				}
			}
			return lo, k
		}
	}
	t := len(c.ids)
	top := &c.ids[t-1]
	lo = top.lo
	k = min(n, top.hi-top.lo)
	c.idsUsed = max(c.idsUsed, lo+k)
	top.lo += k
	if top.lo == top.hi {
		c.ids = c.ids[:t-1]
	}
	return lo, k
}

// bigRange is how many consecutive ids a range of c.big has at least:
// a group's (index), so that a request's named blocks take whole groups
// on one line of ids.
const bigRange = groupLen

// freeIDs puts ids lo..hi−1 on the stack of ids of no block, merged
// with the ranges on top that they meet.
//
// Note: merged as far as they go, the stack is the same however a
// range's ids come back (a span's run whole, or block by block where
// Acquire split it), so that the ids handed out are too
// (TestBulkMatchesOneByOne compares the tables of caches that acquire
// in bulk and one by one).
//
// Note: the stack is resliced, not appended to, while it has room: an
// append stores the slice's pointer too, behind the write barrier's
// check, which was as much again as the rest (15,000 barriers while the
// collector marked, on BenchmarkReplayMooncakeRouters/sglang_cache_aware).
func (c *Cache) freeIDs(lo, hi int32) {
	ids := c.ids
	n := len(ids)
	for ; n > 0; n-- {
		top := ids[n-1]
		if top.lo == hi {
			hi = top.hi
		} else if top.hi == lo {
			lo = top.lo
		} else {
			break
		}
	}
	if n < cap(ids) {
		c.ids = c.ids[:n+1]
	} else {
		c.ids = append(ids[:n], idRange{})
	}
	c.ids[n] = idRange{lo, hi}
}

// compactIDs merges the ranges of the stack that meet (takeIDs calls it
// only while there is no big range): those of bigRange ids or more
// become the big ranges, the others the stack, each with its lowest ids
// last (taken first).
//
// Note: a compaction sorts the stack, and takeIDs compacts only once the
// stack has doubled since the last, so that each id given back costs a
// logarithm's worth of sorting at most.
func (c *Cache) compactIDs() {
	all := c.ids
	slices.SortFunc(all, func(a, b idRange) int { return cmp.Compare(b.lo, a.lo) }) // highest first
	m := 0
	for _, g := range all {
		if m > 0 && all[m-1].lo == g.hi {
			all[m-1].lo = g.lo
			continue
		}
		all[m] = g
		m++
	}
	small := 0
	for _, g := range all[:m] {
		if g.hi-g.lo >= bigRange {
			c.big = append(c.big, g)
		} else {
			all[small] = g
			small++
		}
	}
	c.ids = all[:small]
	c.idsCompacted = small
}

// nameRange gives the blocks of dst ids, as runs referenced once
// without flags: blocks handed out, or named (Name).
func (c *Cache) nameRange(dst []int32) {
	for len(dst) > 0 {
		lo, k := c.takeIDs(int32(len(dst)))
		c.makeRun(lo, runRec{ref: 1, n: k})
		fillUp(dst[:k], lo)
		dst = dst[k:]
	}
}

// newSpan returns the slot of a new span s.
func (c *Cache) newSpan(s span) int32 {
	if n := len(c.spareSpans); n > 0 {
		x := c.spareSpans[n-1]
		c.spareSpans = c.spareSpans[:n-1]
		c.spans[x] = s
		return x
	}
	c.spans = append(c.spans, s)
	return int32(len(c.spans) - 1)
}

// freeSpan makes span slot x spare.
func (c *Cache) freeSpan(x int32) {
	c.spans[x].live = -1 // spare (Check)
	c.spareSpans = append(c.spareSpans, x)
}

// takeFree takes m blocks of a free run out of span x (an acquisition);
// a span left empty leaves the queue, and so does an anonymous run left
// empty by its tail.
func (c *Cache) takeFree(x int32, m int32) {
	c.nfree -= int64(m)
	sp := &c.spans[x]
	sp.live -= m
	if sp.owner < 0 {
		if sp.live == 0 {
			c.ring[sp.at&int64(len(c.ring)-1)] = tombstone
			c.freeSpan(x)
		}
		return
	}
	s := sp.owner
	ru := &c.runs[s]
	ru.live -= m
	if ru.live == 0 && ru.uncached == 0 && ru.cached == 0 {
		c.ring[ru.at&int64(len(c.ring)-1)] = tombstone
		c.freeRun(s)
	}
}

// carve makes blocks off..off+m−1, in its tables' order, of the run of n
// blocks at lo a run of their own, and returns its lowest id.
func (c *Cache) carve(lo, n, off, m int32) int32 {
	if off > 0 {
		_, lo = c.split(lo, off)
	}
	if m < n-off {
		lo, _ = c.split(lo, m)
	}
	return lo
}

// follow returns, for blocks[0], a block of the run at lo, its place in
// the run's tables' order and how many of blocks follow it there, itself
// included.
func (c *Cache) follow(blocks []int32, lo int32) (off, m int32) {
	b, r := blocks[0], &c.recs[lo]
	if !r.desc {
		off = b - lo
	} else {
		off = lo + r.n - 1 - b
	}
	s := blocks[:min(int64(r.n-off), int64(len(blocks)))]
	if r.desc {
		return off, int32(followDown(s, b))
	}
	return off, int32(followUp(s, b))
}

// followUp returns how many leading blocks of s are b, b+1, b+2, …
//
// Note: eight at a time, two to a word: the blocks' bytes read as four
// little-endian words (binary.LittleEndian, which the compiler makes one
// load each), XORed with what two consecutive ids make and ORed (zero
// only if all are). With the eight compared one by one, their
// differences ORed, it was 10 million instructions of
// BenchmarkReplayMooncakeRouters/sglang_cache_aware's acquisitions (a
// block at a time, a compare and a branch each, 23 million). On a
// big-endian machine the words never match, and the loop after, a block
// at a time, gives the same answer.
func followUp(s []int32, b int32) int {
	n := len(s)
	if len(s) >= 8 {
		raw := blockBytes(s)
		p := uint64(uint32(b)) | uint64(uint32(b+1))<<32
		d1 := pairStep
		d2, d3, d4 := 2*d1, 3*d1, 4*d1
		i := 0
		for ; i <= len(raw)-32; i += 32 {
			w := (*[32]byte)(raw[i : i+32])
			if (binary.LittleEndian.Uint64(w[0:])^p)|(binary.LittleEndian.Uint64(w[8:])^(p+d1))|
				(binary.LittleEndian.Uint64(w[16:])^(p+d2))|(binary.LittleEndian.Uint64(w[24:])^(p+d3)) != 0 {
				break
			}
			p += d4
		}
		s, b = s[i/4:], b+int32(i/4)
	}
	for len(s) > 0 && s[0] == b {
		s, b = s[1:], b+1
	}
	return n - len(s)
}

// followDown returns how many leading blocks of s are b, b−1, b−2, …
// (followUp's descending twin: a word's two ids go down by two each
// without a borrow from one half into the other while neither goes
// below 0, so the words are compared only while the eight's lowest,
// b−7, is not).
func followDown(s []int32, b int32) int {
	n := len(s)
	if len(s) >= 8 && b >= 7 {
		raw := blockBytes(s)
		p := uint64(uint32(b)) | uint64(uint32(b-1))<<32
		d1 := pairStep
		d2, d3, d4 := 2*d1, 3*d1, 4*d1
		i := 0
		for ; i <= len(raw)-32 && b >= 7; i += 32 {
			w := (*[32]byte)(raw[i : i+32])
			if (binary.LittleEndian.Uint64(w[0:])^p)|(binary.LittleEndian.Uint64(w[8:])^(p-d1))|
				(binary.LittleEndian.Uint64(w[16:])^(p-d2))|(binary.LittleEndian.Uint64(w[24:])^(p-d3)) != 0 {
				break
			}
			p, b = p-d4, b-8
		}
		s = s[i/4:]
	}
	for len(s) > 0 && s[0] == b {
		s, b = s[1:], b-1
	}
	return n - len(s)
}

// pairStep is 2 in each half of a word: from two consecutive ids to the
// next two (followUp). A variable, so that it is loaded once into a
// register (a constant's sums are 64-bit immediates, loaded each time).
var pairStep = uint64(2 | 2<<32)

// blockBytes returns the bytes of s (4 a block, in the machine's order).
func blockBytes(s []int32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// acquireRun acquires the leading blocks of blocks that follow each other
// in one run, in its tables' order, splitting them off as a run of their
// own, and returns how many.
func (c *Cache) acquireRun(blocks []int32) int {
	lo := c.runStart(blocks[0])
	off, m := c.follow(blocks, lo)
	lo = c.carve(lo, c.recs[lo].n, off, m)
	k := &c.recs[lo]
	if k.ref == 0 {
		c.takeFree(k.span, m)
		k = &c.recs[lo]
	}
	k.ref++
	return int(m)
}

// evictSpan hands out blocks of span x's free pieces into dst[taken:end],
// in eviction order, as AllocateNamed does (ids up to nameEnd, Anonymous
// after), evicting their hashes; it returns where it stopped.
func (c *Cache) evictSpan(x int32, dst []int32, taken, end, nameEnd int) int {
	for taken < end {
		sp := &c.spans[x]
		if sp.live == 0 {
			break
		}
		var lo int32 // the piece's
		if sp.up {
			lo = sp.lo
		} else if lo = sp.top; lo < sp.lo || lo >= sp.hi || c.starts[lo>>6]&(1<<uint(lo&63)) == 0 || lo+c.recs[lo].n != sp.hi {
			// Not the piece last found, whole to the span's end.
			lo = c.runStart(sp.hi - 1)
			sp.top = lo
		}
		r := &c.recs[lo]
		if r.ref != 0 || r.span != x {
			// Acquired since: passed by.
			if sp.up {
				sp.lo += r.n
			} else {
				sp.hi = lo
			}
			continue
		}
		k := min(r.n, int32(end-taken))
		sp.live -= k
		var from int32 // the evicted ids: from..from+k−1
		if sp.up {
			from = lo
			if k < r.n {
				rest := *r
				rest.n -= k
				c.recs[lo+k] = rest
				c.starts[(lo+k)>>6] |= 1 << uint((lo+k)&63)
			}
			sp.lo += k
		} else {
			from = lo + r.n - k
			r.n -= k
			sp.hi -= k
		}
		if k == 1 {
			// One block, mostly a decode step's (60,000 of the
			// 83,000 pieces BenchmarkReplayMooncakeRouters/llm_d
			// evicts, 24,000 of round_robin's 31,000): evicted and
			// handed out without the loops over a range (evict's,
			// unindex's, the fills'), which were some 400
			// instructions of the 600 such a piece cost.
			c.evictBlock(from)
			if taken < nameEnd {
				c.makeRun(from, runRec{ref: 1, n: 1, desc: !sp.up})
				dst[taken] = from
			} else {
				c.freeIDs(from, from+1)
				dst[taken] = Anonymous
			}
			taken++
			continue
		}
		c.evict(from, k, sp.up)
		// Handed out in eviction order: a span evicted upward gives
		// an ascending run, one evicted downward a descending one.
		j := min(k, int32(max(nameEnd-taken, 0)))
		out := dst[taken : taken+int(k)]
		if sp.up {
			if j > 0 {
				c.makeRun(from, runRec{ref: 1, n: j})
				fillUp(out[:j], from)
			}
			if j < k {
				c.freeIDs(from+j, from+k)
			}
		} else {
			if j > 0 {
				c.makeRun(from+k-j, runRec{ref: 1, n: j, desc: true})
				fillDown(out[:j], from+k-1)
			}
			if j < k {
				c.freeIDs(from, from+k-j)
			}
		}
		fillAnonymous(out[j:])
		taken += int(k)
	}
	return taken
}

// fillUp sets o to the ids b, b+1, b+2, …, eight at a time.
func fillUp(o []int32, b int32) {
	for len(o) >= 8 {
		g := (*[8]int32)(o)
		g[0], g[1], g[2], g[3] = b, b+1, b+2, b+3
		g[4], g[5], g[6], g[7] = b+4, b+5, b+6, b+7
		o, b = o[8:], b+8
	}
	for i := range o {
		o[i] = b + int32(i)
	}
}

// fillDown sets o to the ids b, b−1, b−2, …, eight at a time.
func fillDown(o []int32, b int32) {
	for len(o) >= 8 {
		g := (*[8]int32)(o)
		g[0], g[1], g[2], g[3] = b, b-1, b-2, b-3
		g[4], g[5], g[6], g[7] = b-4, b-5, b-6, b-7
		o, b = o[8:], b-8
	}
	for i := range o {
		o[i] = b - int32(i)
	}
}

// evict drops the hashes of the k blocks from..from+k−1 (their flags
// cleared, see Cache.hashes), in eviction order (upward, or from the
// highest id down), counting the evictions and stamping them (Kept).
//
// Note: eight blocks that all hold a recorded hash (a prefix's, mostly)
// are dropped at once, their flags as one word and their stamps
// written in one go; a block at a time, with a test of its flags each,
// the loop was 33 million instructions of
// BenchmarkReplayMooncakeRouters/sglang_cache_aware.
func (c *Cache) evict(from, k int32, up bool) {
	// The range's flags, hashes and stamps as slices of one length,
	// indexed from 0, so that the compiler checks no bound per block.
	fl := c.flags[from : from+k]
	dr := c.dropped[from : from+k][:len(fl)]
	unindexed := c.index.unindex(fl, c.hashes[from:from+k], from)
	const recorded = uint64(fRecorded) * ones // in each of eight flags
	drops := c.drops
	if up {
		for i := 0; i < len(fl); {
			if len(fl)-i >= 8 && binary.LittleEndian.Uint64(fl[i:i+8])&recorded == recorded {
				binary.LittleEndian.PutUint64(fl[i:i+8], 0)
				stampUp((*[8]uint32)(dr[i:i+8]), uint32(drops))
				drops += 8
				i += 8
				continue
			}
			drops = evictOne(fl, dr, i, drops)
			i++
		}
	} else {
		for i := len(fl); i > 0; {
			if i >= 8 && binary.LittleEndian.Uint64(fl[i-8:i])&recorded == recorded {
				binary.LittleEndian.PutUint64(fl[i-8:i], 0)
				stampDown((*[8]uint32)(dr[i-8:i]), uint32(drops))
				drops += 8
				i -= 8
				continue
			}
			i--
			drops = evictOne(fl, dr, i, drops)
		}
	}
	c.index.n -= unindexed
	c.Evictions += int64(drops - c.drops)
	c.drops = drops
}

// evictBlock is evict for the one block b.
func (c *Cache) evictBlock(b int32) {
	f := c.flags[b]
	if f == 0 {
		return // no hash to drop
	}
	if f&(fHashed|fPrivate) == fHashed {
		c.index.del(c.hashes[b], b)
	}
	c.flags[b] = 0
	c.drops++
	c.dropped[b] = uint32(c.drops)
	c.Evictions++
}

// stampUp stamps eight blocks evicted upward: d+1, d+2, … d+8.
//
// Note: a store each; an array literal assigned whole was built on the
// stack and copied.
func stampUp(g *[8]uint32, d uint32) {
	g[0] = d + 1
	g[1] = d + 2
	g[2] = d + 3
	g[3] = d + 4
	g[4] = d + 5
	g[5] = d + 6
	g[6] = d + 7
	g[7] = d + 8
}

// stampDown stamps eight blocks evicted from the highest id down: d+8,
// d+7, … d+1.
func stampDown(g *[8]uint32, d uint32) {
	g[0] = d + 8
	g[1] = d + 7
	g[2] = d + 6
	g[3] = d + 5
	g[4] = d + 4
	g[5] = d + 3
	g[6] = d + 2
	g[7] = d + 1
}

// evictOne is evict for block i of the range: it returns drops, counted
// on if the block held a hash.
func evictOne(fl []uint8, dr []uint32, i int, drops uint64) uint64 {
	if f := fl[i]; f != 0 {
		fl[i] = 0
		drops++
		dr[i] = uint32(drops)
	}
	return drops
}
