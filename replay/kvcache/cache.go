package kvcache

import "fmt"

// A Cache is one worker's pool of GPU KV blocks with a full-block prefix
// cache.
//
// Every block is either referenced (ref > 0, held by running requests) or
// free. Free blocks sit in a queue in eviction order, least recently used
// first; a free block keeps its hash, so a later request with the same
// prefix can take it back (a prefix hit) until Allocate reuses it for other
// content (an eviction). Only free blocks are ever evicted.
//
// Note: the free queue is a ring of entries in eviction order. A block
// taken out of the middle (a prefix hit on a free block) leaves a
// tombstone in its slot, and compaction drops tombstones when the ring is
// full. An entry also says whether its block holds a hash, and whether that
// hash is private, so that Allocate reads nothing but the ring for the
// blocks that need no index update: with many workers the blocks' records
// outgrow the CPU caches, and an intrusive linked list (vLLM's) made
// Allocate wait on a cache miss per block, a sixth of a million-request
// replay. The hash index is a fixed-size open-addressing table. So the
// cache allocates nothing per step; memory is O(blocks), not O(requests).
type Cache struct {
	blocks []block
	// ring holds the free queue: entries head..tail-1, taken modulo
	// its power-of-two length.
	ring       []entry
	head, tail int64
	nfree      int64
	index      index

	// Evictions counts cached blocks whose hash Allocate dropped.
	Evictions int64

	compactions int64 // for tests
}

// A block is one KV block's bookkeeping, kept together so that touching
// a block touches one cache line.
type block struct {
	hash    uint64 // 0: not cached
	pos     int64  // free: its position in the ring; referenced: none
	ref     int32
	private bool // hash is held but not indexed (see CommitPrivate)
}

// An entry is a ring slot: a block id and its hash state when it was
// freed (a free block's hash does not change), or a tombstone.
type entry uint32

const (
	hashed    entry = 1 << 31
	privately entry = 1 << 30
	idMask    entry = privately - 1
	tombstone entry = idMask

	// MaxBlocks is the most blocks a Cache holds.
	MaxBlocks = int64(idMask)
)

const none = -1

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
		ring:   make([]entry, size),
		index:  newIndex(n),
	}
	for b := range int32(n) {
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
	return c.index.get(h, c.blocks)
}

// Ref returns the reference count of block b.
func (c *Cache) Ref(b int32) int32 { return c.blocks[b].ref }

// Acquire adds a reference to block b (a prefix hit), taking it out of the
// free queue when it was free.
func (c *Cache) Acquire(b int32) {
	if c.blocks[b].ref == 0 {
		c.unlink(b)
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
	mask := int64(len(c.ring) - 1)
	for taken := int64(0); taken < n; c.head++ {
		e := c.ring[c.head&mask]
		if e == tombstone {
			continue
		}
		b := int32(e & idMask)
		blk := &c.blocks[b]
		if e&hashed != 0 {
			if e&privately == 0 {
				c.index.del(blk.hash, b)
			}
			c.Evictions++
		}
		// Stores only: the block's record need not be read.
		*blk = block{pos: none, ref: 1}
		dst = append(dst, b)
		taken++
	}
	c.nfree -= n
	return dst, true
}

// Commit records that block b now holds the full block of content with hash
// h, so that later requests can hit it. Several blocks may hold one hash
// (two requests computed the same prefix at once), as in vLLM; Lookup
// returns the earliest committed that is still cached.
func (c *Cache) Commit(b int32, h uint64) {
	if c.blocks[b].hash != 0 {
		return
	}
	c.blocks[b].hash = h
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
	if c.blocks[b].hash != 0 {
		return
	}
	c.blocks[b].hash, c.blocks[b].private = h, true
}

// Holds reports whether block b still holds content with hash h.
func (c *Cache) Holds(b int32, h uint64) bool { return c.blocks[b].hash == h }

// Release drops one reference from each of blocks. They are released last
// block first, as vLLM does, so that when a whole request becomes free its
// tail blocks (the least shared) are evicted before its head blocks.
func (c *Cache) Release(blocks []int32) {
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if c.blocks[b].ref <= 0 {
			panic(fmt.Sprintf("kvcache: release of free block %d", b))
		}
		c.blocks[b].ref--
		if c.blocks[b].ref == 0 {
			c.pushBack(b)
		}
	}
}

func (c *Cache) pushBack(b int32) {
	if c.tail-c.head == int64(len(c.ring)) {
		c.compact()
	}
	e := entry(b)
	if blk := &c.blocks[b]; blk.hash != 0 {
		e |= hashed
		if blk.private {
			e |= privately
		}
	}
	c.ring[c.tail&int64(len(c.ring)-1)] = e
	c.blocks[b].pos = c.tail
	c.tail++
	c.nfree++
}

func (c *Cache) unlink(b int32) {
	c.ring[c.blocks[b].pos&int64(len(c.ring)-1)] = tombstone
	c.blocks[b].pos = none
	c.nfree--
}

// compact drops the tombstones of a full ring. The ring holds at least
// twice as many entries as blocks, so at least half of a full ring is
// tombstones and compaction costs O(1) per push, amortised.
func (c *Cache) compact() {
	mask := int64(len(c.ring) - 1)
	t := c.head
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		c.ring[t&mask] = e
		c.blocks[e&idMask].pos = t
		t++
	}
	c.tail = t
	c.compactions++
}

// Check recounts the cache's invariants from scratch: every block is either
// referenced or in the free queue exactly once, free + used = total, and
// the hash index and the blocks' hashes agree. It is O(blocks), for tests
// and validators.
func (c *Cache) Check() error {
	inQueue := make([]bool, len(c.blocks))
	var n int64
	mask := int64(len(c.ring) - 1)
	if c.tail-c.head > int64(len(c.ring)) || c.head > c.tail {
		return fmt.Errorf("kvcache: free queue spans %d..%d in a ring of %d", c.head, c.tail, len(c.ring))
	}
	for p := c.head; p < c.tail; p++ {
		e := c.ring[p&mask]
		if e == tombstone {
			continue
		}
		b := int32(e & idMask)
		if c.blocks[b].pos != p {
			return fmt.Errorf("kvcache: block %d at free-queue position %d says it is at %d", b, p, c.blocks[b].pos)
		}
		if inQueue[b] {
			return fmt.Errorf("kvcache: block %d twice in the free queue", b)
		}
		blk := c.blocks[b]
		if (e&hashed != 0) != (blk.hash != 0) || (e&privately != 0) != (blk.hash != 0 && blk.private) {
			return fmt.Errorf("kvcache: free-queue entry of block %d says hashed %v private %v; the block has hash %#x private %v",
				b, e&hashed != 0, e&privately != 0, blk.hash, blk.private)
		}
		inQueue[b] = true
		n++
	}
	for b := range c.blocks {
		if p := c.blocks[b].pos; p != none && !inQueue[b] {
			return fmt.Errorf("kvcache: block %d claims free-queue position %d it does not hold", b, p)
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
		if h := c.blocks[b].hash; h != 0 && !c.blocks[b].private {
			if _, ok := c.index.get(h, c.blocks); !ok {
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
		if fp, b := unpack(s); s != 0 && (c.blocks[b].hash == 0 || c.blocks[b].private || fingerprint(c.blocks[b].hash) != fp) {
			return fmt.Errorf("kvcache: index entry %#x for block %d holding %#x", fp, b, c.blocks[b].hash)
		}
	}
	return nil
}
