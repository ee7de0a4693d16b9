package analyze

import (
	"cmp"
	"errors"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// A CacheCurve is the hit rate of an ideal block-level LRU prefix cache as
// a function of its capacity, for every capacity at once: the trace's
// theoretical reuse (as in the Mooncake paper), not any engine's behaviour.
//
// The rule: requests are taken in arrival order; a request's hit is its
// longest prefix of hash_ids blocks that are all in the cache; then its
// blocks are touched first to last (moved to most recently used, inserted
// when absent, evicting the least recently used block beyond capacity).
type CacheCurve struct {
	BlockSize int64
	Requests  int   // requests with hash_ids
	Blocks    int64 // block lookups (Σ len(hash_ids))
	Tokens    int64 // tokens in those blocks (the last block of a prompt may be partial)
	Distinct  int64 // distinct blocks: the capacity beyond which nothing more hits
	// Points are the capacities (in blocks, ascending) at which the hits
	// grow, with the cumulative hits at that capacity: a cache of c blocks
	// hits Points[i].HitBlocks for the largest i with Capacity ≤ c.
	Points []CurvePoint
}

// A CurvePoint is the number of block and token hits of an LRU cache of
// CapacityBlocks blocks.
type CurvePoint struct {
	CapacityBlocks int64
	HitBlocks      int64
	HitTokens      int64
}

// At returns the hits of a cache of capBlocks blocks.
func (c *CacheCurve) At(capBlocks int64) (hitBlocks, hitTokens int64) {
	i, found := slices.BinarySearchFunc(c.Points, capBlocks, func(p CurvePoint, t int64) int { return cmp.Compare(p.CapacityBlocks, t) })
	if !found {
		i--
	}
	if i < 0 {
		return 0, 0
	}
	return c.Points[i].HitBlocks, c.Points[i].HitTokens
}

// HitRate returns the block and token hit rates of a cache of capBlocks
// blocks (capacity in tokens: capBlocks × BlockSize).
func (c *CacheCurve) HitRate(capBlocks int64) (byBlocks, byTokens float64) {
	hb, ht := c.At(capBlocks)
	if c.Blocks > 0 {
		byBlocks = float64(hb) / float64(c.Blocks)
	}
	if c.Tokens > 0 {
		byTokens = float64(ht) / float64(c.Tokens)
	}
	return byBlocks, byTokens
}

// ComputeCacheCurve computes the LRU hit-rate curve of the requests'
// hash_ids in one pass with Mattson's stack distances: a block is in an
// LRU cache of c blocks iff fewer than c distinct blocks were used since
// its last use, so the distance of each block at the start of its request
// decides its hit at every capacity at once; a prefix hits when the
// largest distance along it fits. Distances come from a Fenwick tree over
// access times (one mark per block, at its last access), which makes the
// pass O(n log n) in the number of block lookups.
//
// Requests are taken in arrival order (stable, so ties and requests
// without arrival keep their input order). Block sizes come from each
// request's block_size; the requests must agree on one.
func ComputeCacheCurve(reqs []*trace.Request) (*CacheCurve, error) {
	order := make([]*trace.Request, 0, len(reqs))
	for _, r := range reqs {
		if len(r.HashIDs) > 0 {
			order = append(order, r)
		}
	}
	if len(order) == 0 {
		return nil, errors.New("cache curve: no request has hash_ids")
	}
	byArrival := func(a, b *trace.Request) int { return cmp.Compare(a.Arrival.Or(0), b.Arrival.Or(0)) }
	if !slices.IsSortedFunc(order, byArrival) {
		slices.SortStableFunc(order, byArrival)
	}
	c := &CacheCurve{BlockSize: order[0].BlockSize.Or(0)}
	if c.BlockSize <= 0 {
		return nil, errors.New("cache curve: requests have hash_ids without block_size")
	}
	var lookups, maxID int64 = 0, -1
	for _, r := range order {
		lookups += int64(len(r.HashIDs))
		for _, h := range r.HashIDs {
			maxID = max(maxID, h)
		}
	}
	if lookups >= 1<<31-1 {
		return nil, errors.New("cache curve: more than 2³¹ block lookups")
	}
	st := newLRUStack(lookups, maxID)
	// Hits by prefix-max distance: block counts densely; tokens as blocks ×
	// block size minus the shortfall of partial last blocks, kept sparse.
	var hist []int32
	var short []shortfall
	dist := make([]int64, 0, 64)
	for _, r := range order {
		if r.BlockSize.Or(0) != c.BlockSize {
			return nil, errors.New("cache curve: requests have different block sizes")
		}
		c.Requests++
		in, hasIn := r.InputTokens.Get()
		// Distances before any of this request's blocks is touched; after
		// the first cold block nothing further in the prefix can hit.
		dist = dist[:0]
		pmax := int64(0)
		for _, h := range r.HashIDs {
			d := st.distance(h)
			if d == 0 {
				break
			}
			pmax = max(pmax, d)
			dist = append(dist, pmax)
		}
		c.Blocks += int64(len(r.HashIDs))
		for j := range r.HashIDs {
			tok := c.BlockSize
			if hasIn {
				tok = min(c.BlockSize, max(0, in-int64(j)*c.BlockSize))
			}
			c.Tokens += tok
			if j >= len(dist) {
				continue
			}
			d := dist[j]
			for int64(len(hist)) <= d {
				hist = append(hist, 0)
			}
			hist[d]++
			if tok < c.BlockSize {
				short = append(short, shortfall{d, c.BlockSize - tok})
			}
		}
		for _, h := range r.HashIDs {
			st.touch(h)
		}
	}
	c.Distinct = st.live
	slices.SortFunc(short, func(a, b shortfall) int { return cmp.Compare(a.d, b.d) })
	var cb, ct int64
	k := 0
	for d, n := range hist {
		if n == 0 {
			continue
		}
		cb += int64(n)
		ct += int64(n) * c.BlockSize
		for ; k < len(short) && short[k].d == int64(d); k++ {
			ct -= short[k].tokens
		}
		c.Points = append(c.Points, CurvePoint{CapacityBlocks: int64(d), HitBlocks: cb, HitTokens: ct})
	}
	return c, nil
}

// A shortfall is the tokens a partial block hit at distance d lacks.
type shortfall struct{ d, tokens int64 }

// An lruStack answers LRU stack distances. Each block seen has one mark in
// a Fenwick tree at the time slot of its last access, so the blocks used
// since are the marks after it. The tree has one slot per lookup of the
// pass (known in advance), so it never needs renumbering: 4 bytes per
// lookup, plus 4 per block id for the id → slot table.
type lruStack struct {
	direct []int32         // block id → slot of last access, 0 = never; ids in [0, len(direct))
	ids    map[int64]int32 // the other ids
	tree   []int32         // Fenwick tree over slots, 1-based
	now    int32           // slots used
	live   int64           // distinct blocks seen
}

// directLimit bounds the ids looked up by slice rather than map: trace
// formats number blocks densely from 0 (Mooncake), which a slice serves
// without hashing.
const directLimit = 1 << 26

// newLRUStack prepares a stack for lookups touches of blocks whose
// non-negative ids are below maxID+1.
func newLRUStack(lookups int64, maxID int64) *lruStack {
	s := &lruStack{ids: map[int64]int32{}, tree: make([]int32, lookups+1)}
	if maxID >= 0 {
		s.direct = make([]int32, min(maxID+1, directLimit, 4*lookups+1024))
	}
	return s
}

// slot returns the slot of block h's last access, 0 if never used.
func (s *lruStack) slot(h int64) int32 {
	if h >= 0 && h < int64(len(s.direct)) {
		return s.direct[h]
	}
	return s.ids[h]
}

// distance returns the LRU stack distance of block h (1 = most recently
// used), or 0 if h was never used.
func (s *lruStack) distance(h int64) int64 {
	t := s.slot(h)
	if t == 0 {
		return 0
	}
	// Marks after slot t, plus h itself.
	return s.live - int64(s.prefix(t)) + 1
}

// touch makes h the most recently used block.
func (s *lruStack) touch(h int64) {
	if t := s.slot(h); t == 0 {
		s.live++
	} else {
		s.add(t, -1)
	}
	s.now++
	s.add(s.now, 1)
	if h >= 0 && h < int64(len(s.direct)) {
		s.direct[h] = s.now
	} else {
		s.ids[h] = s.now
	}
}

func (s *lruStack) prefix(slot int32) int32 {
	sum := int32(0)
	for ; slot > 0; slot &= slot - 1 {
		sum += s.tree[slot]
	}
	return sum
}

func (s *lruStack) add(slot int32, v int32) {
	for n := int32(len(s.tree)); slot < n; slot += slot & -slot {
		s.tree[slot] += v
	}
}
