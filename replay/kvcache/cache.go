package kvcache

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// A Cache is one worker's pool of GPU KV blocks with a full-block prefix
// cache.
//
// Every block is either referenced (ref > 0, held by running requests) or
// free. Free blocks sit in a queue in eviction order, least recently used
// first; a free block keeps its hash, so a later request with the same
// prefix can take it back (a prefix hit) until Allocate reuses it for other
// content (an eviction). Only free blocks are ever evicted.
//
// Note: with many workers the records outgrow the CPU caches, and every
// allocation and release touched a record the CPU had long forgotten:
// that was a sixth of a million-request replay. So the free queue is a
// ring of entries in eviction order rather than an intrusive linked list
// (vLLM's), which made Allocate a pointer chase, each block a cache miss
// waiting for the previous one; and blocks with ids are held as runs of
// consecutive ids, with one record and one queue entry per run, not per
// block (runs.go). A run taken out of the middle of the queue (a prefix
// hit on a free run) leaves a tombstone in its slot, and compaction drops
// tombstones when the ring is full. The hashes and a byte of flags per
// block (whether it holds a hash, whether that hash is private, whether
// it is recorded) live apart. The hash index is a fixed-size
// open-addressing table. The cache allocates nothing per step; memory is
// O(blocks), not O(requests).
//
// Anonymous blocks. Most of a replay's blocks are private (no other
// request can ask for them) and their owner never asks for them again
// unless it is preempted: nobody needs to know which block they are. So
// a scheduler may take such blocks without ids (AllocateNamed: they are
// Anonymous in its block table), and Release returns a stretch of them to
// the free queue as one entry, a run that says how many blocks it holds
// and how many of them are cached; Allocate takes blocks from the front
// of a run, uncached first (they were released last), counting the
// cached ones as evictions, all in O(1) per run. The queue's order, and
// so which hash is evicted when, is exactly what releasing the blocks one
// by one gives; only the ids differ, and no result depends on them. An
// id belongs to a named block (in a run: referenced, or free in the
// queue) or to none (ids: a stack of ranges of them); an anonymous run's
// blocks have none, and a block the queue hands out takes one from the
// stack if it must be named. An owner that needs its anonymous blocks'
// ids after all (a preemption: it may hit them again) names them (Name).
// This took 6.6 million of the 8.9 million blocks a 4-worker Mooncake
// replay allocates off the per-block path.
type Cache struct {
	// Per id: the records of runs (at a run's lowest id), a bit per
	// id that starts a run, the flags (fHashed…) and hashes of
	// blocks (a hash is the block's while its flags say fRecorded;
	// eviction clears the flags alone, and leaves the hash stale: a
	// store of eight bytes a block saved, and no reader looks at a
	// hash without its flags).
	recs   []runRec
	starts []uint64
	flags  []uint8
	hashes []uint64
	// ring holds the free queue: entries head..tail-1, taken modulo
	// its power-of-two length; positions stay below maxPos (see rebase).
	ring       []entry
	head, tail int64
	// ringUsed: the ring's slots at positions from it on are 0 (the
	// highest tail before a compaction lowered it; Reset).
	ringUsed int64
	nfree    int64
	index    index
	// runs holds the runs of anonymous blocks that entries name
	// (runEntry | slot); spare, the slots not in use.
	runs  []anonRun
	spare []int32
	// spans holds the spans of named runs, in the queue (entries
	// name them by slot) or in anonymous runs' tails; spareSpans, the
	// slots not in use.
	spans      []span
	spareSpans []int32
	// serial numbers the runs made, so that a FreeRun to a slot tells
	// its run from a later one in it.
	serial uint64
	// ids holds the ids of no block, as a stack of ranges (their
	// records and flags are stale, their hashes 0), and big those of
	// ranges of bigRange ids or more, from the start and from
	// compactions (compactIDs), the last of which left idsCompacted
	// ranges on the stack.
	ids          []idRange
	big          []idRange
	idsCompacted int
	// idsUsed: every id handed out since the cache started is below it
	// (Reset clears the records, flags and hashes of those alone).
	idsUsed int32

	// Evictions counts cached blocks whose hash Allocate dropped.
	Evictions int64
	// drops counts the evicted blocks that had an id (Drops);
	// dropped holds, per block, the low half of drops just after its
	// last eviction (Kept).
	drops   uint64
	dropped []uint32
	// releases counts the calls of release and Reset (Releases);
	// renumbers, the compactions, rebases and Resets (Renumbers).
	releases, renumbers uint64

	compactions int64 // for tests
}

// An anonRun is a stretch of anonymous free blocks in the queue: uncached
// ones first, then cached (private, hashed) ones, then its tail: spans of
// named, indexed blocks that Promote took out of its cached ones, at
// their place in the queue.
type anonRun struct {
	uncached, cached int32
	// live counts the tail's free blocks; done, the blocks promoted.
	live, done int32
	serial     uint64 // 0: a spare slot
	at         int64  // its entry's ring position
	// tail holds the slots of the promoted spans, the one evicted last
	// first; a span stays while the run lasts, even emptied by
	// acquisitions.
	tail []int32
}

// Anonymous stands, in a block table, for a block without an id
// (AllocateNamed).
const Anonymous int32 = -1

// An entry is a ring slot: an anonymous run (runEntry | its slot), a
// span of a named run (its slot), or a tombstone.
type entry uint32

const (
	runEntry  entry = 1 << 31
	tombstone entry = ^entry(0)

	// MaxBlocks is the most blocks a Cache holds.
	MaxBlocks = int64(1<<29 - 1)
)

// maxPos bounds ring positions; a variable so that tests can make the
// cache rebase often.
var maxPos int64 = math.MaxInt32

// New returns a cache of n blocks, all free and uncached.
//
// Note: they start as one anonymous run, without ids (every id is on
// the stack, one range, handed out as the queue needs them), so that a
// new cache costs O(1) beyond its zeroed arrays: a replay that scales
// out builds a cache per worker start, and pushing every block into the
// queue one by one was 235 million instructions of an autoscaled
// Mooncake replay. The queue's order is what pushing them gives (all
// uncached, in one stretch at the front), so which hash is evicted when
// is unchanged; and while no id has gone back to the stack, the ids
// handed out are 0, 1, 2, … as before.
func New(n int64) *Cache {
	if n > MaxBlocks {
		panic(fmt.Sprintf("kvcache: %d blocks, more than %d", n, MaxBlocks))
	}
	size := int64(16)
	for size < 2*n {
		size <<= 1
	}
	c := &Cache{
		recs:    make([]runRec, n),
		starts:  make([]uint64, n/64+1),
		flags:   make([]uint8, n),
		hashes:  make([]uint64, n),
		dropped: make([]uint32, n),
		ring:    make([]entry, size),
		index:   newIndex(n),
	}
	c.populate()
	c.start()
	return c
}

// start makes every block free and uncached: one anonymous run, every id
// on the stack.
func (c *Cache) start() {
	if n := int32(len(c.recs)); n > 0 {
		if n >= bigRange {
			c.big = append(c.big, idRange{0, n})
		} else {
			c.ids = append(c.ids, idRange{0, n})
		}
		c.idsCompacted = 0
		c.ring[0] = runEntry | entry(c.newRun(anonRun{uncached: n, at: 0}))
		c.tail = 1
		c.nfree = int64(n)
	}
}

// Reset makes c what New(c.NumBlocks()) returns, all free and uncached,
// keeping its memory.
//
// Note: a replay that scales out starts a worker where one stopped; a new
// cache per start (78 on an autoscaled Mooncake replay) was memory the
// garbage collector paid for in cycles, about as much again as the
// zeroing. Runs' serial numbers go on from where they were, so that a
// FreeRun of the old cache names no run of the new; Drops goes on too,
// and the blocks' eviction stamps are kept (an old stamp can only make
// Kept keep fewer blocks, see Kept).
//
// Note: only what the cache wrote is cleared: the ids below idsUsed, the
// queue's positions below its highest tail (ringUsed: a compaction lowers
// the tail past positions it wrote; a rebase starts a fresh ring), and
// the index's entries, one by one when they are few. A
// worker that an autoscaler starts and stops again soon writes little,
// and clearing the whole of every table at each of an autoscaled
// Mooncake replay's 78 starts was 9 % of its CPU time (memclr, pprof
// -cpu 1), most of it on tables whose tails the worker never reached.
func (c *Cache) Reset() {
	n := c.idsUsed
	c.index.clearBlocks(c.flags[:n], c.hashes[:n])
	clear(c.recs[:n])
	clear(c.starts[:(n+63)/64])
	clear(c.flags[:n])
	clear(c.hashes[:n])
	clear(c.ring[:min(max(c.tail, c.ringUsed), int64(len(c.ring)))])
	c.idsUsed, c.ringUsed = 0, 0
	c.runs, c.spare, c.ids, c.big = c.runs[:0], c.spare[:0], c.ids[:0], c.big[:0]
	c.spans, c.spareSpans = c.spans[:0], c.spareSpans[:0]
	c.head, c.tail, c.nfree = 0, 0, 0
	c.Evictions, c.compactions = 0, 0
	c.releases++
	c.renumbers++
	c.start()
}

// NumBlocks returns the total number of blocks.
func (c *Cache) NumBlocks() int64 { return int64(len(c.recs)) }

// NumFree returns the number of unreferenced blocks, cached or not: what
// Allocate can hand out.
func (c *Cache) NumFree() int64 { return c.nfree }

// NumUsed returns the number of referenced blocks.
func (c *Cache) NumUsed() int64 { return int64(len(c.recs)) - c.nfree }

// NumCached returns the number of indexed blocks that hold a hash
// (referenced or free; private blocks not counted).
func (c *Cache) NumCached() int { return c.index.n }

// IndexEntries returns how many entries the hash index has: the blocks
// of a group that lie on one line of ids are one entry (index).
func (c *Cache) IndexEntries() int { return c.index.used }

// Lookup returns the block holding content with hash h.
func (c *Cache) Lookup(h uint64) (block int32, ok bool) {
	return c.index.get(h)
}

// Drops returns a count that changes whenever a block with an id loses
// its hash (an eviction): the only change that can make an earlier
// Lookup or Holds answer false, or make Lookup return another block.
// Commits and promotions only add hashes, and Lookup returns the
// earliest of equal ones, so while Drops stays the same every block
// Lookup or Holds found is still the answer; a scheduler that looks the
// same prefix up again may resume where it missed (vllm.match). Runs'
// anonymous blocks, which have no id and are never looked up, do not
// count.
func (c *Cache) Drops() uint64 { return c.drops }

// Releases counts the calls of Release and Reset: between two counts the
// free queue gains no block.
func (c *Cache) Releases() uint64 { return c.releases }

// Renumbers counts the times the free queue's positions were renumbered
// (compaction, rebase, Reset). Between two counts its entries keep their
// positions: Allocate takes blocks from the entry at Head, and Head only
// grows; a release appends entries from Tail on. So a block free at a
// position p (FreeAmong's first) has not been evicted while Head is below
// p, nor has a block released since while Head is below the Tail of
// then.
func (c *Cache) Renumbers() uint64 { return c.renumbers }

// Head returns the free queue's head: the position of the entry Allocate
// takes blocks from next.
func (c *Cache) Head() int64 { return c.head }

// Tail returns the position the free queue's next entry will have.
func (c *Cache) Tail() int64 { return c.tail }

// Kept returns how many of blocks, blocks with ids that Lookup or Holds
// found when Drops was since, were not evicted since, counted from the
// first: those are still what Lookup and Holds find. Lookup returns the
// earliest indexed copy of a hash, so only the eviction of the block it
// found can change its answer: commits add later copies, and no copy
// older than it can come back. (A block evicted and given the same hash
// again is a later copy, and counts as evicted.) So a scheduler that
// looks the same prefix up again after some drops may resume at the first
// block not kept (vllm.match).
//
// Note: a stamp holds the low half of Drops, so that the blocks' stamps
// cost 4 bytes each; a stamp older than 2³² drops may then look recent,
// which only keeps fewer blocks, and makes the caller look up more.
func (c *Cache) Kept(blocks []int32, since uint64) int {
	d := c.drops - since
	if d == 0 {
		return len(blocks)
	}
	if d >= 1<<32 {
		return 0
	}
	for i, b := range blocks {
		// Evicted since: its stamp is since+1 … since+d (mod 2³²).
		if c.dropped[b]-uint32(since)-1 < uint32(d) {
			return i
		}
	}
	return len(blocks)
}

// Ref returns the reference count of block b.
func (c *Cache) Ref(b int32) int32 { return c.recs[c.runStart(b)].ref }

// Acquire adds a reference to block b (a prefix hit), taking it out of the
// free queue when it was free. b has an id: Lookup or Holds found it.
func (c *Cache) Acquire(b int32) {
	one := [1]int32{b}
	c.acquireRun(one[:])
}

// Allocate appends n fresh blocks to dst, taken from the head of the free
// queue (least recently used first); a cached block taken this way loses
// its hash. It reports false, and takes nothing, when fewer than n blocks
// are free.
func (c *Cache) Allocate(dst []int32, n int64) ([]int32, bool) {
	return c.AllocateNamed(dst, n, n)
}

// AllocateNamed is Allocate whose first named blocks have ids and the
// others none: they are Anonymous in dst, blocks only their owner holds,
// whose ids nobody asks for (see Cache).
func (c *Cache) AllocateNamed(dst []int32, n, named int64) ([]int32, bool) {
	if n > c.nfree {
		return dst, false
	}
	at := len(dst)
	dst = grow(dst, int(n))[:at+int(n)]
	mask := int64(len(c.ring) - 1)
	head, anonEvicted := c.head, int64(0)
	end, nameEnd := len(dst), at+int(min(named, n))
	for taken := at; taken < end; {
		e := c.ring[head&mask]
		switch {
		case e == tombstone:
			head++
		case e&runEntry != 0:
			// Blocks from a run: anonymous ones where dst may
			// take them, named from the stack where it may not.
			slot := int32(e &^ runEntry)
			ru := &c.runs[slot]
			k := min(int64(ru.uncached)+int64(ru.cached), int64(end-taken))
			u := min(int64(ru.uncached), k)
			ru.uncached -= int32(u)
			ru.cached -= int32(k - u)
			anonEvicted += k - u
			stop := taken + int(k)
			if m := min(stop, nameEnd); taken < m {
				c.nameRange(dst[taken:m])
				taken = m
			}
			fillAnonymous(dst[taken:stop])
			taken = stop
			if ru.uncached == 0 && ru.cached == 0 {
				if ru.live > 0 {
					taken = c.takeTail(slot, dst, taken, end, nameEnd)
				}
				if c.runs[slot].live == 0 {
					c.freeRun(slot)
					head++
				}
			}
		default:
			x := int32(e)
			taken = c.evictSpan(x, dst, taken, end, nameEnd)
			if c.spans[x].live == 0 {
				c.freeSpan(x)
				head++
			}
		}
	}
	c.head = head
	c.Evictions += anonEvicted
	c.nfree -= n
	return dst, true
}

// fillAnonymous sets every block of s to Anonymous, eight at a time (the
// compiler writes them as four 8-byte stores): a block at a time was a
// fifth of AllocateNamed on BenchmarkReplayMooncakeRouters/round_robin;
// four at a time, 5 million instructions of evictSpan's on
// sglang_cache_aware.
func fillAnonymous(s []int32) {
	for len(s) >= 8 {
		s[0], s[1], s[2], s[3] = Anonymous, Anonymous, Anonymous, Anonymous
		s[4], s[5], s[6], s[7] = Anonymous, Anonymous, Anonymous, Anonymous
		s = s[8:]
	}
	for len(s) >= 4 {
		s[0], s[1], s[2], s[3] = Anonymous, Anonymous, Anonymous, Anonymous
		s = s[4:]
	}
	for i := range s {
		s[i] = Anonymous
	}
}

// Name gives each Anonymous block of blocks, a block table, an id: a
// referenced block without flags, as Allocate would have handed it out.
func (c *Cache) Name(blocks []int32) {
	for i := 0; i < len(blocks); i++ {
		if blocks[i] != Anonymous {
			continue
		}
		j := i + 1
		for j < len(blocks) && blocks[j] == Anonymous {
			j++
		}
		c.nameRange(blocks[i:j])
		i = j
	}
}

// Commit records that block b now holds the full block of content with hash
// h, so that later requests can hit it. Several blocks may hold one hash
// (two requests computed the same prefix at once), as in vLLM; Lookup
// returns the earliest committed that is still cached.
func (c *Cache) Commit(b int32, h uint64) {
	if c.flags[b]&fRecorded != 0 {
		return
	}
	c.hashes[b] = h
	c.flags[b] = fHashed | fRecorded
	c.index.add(h, b)
}

// CommitPrivate records that block b holds content with hash h that no
// other request can have (its prefix contains content unique to one
// request), so it is not indexed: only its owner can hit it again, after a
// preemption, by asking Holds about the block it had. It is evicted like
// any cached block.
//
// Note: this is an optimisation with the same results as Commit. In a
// replay about half the blocks are private, and each index insert and
// delete is a cache miss once several workers' tables outgrow the CPU
// caches.
func (c *Cache) CommitPrivate(b int32, h uint64) {
	if c.flags[b]&fRecorded != 0 {
		return
	}
	c.hashes[b] = h
	c.flags[b] = fHashed | fPrivate | fRecorded
}

// MarkPrivate records that block b, referenced, holds private content
// (as CommitPrivate does) without recording its hash. Only its owner
// could hit it again, and only after a preemption, so the owner records
// the hash with CommitPrivate when it is preempted; a block whose owner
// completes never needs it. It is evicted like any cached block.
//
// Note: the hashes are a second array beside the blocks' flags; every
// private block's hash written there was a cache miss, for a value
// almost never read.
//
// An Anonymous block is private already: Release says which are cached.
func (c *Cache) MarkPrivate(b int32) {
	if b != Anonymous && c.flags[b] == 0 && c.Ref(b) > 0 {
		c.flags[b] = fHashed | fPrivate
	}
}

// Holds reports whether block b still holds content with hash h.
func (c *Cache) Holds(b int32, h uint64) bool {
	return c.flags[b]&fRecorded != 0 && c.hashes[b] == h
}

// Release drops one reference from each of blocks, a block table whose
// first full blocks are full and hashed: an Anonymous block among them is
// a cached private block, one after them is uncached (named blocks carry
// their own flags). They are released last block first, as vLLM does, so
// that when a whole request becomes free its tail blocks (the least
// shared) are evicted before its head blocks; a stretch of anonymous
// blocks becomes one run, and a run of named blocks whose last reference
// goes one span.
func (c *Cache) Release(blocks []int32, full int64) { c.release(blocks, full) }

// release is Release; it returns the slot of the run it made last (the
// stretch of anonymous blocks nearest the table's start), or -1.
func (c *Cache) release(blocks []int32, full int64) int32 {
	c.releases++
	// Room for every block in the ring first, so that the loop only
	// writes (compaction and rebasing keep the queue's order, so doing
	// them earlier changes nothing).
	if c.tail-c.head+int64(len(blocks)) > int64(len(c.ring)) {
		c.compact()
	}
	if c.tail+int64(len(blocks)) > maxPos {
		c.rebase()
	}
	ring := c.ring
	mask := int64(len(ring) - 1)
	tail, freed, last := c.tail, int64(0), int32(-1)
	for i := len(blocks) - 1; i >= 0; {
		if b := blocks[i]; b != Anonymous {
			// A run, held whole: b is its last block.
			lo := c.runStart(b)
			r := &c.recs[lo]
			if first, last := lo, lo+r.n-1; r.desc {
				first, last = last, first
				if b != last || int(r.n) > i+1 || blocks[i+1-int(r.n)] != first {
					lo = c.releasePart(blocks[:i+1], lo)
				}
			} else if b != last || int(r.n) > i+1 || blocks[i+1-int(r.n)] != first {
				lo = c.releasePart(blocks[:i+1], lo)
			}
			r = &c.recs[lo]
			switch {
			case r.ref == 1:
				x := c.newSpan(span{lo: lo, hi: lo + r.n, live: r.n, up: r.desc, owner: -1, at: tail})
				r = &c.recs[lo]
				r.ref, r.span = 0, x
				ring[tail&mask] = entry(x)
				tail++
				freed += int64(r.n)
			case r.ref > 1:
				r.ref--
			default:
				badRelease(b)
			}
			i -= int(r.n)
			continue
		}
		// The stretch of anonymous blocks j..i, one run.
		j := stretchStart(blocks, i)
		cached := min(max(full-int64(j), 0), int64(i-j+1))
		last = c.newRun(anonRun{uncached: int32(int64(i-j+1) - cached), cached: int32(cached), at: tail})
		ring[tail&mask] = runEntry | entry(last)
		tail++
		freed += int64(i - j + 1)
		i = j - 1
	}
	c.nfree += freed
	c.tail = tail
	return last
}

// releasePart makes the blocks that end blocks, and follow each other in
// the run at lo in its tables' order, a run of their own, and returns its
// lowest id: a table that holds part of a run (a caller may release any
// blocks it holds, in any order; the replay's tables hold whole runs).
func (c *Cache) releasePart(blocks []int32, lo int32) int32 {
	r := c.recs[lo]
	i := len(blocks) - 1
	b := blocks[i]
	var off, m int32
	if !r.desc {
		off = b - lo
		for m = 1; m <= off && m <= int32(i) && blocks[i-int(m)] == b-m; m++ {
		}
	} else {
		off = lo + r.n - 1 - b
		for m = 1; m <= off && m <= int32(i) && blocks[i-int(m)] == b+m; m++ {
		}
	}
	return c.carve(lo, r.n, off-m+1, m)
}

// badRelease panics: block b was released while free, or not as the
// last block of its run.
func badRelease(b int32) { panic(fmt.Sprintf("kvcache: release of free block %d", b)) }

// stretchStart returns where the stretch of Anonymous blocks that ends
// at blocks[i] starts.
//
// Note: four blocks at a time, as one AND (Anonymous has every bit
// set, so four ids AND to it only if all four are Anonymous): the walk
// back over a table's anonymous blocks, one comparison each, was half of
// release on BenchmarkReplayMooncakeRouters/round_robin.
func stretchStart(blocks []int32, i int) int {
	s := blocks[:i]
	for len(s) >= 4 {
		n := len(s)
		if s[n-1]&s[n-2]&s[n-3]&s[n-4] != Anonymous {
			break
		}
		s = s[:n-4]
	}
	for len(s) > 0 && s[len(s)-1] == Anonymous {
		s = s[:len(s)-1]
	}
	return len(s)
}

// newRun returns the slot of a new run r.
func (c *Cache) newRun(r anonRun) int32 {
	c.serial++ // from 1: 0 marks a spare slot
	r.serial = c.serial
	if n := len(c.spare); n > 0 {
		s := c.spare[n-1]
		c.spare = c.spare[:n-1]
		r.tail = c.runs[s].tail[:0] // its memory
		c.runs[s] = r
		return s
	}
	c.runs = append(c.runs, r)
	return int32(len(c.runs) - 1)
}

// compact drops the tombstones of a full ring. The ring holds at least
// twice as many entries as blocks, so at least half of a full ring is
// tombstones and compaction costs O(1) per push, amortised.
func (c *Cache) compact() {
	c.ringUsed = max(c.ringUsed, c.tail)
	c.tail = c.pack(c.ring, c.head)
	c.compactions++
	c.renumbers++
}

// rebase renumbers the queue from position 0, so that positions stay
// below maxPos: once every 2³¹ releases.
func (c *Cache) rebase() {
	ring := make([]entry, len(c.ring))
	c.tail = c.pack(ring, 0)
	c.ringUsed = 0 // a fresh ring
	c.ring, c.head = ring, 0
	c.compactions++
	c.renumbers++
}

// pack copies the live entries of the queue, in order, into dst from
// position at on (modulo its length, which is the ring's), records their
// new positions in their runs and spans, and returns the position after
// the last. dst may be the ring itself when at is the head: writes never
// pass reads.
func (c *Cache) pack(dst []entry, at int64) int64 {
	mask := int64(len(c.ring) - 1)
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		dst[at&mask] = e
		if e&runEntry != 0 {
			c.runs[e&^runEntry].at = at
		} else {
			c.spans[e].at = at
		}
		at++
	}
	return at
}

// Check recounts the cache's invariants from scratch: every id is either
// in one run or on the stack of ids of no block, once; runs tile the ids
// they hold; every run without references is free in exactly one span,
// in the queue or in an anonymous run's tail, and every span counts its
// free blocks; every anonymous run is in the queue once or spare; free +
// used = total, the anonymous blocks held add up, and the hash index and
// the blocks' hashes agree. It is O(blocks), for tests and validators.
func (c *Cache) Check() error {
	n := int32(len(c.recs))
	const (
		onStack = 1
		inRun   = 2
	)
	state := make([]uint8, n)
	runOf := make([]int32, n) // the lowest id of each id's run
	free := make([]bool, n)
	mask := int64(len(c.ring) - 1)
	if c.tail-c.head > int64(len(c.ring)) || c.head > c.tail || c.tail > maxPos {
		return fmt.Errorf("kvcache: free queue spans %d..%d in a ring of %d", c.head, c.tail, len(c.ring))
	}
	// What Reset leaves alone must be as New made it.
	if c.idsUsed < 0 || c.idsUsed > n {
		return fmt.Errorf("kvcache: ids used up to %d of %d", c.idsUsed, n)
	}
	for b := c.idsUsed; b < n; b++ {
		if c.recs[b] != (runRec{}) || c.flags[b] != 0 || c.hashes[b] != 0 || c.starts[b>>6]&(1<<uint(b&63)) != 0 {
			return fmt.Errorf("kvcache: id %d, never handed out (ids used up to %d), holds a record, flags or hash", b, c.idsUsed)
		}
	}
	if top := max(c.tail, c.ringUsed); top < int64(len(c.ring)) {
		for p := top; p < int64(len(c.ring)); p++ {
			if c.ring[p] != 0 {
				return fmt.Errorf("kvcache: free queue position %d, past any written (%d), holds %#x", p, top, c.ring[p])
			}
		}
	}
	for _, g := range c.big {
		if g.hi-g.lo < bigRange {
			return fmt.Errorf("kvcache: big range of ids %d..%d has fewer than %d", g.lo, g.hi, bigRange)
		}
	}
	var stacked int64
	for _, g := range slices.Concat(c.ids, c.big) {
		if g.lo < 0 || g.hi > n || g.lo >= g.hi {
			return fmt.Errorf("kvcache: ids of no block %d..%d of %d", g.lo, g.hi, n)
		}
		for b := g.lo; b < g.hi; b++ {
			if state[b] != 0 {
				return fmt.Errorf("kvcache: id %d twice on the stack", b)
			}
			state[b] = onStack
			if c.flags[b] != 0 {
				return fmt.Errorf("kvcache: id %d of no block has flags %#x", b, c.flags[b])
			}
		}
		stacked += int64(g.hi - g.lo)
	}
	var used, named int64
	bit := func(b int32) bool { return c.starts[b>>6]&(1<<uint(b&63)) != 0 }
	for b := int32(0); b < n; {
		if state[b] == onStack {
			b++
			continue
		}
		r := c.recs[b]
		if !bit(b) || r.n <= 0 || r.n > n-b || r.ref < 0 {
			return fmt.Errorf("kvcache: id %d starts no run: %+v, start bit %v", b, r, bit(b))
		}
		for x := b; x < b+r.n; x++ {
			if state[x] != 0 || x > b && bit(x) {
				return fmt.Errorf("kvcache: id %d of run %d (%+v) is on the stack or starts a run", x, b, r)
			}
			state[x], runOf[x] = inRun, b
		}
		if r.ref > 0 {
			used += int64(r.n)
		}
		named += int64(r.n)
		b += r.n
	}
	spanSeen := make([]bool, len(c.spans))
	// checkSpan counts span x's free blocks, marking them.
	checkSpan := func(x int32, owner int32, at int64) error {
		if int(x) >= len(c.spans) || spanSeen[x] {
			return fmt.Errorf("kvcache: span %d unknown or twice in use", x)
		}
		spanSeen[x] = true
		sp := c.spans[x]
		if sp.owner != owner || owner < 0 && sp.at != at || sp.lo < 0 || sp.hi > n || sp.lo > sp.hi {
			return fmt.Errorf("kvcache: span %d is %+v, in run %d at %d", x, sp, owner, at)
		}
		live := int32(0)
		for b := sp.lo; b < sp.hi; {
			if state[b] != inRun || runOf[b] != b {
				return fmt.Errorf("kvcache: span %d (%+v) holds id %d, not a run's first", x, sp, b)
			}
			r := c.recs[b]
			if b+r.n > sp.hi {
				return fmt.Errorf("kvcache: run %d (%+v) passes the end of span %d (%+v)", b, r, x, sp)
			}
			if r.ref == 0 && r.span == x {
				for y := b; y < b+r.n; y++ {
					free[y] = true
				}
				live += r.n
			}
			b += r.n
		}
		if live != sp.live || owner < 0 && live == 0 {
			return fmt.Errorf("kvcache: span %d holds %d free blocks, counts %d", x, live, sp.live)
		}
		return nil
	}
	runSeen := make([]bool, len(c.runs))
	var nfree, runBlocks int64
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		if e&runEntry == 0 {
			if err := checkSpan(int32(e), -1, p); err != nil {
				return err
			}
			nfree += int64(c.spans[e].live)
			continue
		}
		s := int(e &^ runEntry)
		if s >= len(c.runs) || runSeen[s] {
			return fmt.Errorf("kvcache: run %d at free-queue position %d unknown or twice in the queue", s, p)
		}
		runSeen[s] = true
		r := c.runs[s]
		if r.uncached < 0 || r.cached < 0 || r.uncached+r.cached+r.live == 0 || r.serial == 0 || r.at != p {
			return fmt.Errorf("kvcache: run %d at %d holds %d uncached, %d cached and %d tail blocks, serial %d, says it is at %d", s, p, r.uncached, r.cached, r.live, r.serial, r.at)
		}
		nfree += int64(r.uncached) + int64(r.cached)
		runBlocks += int64(r.uncached) + int64(r.cached)
		live := int32(0)
		for _, x := range r.tail {
			if err := checkSpan(x, int32(s), 0); err != nil {
				return err
			}
			live += c.spans[x].live
		}
		if live != r.live {
			return fmt.Errorf("kvcache: run %d has %d tail blocks, counts %d", s, live, r.live)
		}
		nfree += int64(live)
	}
	for _, s := range c.spare {
		if int(s) >= len(c.runs) || runSeen[s] || c.runs[s].serial != 0 {
			return fmt.Errorf("kvcache: spare run %d in the queue, twice spare or numbered", s)
		}
		runSeen[s] = true
	}
	for s, ok := range runSeen {
		if !ok {
			return fmt.Errorf("kvcache: run %d neither in the queue nor spare", s)
		}
	}
	for _, x := range c.spareSpans {
		if int(x) >= len(c.spans) || spanSeen[x] {
			return fmt.Errorf("kvcache: spare span %d in use or twice spare", x)
		}
		spanSeen[x] = true
	}
	for x, ok := range spanSeen {
		if !ok {
			return fmt.Errorf("kvcache: span %d neither in use nor spare", x)
		}
	}
	cached := 0
	for b := int32(0); b < n; b++ {
		if state[b] != inRun {
			continue
		}
		if r := c.recs[runOf[b]]; r.ref == 0 && !free[b] {
			return fmt.Errorf("kvcache: unreferenced block %d (run %d) is in no span", b, runOf[b])
		}
		// A private block's hash may be unrecorded (MarkPrivate).
		f, h := c.flags[b], c.hashes[b]
		if f&fRecorded != 0 && h == 0 || f != 0 && f != fHashed|fRecorded && f != fHashed|fPrivate && f != fHashed|fPrivate|fRecorded {
			return fmt.Errorf("kvcache: block %d has flags %#x and hash %#x", b, f, h)
		}
		if f&(fRecorded|fPrivate) == fRecorded {
			if _, ok := c.index.get(h); !ok {
				return fmt.Errorf("kvcache: block %d hash %#x not indexed", b, h)
			}
			cached++
		}
	}
	if nfree != c.nfree {
		return fmt.Errorf("kvcache: %d blocks in the free queue, counter says %d", nfree, c.nfree)
	}
	// Ids of no block are the anonymous runs' blocks and the anonymous
	// blocks requests hold.
	held := stacked - runBlocks
	if held < 0 || named+stacked != int64(n) || used+held+c.nfree != int64(n) {
		return fmt.Errorf("kvcache: used %d named + %d anonymous + free %d != total %d", used, held, c.nfree, n)
	}
	if cached != c.index.n {
		return fmt.Errorf("kvcache: %d hashed blocks, %d index entries", cached, c.index.n)
	}
	entered := make([]bool, n) // blocks in an entry
	inEntries, entries := 0, 0
	for _, s := range c.index.slots {
		if s.meta == 0 {
			continue
		}
		entries++
		members := s.meta >> memberShift
		if members == 0 || members >= 1<<groupLen || s.key&(groupLen-1) != 0 {
			return fmt.Errorf("kvcache: index entry %#x holds members %#x", s.key, members)
		}
		for m := members; m != 0; m &= m - 1 {
			j := uint(bits.TrailingZeros64(m))
			b := blockAt(s.meta, j)
			if b < 0 || b >= n || state[b] != inRun || entered[b] || c.hashes[b] != s.key+uint64(j)*contStep || c.flags[b]&fPrivate != 0 {
				return fmt.Errorf("kvcache: index entry %#x holds block %d as member %d", s.key, b, j)
			}
			entered[b] = true
			inEntries++
		}
	}
	if inEntries != c.index.n {
		return fmt.Errorf("kvcache: index entries hold %d blocks, count %d", inEntries, c.index.n)
	}
	if entries != c.index.used || entries > c.index.limit {
		return fmt.Errorf("kvcache: index has %d entries, count %d, limit %d", entries, c.index.used, c.index.limit)
	}
	return nil
}
