package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFreeQueueMatchesReference drives a small cache through random
// allocations, prefix hits on free blocks (which leave stale ring
// entries) and releases, enough to compact the ring many times, and checks
// after every operation that the blocks Allocate hands out are exactly
// those a plain slice kept in LRU order would give, and that Check holds.
func TestFreeQueueMatchesReference(t *testing.T) {
	t.Run("compaction", func(t *testing.T) { freeQueueMatchesReference(t) })
	t.Run("rebase", func(t *testing.T) {
		// Positions past 1,000 renumber the queue from 0.
		defer func(p int64) { maxPos = p }(maxPos)
		maxPos = 1000
		freeQueueMatchesReference(t)
	})
}

func freeQueueMatchesReference(t *testing.T) {
	const n = 40
	c := New(n)
	ref := make([]int32, n) // free blocks, eviction order
	for b := range ref {
		ref[b] = int32(b)
	}
	var held [][]int32 // blocks held by live "requests"
	rng := rand.New(rand.NewPCG(1, 2))
	for op := range 100000 {
		// Allocations are rare, so that hits and releases pile stale
		// entries up behind the live ones and fill the ring.
		switch k := rng.IntN(50); {
		case k == 0 && len(ref) > 0: // allocate
			m := int64(1 + rng.IntN(min(len(ref), 6)))
			got, ok := c.Allocate(nil, m)
			if !ok {
				t.Fatalf("op %d: Allocate(%d) failed with %d free", op, m, len(ref))
			}
			if want := ref[:m]; !slices.Equal(got, want) {
				t.Fatalf("op %d: Allocate gave %v, LRU order says %v", op, got, want)
			}
			ref = slices.Clone(ref[m:])
			held = append(held, got)
		case k < 25 && len(ref) > 0: // a prefix hit takes a free block from the middle
			i := rng.IntN(len(ref))
			b := ref[i]
			c.Acquire(b)
			ref = slices.Delete(ref, i, i+1)
			held = append(held, []int32{b})
		case len(held) > 0: // release a request, tail block first
			i := rng.IntN(len(held))
			bs := held[i]
			c.Release(bs)
			for j := len(bs) - 1; j >= 0; j-- {
				ref = append(ref, bs[j])
			}
			held = slices.Delete(held, i, i+1)
		}
		if c.NumFree() != int64(len(ref)) {
			t.Fatalf("op %d: %d free, reference has %d", op, c.NumFree(), len(ref))
		}
		if err := c.Check(); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	if c.compactions < 10 {
		t.Fatalf("%d compactions; the test does not exercise them", c.compactions)
	}
}
