package kvcache

import (
	"fmt"
	"math"
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
type Cache struct {
	blocks []block
	hashes []uint64 // per block; 0: not cached
	// ring holds the free queue: entries head..tail-1, taken modulo
	// its power-of-two length; positions fit an int32 (see rebase).
	ring       []entry
	head, tail int64
	nfree      int64
	index      index

	// Evictions counts cached blocks whose hash Allocate dropped.
	Evictions int64

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

// An entry is a ring slot: a block id and its hash state when it was
// freed (a free block's hash does not change), or a tombstone.
type entry uint32

const (
	hashed    entry = 1 << 31
	privately entry = 1 << 30
	recorded  entry = 1 << 29 // hashes[b] holds the hash (MarkPrivate does not record it)
	idMask    entry = recorded - 1
	tombstone entry = idMask

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
func New(n int64) *Cache {
	if n > MaxBlocks {
		panic(fmt.Sprintf("kvcache: %d blocks, more than %d", n, MaxBlocks))
	}
	size := int64(16)
	for size < 2*n {
		size <<= 1
	}
	c := &Cache{
		blocks: make([]block, n),
		hashes: make([]uint64, n),
		ring:   make([]entry, size),
		index:  newIndex(n),
	}
	for b := range int32(n) {
		c.blocks[b].pos = none
		c.pushBack(b)
	}
	return c
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

// Ref returns the reference count of block b.
func (c *Cache) Ref(b int32) int32 { return c.blocks[b].ref }

// Acquire adds a reference to block b (a prefix hit), taking it out of the
// free queue when it was free.
func (c *Cache) Acquire(b int32) {
	if c.blocks[b].ref == 0 {
		slot := &c.ring[int64(c.blocks[b].pos)&int64(len(c.ring)-1)]
		c.blocks[b].pos = withFlags(*slot &^ idMask)
		*slot = tombstone
		c.nfree--
	}
	c.blocks[b].ref++
}

// Allocate appends n fresh blocks to dst, taken from the head of the free
// queue (least recently used first); a cached block taken this way loses
// its hash. It reports false, and takes nothing, when fewer than n blocks
// are free.
func (c *Cache) Allocate(dst []int32, n int64) ([]int32, bool) {
	if n > c.nfree {
		return dst, false
	}
	// Locals, and dst grown once: the loop runs once per block of every
	// prompt, millions of times per replay.
	at := len(dst)
	dst = slices.Grow(dst, int(n))[:at+int(n)]
	ring, blocks, hashes := c.ring, c.blocks, c.hashes
	mask := int64(len(ring) - 1)
	head, evicted := c.head, int64(0)
	for taken := at; taken < len(dst); head++ {
		e := ring[head&mask]
		if e == tombstone {
			continue
		}
		b := int32(e & idMask)
		if e&hashed != 0 {
			if e&privately == 0 {
				c.index.del(hashes[b], b)
			}
			if e&recorded != 0 {
				// A write to the hashes, another array, only
				// where one was made: most private blocks are
				// never recorded (MarkPrivate).
				hashes[b] = 0
			}
			evicted++
		}
		// A store only: the block's record need not be read;
		// it holds no hash now.
		blocks[b] = block{ref: 1, pos: none}
		dst[taken] = b
		taken++
	}
	c.head = head
	c.Evictions += evicted
	c.nfree -= n
	return dst, true
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
func (c *Cache) MarkPrivate(b int32) {
	if c.blocks[b].pos == none {
		c.blocks[b].pos = withFlags(hashed | privately)
	}
}

// Holds reports whether block b still holds content with hash h.
func (c *Cache) Holds(b int32, h uint64) bool { return c.hashes[b] == h }

// Release drops one reference from each of blocks. They are released last
// block first, as vLLM does, so that when a whole request becomes free its
// tail blocks (the least shared) are evicted before its head blocks.
func (c *Cache) Release(blocks []int32) {
	// Room for every block in the ring first, so that the loop only
	// writes (compaction and rebasing keep the queue's order, so doing
	// them earlier changes nothing).
	if c.tail-c.head+int64(len(blocks)) > int64(len(c.ring)) {
		c.compact()
	}
	if c.tail+int64(len(blocks)) > maxPos {
		c.rebase()
	}
	ring, recs := c.ring, c.blocks
	mask := int64(len(ring) - 1)
	tail := c.tail
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		k := &recs[b]
		if k.ref <= 0 {
			panic(fmt.Sprintf("kvcache: release of free block %d", b))
		}
		k.ref--
		if k.ref == 0 {
			ring[tail&mask] = entry(b) | k.flags()
			k.pos = int32(tail)
			tail++
		}
	}
	c.nfree += tail - c.tail
	c.tail = tail
}

func (c *Cache) pushBack(b int32) {
	if c.tail-c.head == int64(len(c.ring)) {
		c.compact()
	}
	if c.tail >= maxPos {
		c.rebase()
	}
	c.ring[c.tail&int64(len(c.ring)-1)] = entry(b) | c.blocks[b].flags()
	c.blocks[b].pos = int32(c.tail)
	c.tail++
	c.nfree++
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
		c.blocks[e&idMask].pos = int32(at)
		at++
	}
	return at
}

// Check recounts the cache's invariants from scratch: every block is either
// referenced or in the free queue exactly once, free + used = total, and
// the hash index and the blocks' hashes agree. It is O(blocks), for tests
// and validators.
func (c *Cache) Check() error {
	inQueue := make([]bool, len(c.blocks))
	flags := make([]entry, len(c.blocks))
	var n int64
	mask := int64(len(c.ring) - 1)
	if c.tail-c.head > int64(len(c.ring)) || c.head > c.tail || c.tail > maxPos {
		return fmt.Errorf("kvcache: free queue spans %d..%d in a ring of %d", c.head, c.tail, len(c.ring))
	}
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
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
	for b := range c.blocks {
		k := c.blocks[b]
		if k.pos >= 0 && !inQueue[b] {
			return fmt.Errorf("kvcache: block %d claims free-queue position %d it does not hold", b, k.pos)
		}
		if k.pos < 0 {
			if k.pos < withFlags(hashed|privately|recorded) {
				return fmt.Errorf("kvcache: referenced block %d has pos %d", b, k.pos)
			}
			flags[b] = k.flags()
		}
		// A private block's hash may be unrecorded (MarkPrivate).
		if f := flags[b]; (f&recorded != 0) != (c.hashes[b] != 0) || f != 0 && f != hashed|recorded && f != hashed|privately && f != hashed|privately|recorded {
			return fmt.Errorf("kvcache: block %d has flags %#x and hash %#x", b, uint32(f), c.hashes[b])
		}
	}
	if n != c.nfree {
		return fmt.Errorf("kvcache: %d blocks in the free queue, counter says %d", n, c.nfree)
	}
	var used int64
	cached := 0
	for b := range c.blocks {
		r := c.blocks[b].ref
		switch {
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
	if used+c.nfree != int64(len(c.blocks)) {
		return fmt.Errorf("kvcache: used %d + free %d != total %d", used, c.nfree, len(c.blocks))
	}
	if cached != c.index.n {
		return fmt.Errorf("kvcache: %d hashed blocks, %d index entries", cached, c.index.n)
	}
	for _, s := range c.index.slots {
		if fp, b := unpack(s); s != 0 && (c.hashes[b] == 0 || flags[b]&privately != 0 || fingerprint(c.hashes[b]) != fp) {
			return fmt.Errorf("kvcache: index entry %#x for block %d holding %#x", fp, b, c.hashes[b])
		}
	}
	return nil
}
