package kvcache

import (
	"fmt"
	"math"
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
// Note: with many workers the blocks' records outgrow the CPU caches, and
// every allocation and release touches a record the CPU has long
// forgotten: that was a sixth of a million-request replay. So the record
// Allocate and Release touch is 8 bytes (a reference count and a queue
// position), the hashes live apart, and the free queue is a ring of
// entries in eviction order rather than an intrusive linked list (vLLM's),
// which made Allocate a pointer chase, each block a cache miss waiting for
// the previous one. A block taken out of the middle of the queue (a prefix
// hit on a free block) leaves a tombstone in its slot, and compaction drops
// tombstones when the ring is full. An entry also says whether its block
// holds a hash, whether that hash is private, and whether it is recorded,
// so that Allocate writes a block's record without reading it, and clears
// a hash only where one was written. The hash index is a fixed-size
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
// id belongs to a named block (referenced, or free in the queue) or to
// none (names: a stack, and the ids never handed out yet); a run's
// blocks have none, and a block the queue hands out takes one from the
// stack, or a fresh one, if it must be named. An owner that
// needs its anonymous blocks' ids after all (a preemption: it may hit
// them again) names them (Name). This took 6.6 million of the 8.9 million
// blocks a 4-worker Mooncake replay allocates off the per-block path.
type Cache struct {
	blocks []block
	hashes []uint64 // per block; 0: not cached
	// ring holds the free queue: entries head..tail-1, taken modulo
	// its power-of-two length; positions fit an int32 (see rebase).
	ring       []entry
	head, tail int64
	nfree      int64
	index      index
	// runs holds the runs of anonymous blocks that entries name
	// (runEntry | slot); spare, the slots not in use.
	runs  []anonRun
	spare []int32
	// serial numbers the runs made, so that a FreeRun to a slot tells
	// its run from a later one in it.
	serial uint64
	// names holds the ids of no block (their records are stale);
	// so do the ids fresh.. of blocks never named, whose records are
	// zero.
	names []int32
	fresh int32

	// Evictions counts cached blocks whose hash Allocate dropped.
	Evictions int64
	// drops counts the evicted blocks that had an id (Drops);
	// dropped holds, per block, the low half of drops just after its
	// last eviction (Kept).
	drops   uint64
	dropped []uint32

	compactions int64 // for tests
}

// A block is the record of one KV block that allocation and release
// touch.
//
// Note: a free block's flags are in its ring entry, and a referenced
// block's in its pos, which it does not need then: a separate array of
// flags was one more cache miss per block in Allocate and in Release.
type block struct {
	ref int32
	// pos is, for a free block, its position in the ring (≥ 0); for a
	// referenced one, the complement of the flag bits its ring entry will
	// carry, shifted down by flagShift (< 0; none: no flags).
	pos int32
}

// flags returns a referenced block's flag bits, as in a ring entry.
func (k block) flags() entry { return entry(uint8(^k.pos)) << flagShift }

// withFlags returns the pos of a referenced block with flag bits f.
func withFlags(f entry) int32 { return ^int32(uint8(f >> flagShift)) }

// An anonRun is a stretch of anonymous free blocks in the queue: uncached
// ones first, then cached (private, hashed) ones, then its tail: named,
// indexed blocks that Promote took out of its cached ones, at their place
// in the queue.
type anonRun struct {
	uncached, cached int32
	// live counts tail's blocks not acquired since.
	live   int32
	serial uint64 // 0: a spare slot
	at     int64  // its entry's ring position
	// tail holds the promoted blocks, the one evicted last first (the
	// owner's block at the run's start, Promote); an acquired one stays,
	// so that the others keep their places, and is known stale (tailed).
	//
	// Note: a block's place in the tail is not kept apart (it was,
	// tailAt, written by Promote at each block and read by Check
	// alone: 5.7 million instructions of
	// BenchmarkReplayMooncakeRouters/sglang_cache_aware).
	tail []int32
}

// Anonymous stands, in a block table, for a block without an id
// (AllocateNamed).
const Anonymous int32 = -1

// An entry is a ring slot: a block id and its hash state when it was
// freed (a free block's hash does not change), or a tombstone.
type entry uint32

const (
	hashed    entry = 1 << 31
	privately entry = 1 << 30
	recorded  entry = 1 << 29 // hashes[b] holds the hash (MarkPrivate does not record it)
	idMask    entry = recorded - 1
	tombstone entry = idMask
	// runEntry marks an entry that names a run (privately alone:
	// a block's entry that is private is also hashed).
	runEntry = privately
	kindMask = hashed | privately

	// MaxBlocks is the most blocks a Cache holds.
	MaxBlocks = int64(idMask)
)

const none = -1 // a referenced block without flags

// flagShift moves an entry's flags into a byte and back.
const flagShift = 24

// maxPos bounds ring positions, which blocks keep as int32s; a variable
// so that tests can make the cache rebase often.
var maxPos int64 = math.MaxInt32

// New returns a cache of n blocks, all free and uncached.
//
// Note: they start as one anonymous run, without ids (fresh hands them
// out as the queue needs them), so that a new cache costs O(1) beyond
// its zeroed arrays: a replay that scales out builds a cache per worker
// start, and pushing every block into the queue one by one was 235
// million instructions of an autoscaled Mooncake replay. The queue's
// order is what pushing them gives (all uncached, in one stretch at the
// front), so which hash is evicted when is unchanged; and while no id
// has gone to the stack, the ids handed out are 0, 1, 2, … as before.
func New(n int64) *Cache {
	if n > MaxBlocks {
		panic(fmt.Sprintf("kvcache: %d blocks, more than %d", n, MaxBlocks))
	}
	size := int64(16)
	for size < 2*n {
		size <<= 1
	}
	c := &Cache{
		blocks:  make([]block, n),
		hashes:  make([]uint64, n),
		dropped: make([]uint32, n),
		ring:    make([]entry, size),
		index:   newIndex(n),
		names:   make([]int32, 0, n),
	}
	c.populate()
	if n > 0 {
		c.ring[0] = runEntry | entry(c.newRun(anonRun{uncached: int32(n), at: 0}))
		c.tail = 1
		c.nfree = n
	}
	return c
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
func (c *Cache) Reset() {
	n := int64(len(c.blocks))
	clear(c.blocks)
	clear(c.hashes)
	clear(c.ring)
	clear(c.index.slots)
	c.index.n = 0
	c.runs, c.spare, c.names = c.runs[:0], c.spare[:0], c.names[:0]
	c.head, c.tail, c.nfree, c.fresh = 0, 0, 0, 0
	c.Evictions, c.compactions = 0, 0
	if n > 0 {
		c.ring[0] = runEntry | entry(c.newRun(anonRun{uncached: int32(n), at: 0}))
		c.tail = 1
		c.nfree = n
	}
}

// NumBlocks returns the total number of blocks.
func (c *Cache) NumBlocks() int64 { return int64(len(c.blocks)) }

// NumFree returns the number of unreferenced blocks, cached or not: what
// Allocate can hand out.
func (c *Cache) NumFree() int64 { return c.nfree }

// NumUsed returns the number of referenced blocks.
func (c *Cache) NumUsed() int64 { return int64(len(c.blocks)) - c.nfree }

// NumCached returns the number of indexed blocks that hold a hash
// (referenced or free; private blocks not counted).
func (c *Cache) NumCached() int { return c.index.n }

// Lookup returns the block holding content with hash h.
func (c *Cache) Lookup(h uint64) (block int32, ok bool) {
	return c.index.get(h, c.hashes)
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
func (c *Cache) Ref(b int32) int32 { return c.blocks[b].ref }

// Acquire adds a reference to block b (a prefix hit), taking it out of the
// free queue when it was free. b has an id: Lookup or Holds found it.
func (c *Cache) Acquire(b int32) {
	if c.blocks[b].ref == 0 {
		if p := c.blocks[b].pos; p >= 0 {
			slot := &c.ring[int64(p)&int64(len(c.ring)-1)]
			c.blocks[b].pos = withFlags(*slot &^ idMask)
			*slot = tombstone
		} else {
			c.acquireTail(b)
		}
		c.nfree--
	}
	c.blocks[b].ref++
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
	// Locals, and dst grown once: the loop runs once per block of every
	// prompt, millions of times per replay.
	at := len(dst)
	dst = grow(dst, int(n))[:at+int(n)]
	ring, blocks, hashes, dropped := c.ring, c.blocks, c.hashes, c.dropped
	slots, imask, unindexed := c.index.slots, c.index.mask, 0 // index.del's
	mask := int64(len(ring) - 1)
	head, drops, anonEvicted := c.head, c.drops, int64(0)
	end, nameEnd := len(dst), at+int(min(named, n))
	for taken := at; taken < end; {
		e := ring[head&mask]
		if e == tombstone {
			head++
			continue
		}
		if e&kindMask == runEntry {
			// Blocks from a run: anonymous ones where dst may
			// take them, named from the stack where it may not.
			slot := int32(e & idMask)
			ru := &c.runs[slot]
			k := min(int64(ru.uncached)+int64(ru.cached), int64(end-taken))
			u := min(int64(ru.uncached), k)
			ru.uncached -= int32(u)
			ru.cached -= int32(k - u)
			anonEvicted += k - u
			stop := taken + int(k)
			for ; taken < min(stop, nameEnd); taken++ {
				dst[taken] = c.name()
			}
			fillAnonymous(dst[taken:stop])
			taken = stop
			if ru.uncached == 0 && ru.cached == 0 {
				if ru.live > 0 {
					taken, drops = c.takeTail(slot, dst, taken, end, nameEnd, drops)
				}
				if ru.live == 0 {
					c.freeRun(slot)
					head++
				}
			}
			continue
		}
		head++
		b := int32(e & idMask)
		if e&hashed != 0 {
			if e&privately == 0 {
				// index.del, its common case inline (take).
				if i, ok := take(slots, imask, pack(fingerprint(hashes[b]), b)); !ok {
					c.index.shiftInto(i)
				}
				unindexed++
			}
			if e&recorded != 0 {
				// A write to the hashes, another array, only
				// where one was made: most private blocks are
				// never recorded (MarkPrivate).
				hashes[b] = 0
			}
			drops++
			dropped[b] = uint32(drops)
		}
		if taken >= nameEnd {
			// Its id goes to the stack; its record is left stale.
			c.names = append(c.names, b)
			dst[taken] = Anonymous
			taken++
			continue
		}
		// A store only: the block's record need not be read;
		// it holds no hash now.
		blocks[b] = block{ref: 1, pos: none}
		dst[taken] = b
		taken++
	}
	c.head = head
	c.index.n -= unindexed
	c.Evictions += int64(drops-c.drops) + anonEvicted
	c.drops = drops
	c.nfree -= n
	return dst, true
}

// fillAnonymous sets every block of s to Anonymous, four at a time: a
// block at a time was a fifth of AllocateNamed on
// BenchmarkReplayMooncakeRouters/round_robin.
func fillAnonymous(s []int32) {
	for len(s) >= 4 {
		s[0], s[1], s[2], s[3] = Anonymous, Anonymous, Anonymous, Anonymous
		s = s[4:]
	}
	for i := range s {
		s[i] = Anonymous
	}
}

// name takes an id from the stack, or a fresh one when it is empty, for a
// block being handed out.
func (c *Cache) name() int32 {
	var b int32
	if k := len(c.names); k > 0 {
		b = c.names[k-1]
		c.names = c.names[:k-1]
	} else {
		b = c.fresh
		c.fresh++
	}
	c.blocks[b] = block{ref: 1, pos: none}
	return b
}

// Name gives each Anonymous block of blocks, a block table, an id: a
// referenced block without flags, as Allocate would have handed it out.
func (c *Cache) Name(blocks []int32) {
	for i, b := range blocks {
		if b == Anonymous {
			blocks[i] = c.name()
		}
	}
}

// Commit records that block b now holds the full block of content with hash
// h, so that later requests can hit it. Several blocks may hold one hash
// (two requests computed the same prefix at once), as in vLLM; Lookup
// returns the earliest committed that is still cached.
func (c *Cache) Commit(b int32, h uint64) {
	if c.blocks[b].flags()&recorded != 0 {
		return
	}
	c.hashes[b] = h
	c.blocks[b].pos = withFlags(hashed | recorded)
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
	if c.blocks[b].flags()&recorded != 0 {
		return
	}
	c.hashes[b] = h
	c.blocks[b].pos = withFlags(hashed | privately | recorded)
}

// MarkPrivate records that block b holds private content (as
// CommitPrivate does) without recording its hash. Only its owner could
// hit it again, and only after a preemption, so the owner records the
// hash with CommitPrivate when it is preempted; a block whose owner
// completes never needs it. It is evicted like any cached block.
//
// Note: the hashes are a second array beside the blocks' records; every
// private block's hash written there was a cache miss, for a value
// almost never read.
//
// An Anonymous block is private already: Release says which are cached.
func (c *Cache) MarkPrivate(b int32) {
	if b != Anonymous && c.blocks[b].pos == none {
		c.blocks[b].pos = withFlags(hashed | privately)
	}
}

// Holds reports whether block b still holds content with hash h.
func (c *Cache) Holds(b int32, h uint64) bool { return c.hashes[b] == h }

// Release drops one reference from each of blocks, a block table whose
// first full blocks are full and hashed: an Anonymous block among them is
// a cached private block, one after them is uncached (named blocks carry
// their own flags). They are released last block first, as vLLM does, so
// that when a whole request becomes free its tail blocks (the least
// shared) are evicted before its head blocks; a stretch of anonymous
// blocks becomes one run.
func (c *Cache) Release(blocks []int32, full int64) { c.release(blocks, full) }

// release is Release; it returns the slot of the run it made last (the
// stretch of anonymous blocks nearest the table's start), or -1.
func (c *Cache) release(blocks []int32, full int64) int32 {
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
	for i := len(blocks) - 1; i >= 0; i-- {
		if blocks[i] != Anonymous {
			var n int64
			i, tail, n = releaseNamed(blocks[:i+1], c.blocks, ring, tail)
			freed += n
			if i < 0 {
				break
			}
		}
		// The stretch of anonymous blocks i′..i, one run.
		j := stretchStart(blocks, i)
		cached := min(max(full-int64(j), 0), int64(i-j+1))
		last = c.newRun(anonRun{uncached: int32(int64(i-j+1) - cached), cached: int32(cached), at: tail})
		ring[tail&mask] = runEntry | entry(last)
		tail++
		freed += int64(i - j + 1)
		i = j
	}
	c.nfree += freed
	c.tail = tail
	return last
}

// releaseNamed is release's loop over named blocks, a function of its
// own so that the compiler keeps its values in registers (with the runs'
// code beside it, it reloaded four of them from the stack at every
// block): it releases blocks from the last down to an Anonymous one,
// pushing those left free at the queue's tail, and returns that one's
// place (-1: none), the tail after, and how many it freed.
//
// Note: it frees exactly the blocks it pushes, so it counts them as the
// tail's advance, not in a counter of their own: 2 instructions a freed
// block (3.14 million on BenchmarkReplayMooncakeRouters/
// sglang_cache_aware).
func releaseNamed(blocks []int32, recs []block, ring []entry, tail int64) (i int, after, freed int64) {
	mask := int64(len(ring) - 1)
	from := tail
	for i = len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if b == Anonymous {
			return i, tail, tail - from
		}
		// The record read and written whole, once.
		k := &recs[b]
		switch r := *k; {
		case r.ref == 1:
			ring[tail&mask] = entry(b) | r.flags()
			*k = block{pos: int32(tail)}
			tail++
		case r.ref > 1:
			k.ref = r.ref - 1
		default:
			badRelease(b)
		}
	}
	return -1, tail, tail - from
}

// badRelease panics: block b was released while free.
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
	c.tail = c.pack(c.ring, c.head)
	c.compactions++
}

// rebase renumbers the queue from position 0, so that positions fit the
// blocks' int32s: once every 2³¹ releases.
func (c *Cache) rebase() {
	ring := make([]entry, len(c.ring))
	c.tail = c.pack(ring, 0)
	c.ring, c.head = ring, 0
	c.compactions++
}

// pack copies the live entries of the queue, in order, into dst from
// position at on (modulo its length, which is the ring's), records their
// new positions in their blocks, and returns the position after the last.
// dst may be the ring itself when at is the head: writes never pass reads.
func (c *Cache) pack(dst []entry, at int64) int64 {
	mask := int64(len(c.ring) - 1)
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		dst[at&mask] = e
		if e&kindMask != runEntry {
			c.blocks[e&idMask].pos = int32(at)
		} else {
			c.runs[e&idMask].at = at
		}
		at++
	}
	return at
}

// Check recounts the cache's invariants from scratch: every id is either
// referenced, in the free queue exactly once, or in the stack of ids of no
// block; every run is in the queue once or spare; free + used = total, the
// anonymous blocks held add up, and the hash index and the blocks' hashes
// agree. It is O(blocks), for tests and validators.
func (c *Cache) Check() error {
	inQueue := make([]bool, len(c.blocks))
	unnamed := make([]bool, len(c.blocks))
	runSeen := make([]bool, len(c.runs))
	flags := make([]entry, len(c.blocks))
	tailed := make([]bool, len(c.blocks))
	var n, runBlocks int64
	mask := int64(len(c.ring) - 1)
	if c.tail-c.head > int64(len(c.ring)) || c.head > c.tail || c.tail > maxPos {
		return fmt.Errorf("kvcache: free queue spans %d..%d in a ring of %d", c.head, c.tail, len(c.ring))
	}
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		if e&kindMask == runEntry {
			s := int(e & idMask)
			if s >= len(c.runs) || runSeen[s] {
				return fmt.Errorf("kvcache: run %d at free-queue position %d unknown or twice in the queue", s, p)
			}
			runSeen[s] = true
			r := c.runs[s]
			if r.uncached < 0 || r.cached < 0 || r.uncached+r.cached+r.live == 0 || r.serial == 0 || r.at != p {
				return fmt.Errorf("kvcache: run %d at %d holds %d uncached, %d cached and %d tail blocks, serial %d, says it is at %d", s, p, r.uncached, r.cached, r.live, r.serial, r.at)
			}
			n += int64(r.uncached) + int64(r.cached)
			runBlocks += int64(r.uncached) + int64(r.cached)
			live := int32(0)
			for x, b := range r.tail {
				if !c.tailed(b, int32(s)) {
					continue // acquired since
				}
				if b >= c.fresh || inQueue[b] {
					return fmt.Errorf("kvcache: block %d in the tail of run %d at %d is not named, or in the free queue twice", b, s, x)
				}
				inQueue[b], tailed[b] = true, true
				flags[b] = hashed | recorded
				live++
			}
			if live != r.live {
				return fmt.Errorf("kvcache: run %d has %d tail blocks, counts %d", s, live, r.live)
			}
			n += int64(live)
			continue
		}
		b := int32(e & idMask)
		if int64(c.blocks[b].pos) != p {
			return fmt.Errorf("kvcache: block %d at free-queue position %d says it is at %d", b, p, c.blocks[b].pos)
		}
		if inQueue[b] {
			return fmt.Errorf("kvcache: block %d twice in the free queue", b)
		}
		inQueue[b] = true
		flags[b] = e &^ idMask
		n++
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
	if c.fresh < 0 || int64(c.fresh) > int64(len(c.blocks)) {
		return fmt.Errorf("kvcache: %d ids named of %d", c.fresh, len(c.blocks))
	}
	for b := int(c.fresh); b < len(c.blocks); b++ {
		if inQueue[b] || c.blocks[b] != (block{}) {
			return fmt.Errorf("kvcache: never-named id %d is in the free queue or has record %+v", b, c.blocks[b])
		}
		unnamed[b] = true
	}
	for _, b := range c.names {
		if b >= c.fresh || inQueue[b] || unnamed[b] {
			return fmt.Errorf("kvcache: id %d of no block is fresh, in the free queue or twice in the stack", b)
		}
		unnamed[b] = true
	}
	var used int64
	cached := 0
	for b := range c.blocks {
		k := c.blocks[b]
		if unnamed[b] {
			// Its record is stale; its hash must be gone, so
			// that Holds is false.
			if c.hashes[b] != 0 {
				return fmt.Errorf("kvcache: id %d of no block holds hash %#x", b, c.hashes[b])
			}
			continue
		}
		if tailed[b] {
			// Checked with its run; a free, indexed block.
		} else if k.pos >= 0 && !inQueue[b] {
			return fmt.Errorf("kvcache: block %d claims free-queue position %d it does not hold", b, k.pos)
		}
		if k.pos < 0 && !tailed[b] {
			if k.pos < withFlags(hashed|privately|recorded) {
				return fmt.Errorf("kvcache: referenced block %d has pos %d", b, k.pos)
			}
			flags[b] = k.flags()
		}
		// A private block's hash may be unrecorded (MarkPrivate).
		if f := flags[b]; (f&recorded != 0) != (c.hashes[b] != 0) || f != 0 && f != hashed|recorded && f != hashed|privately && f != hashed|privately|recorded {
			return fmt.Errorf("kvcache: block %d has flags %#x and hash %#x", b, uint32(f), c.hashes[b])
		}
		switch r := k.ref; {
		case r < 0:
			return fmt.Errorf("kvcache: block %d has ref %d", b, r)
		case r == 0 && !inQueue[b]:
			return fmt.Errorf("kvcache: unreferenced block %d is not in the free queue", b)
		case r > 0 && inQueue[b]:
			return fmt.Errorf("kvcache: referenced block %d is in the free queue", b)
		case r > 0:
			used++
		}
		if h := c.hashes[b]; h != 0 && flags[b]&privately == 0 {
			if _, ok := c.index.get(h, c.hashes); !ok {
				return fmt.Errorf("kvcache: block %d hash %#x not indexed", b, h)
			}
			cached++
		}
	}
	if n != c.nfree {
		return fmt.Errorf("kvcache: %d blocks in the free queue, counter says %d", n, c.nfree)
	}
	// Ids of no block are the runs' blocks and the anonymous blocks
	// requests hold.
	held := int64(len(c.names)) + int64(len(c.blocks)) - int64(c.fresh) - runBlocks
	if held < 0 || used+held+c.nfree != int64(len(c.blocks)) {
		return fmt.Errorf("kvcache: used %d named + %d anonymous + free %d != total %d", used, held, c.nfree, len(c.blocks))
	}
	if cached != c.index.n {
		return fmt.Errorf("kvcache: %d hashed blocks, %d index entries", cached, c.index.n)
	}
	for _, s := range c.index.slots {
		if fp, b := unpack(s); s != 0 && (unnamed[b] || c.hashes[b] == 0 || flags[b]&privately != 0 || fingerprint(c.hashes[b]) != fp) {
			return fmt.Errorf("kvcache: index entry %#x for block %d holding %#x", fp, b, c.hashes[b])
		}
	}
	return nil
}
