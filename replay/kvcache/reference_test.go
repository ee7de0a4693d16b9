package kvcache

import (
	"fmt"
	"slices"
)

// refCache is vLLM v1's block pool written for clarity, one block at a
// time: a reference count and a hash per block, the free blocks in a
// list in eviction order, and an index from a hash to the blocks that
// hold it, in the order they were indexed. It is what Cache must be
// indistinguishable from (TestCacheMatchesReference), whatever Cache
// keeps as runs, tails, anonymous blocks, tombstones or bulk calls.
//
// It follows vLLM v1's BlockPool (vllm/v1/core/block_pool.py, read at
// vllm-project/vllm 002f349):
//   - get_new_blocks pops blocks from the free queue's head (popleft),
//     least recently freed first, and _maybe_evict_cached_block drops a
//     popped block's hash from cached_block_hash_to_block: an eviction;
//   - touch takes a hit block out of the free queue when its ref_cnt is
//     0, and increments it;
//   - free_blocks decrements each block's ref_cnt and appends the blocks
//     that reach 0 to the queue's tail, in the order given ("ordered by
//     their eviction priority"); the request's free
//     (SingleTypeKVCacheManager.free in single_type_kv_cache_manager.py,
//     KVCacheManager.free before it) gives its blocks reversed, "so that
//     the tail blocks are freed first";
//   - get_cached_block returns the first block of its hash's dict
//     (insertion order), the earliest cached that is still cached.
//
// Private blocks (CommitPrivate, MarkPrivate, the cached blocks of a
// released table that Cache holds anonymous) hold a hash that is not
// indexed: their eviction counts, and only their owner asks for them
// (Holds). Promote indexes free private blocks in place.
type refCache struct {
	ref     []int32
	hash    []uint64 // 0: none
	private []bool   // hash held but not indexed
	free    []int32  // eviction order, first evicted first
	index   map[uint64][]int32
	// evicted holds, per block, the number of the last eviction that
	// took its hash (for Kept); evictions counts them.
	evicted   []int64
	evictions int64
}

func newRefCache(n int) *refCache {
	c := &refCache{
		ref: make([]int32, n), hash: make([]uint64, n), private: make([]bool, n),
		evicted: make([]int64, n), index: map[uint64][]int32{},
	}
	for b := range n {
		c.free = append(c.free, int32(b))
	}
	return c
}

// allocate hands out n blocks from the free queue's head, dropping the
// hashes they held.
func (c *refCache) allocate(n int) ([]int32, bool) {
	if n > len(c.free) {
		return nil, false
	}
	got := slices.Clone(c.free[:n])
	c.free = slices.Clone(c.free[n:])
	for _, b := range got {
		if h := c.hash[b]; h != 0 {
			if !c.private[b] {
				c.unindex(h, b)
			}
			c.hash[b], c.private[b] = 0, false
			c.evictions++
			c.evicted[b] = c.evictions
		}
		c.ref[b] = 1
	}
	return got, true
}

func (c *refCache) unindex(h uint64, b int32) {
	l := c.index[h]
	i := slices.Index(l, b)
	if i < 0 {
		panic(fmt.Sprintf("refCache: block %d not indexed under %#x", b, h))
	}
	l = slices.Delete(l, i, i+1)
	if len(l) == 0 {
		delete(c.index, h)
	} else {
		c.index[h] = l
	}
}

// lookup returns the earliest indexed block holding h.
func (c *refCache) lookup(h uint64) (int32, bool) {
	l := c.index[h]
	if len(l) == 0 {
		return 0, false
	}
	return l[0], true
}

// acquire is a prefix hit on b.
func (c *refCache) acquire(b int32) {
	if c.ref[b] == 0 {
		i := slices.Index(c.free, b)
		c.free = slices.Delete(c.free, i, i+1)
	}
	c.ref[b]++
}

// commit indexes b under h: a block without a hash takes it, a private
// block holding h becomes indexed (a running request's block promoted),
// and any other block keeps what it holds.
func (c *refCache) commit(b int32, h uint64) {
	switch {
	case c.hash[b] == 0:
		c.hash[b] = h
	case c.private[b] && c.hash[b] == h:
		c.private[b] = false
	default:
		return
	}
	c.index[h] = append(c.index[h], b)
}

// commitPrivate gives b hash h without indexing it.
func (c *refCache) commitPrivate(b int32, h uint64) {
	if c.hash[b] != 0 {
		return
	}
	c.hash[b], c.private[b] = h, true
}

// promote indexes free private block b under its hash h.
func (c *refCache) promote(b int32, h uint64) {
	if c.ref[b] != 0 || !c.private[b] || c.hash[b] != h {
		panic(fmt.Sprintf("refCache: promotion of block %d (ref %d, private %v, hash %#x, want %#x)", b, c.ref[b], c.private[b], c.hash[b], h))
	}
	c.private[b] = false
	c.index[h] = append(c.index[h], b)
}

// release drops a reference from each of table's blocks, last first.
func (c *refCache) release(table []int32) {
	for i := len(table) - 1; i >= 0; i-- {
		b := table[i]
		if c.ref[b] <= 0 {
			panic(fmt.Sprintf("refCache: release of free block %d", b))
		}
		if c.ref[b]--; c.ref[b] == 0 {
			c.free = append(c.free, b)
		}
	}
}

// holds reports whether b still holds h.
func (c *refCache) holds(b int32, h uint64) bool { return c.hash[b] == h }

// kept returns how many of blocks, counted from the first, no eviction
// after the since-th took.
func (c *refCache) kept(blocks []int32, since int64) int {
	for i, b := range blocks {
		if c.evicted[b] > since {
			return i
		}
	}
	return len(blocks)
}

// cached returns the number of indexed blocks.
func (c *refCache) cached() int {
	n := 0
	for _, l := range c.index {
		n += len(l)
	}
	return n
}
