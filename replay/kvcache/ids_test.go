package kvcache

import (
	"math/rand/v2"
	"testing"
)

// TestNamedIDsStayConsecutive replays, on a small cache, what a long
// replay does to the ids of no block: requests allocate their prompt's
// blocks, the shared half named and the private half anonymous, and
// release them into the free queue (a span, an anonymous run); decode
// steps take one anonymous block at a time, each the least recently
// used, so that the named blocks at the queue's head are evicted one by
// one and their ids come back one at a time. A prefix named late in the
// run must still get its ids in runs of consecutive ones (a run record,
// a free-queue entry, an index entry a group), as one named early does:
// with the ids taken from the stack's top range alone (before takeIDs
// looked for big ranges), the runs were of 1.7 blocks on average in the
// first half and 1.5 in the second; now of 24.
func TestNamedIDsStayConsecutive(t *testing.T) {
	const blocks, shared, prefix = 4096, 48, 96
	c := New(blocks)
	rng := rand.New(rand.NewPCG(3, 4))
	var held, decoding [][]int32
	var runs, named [2]int // per half of the rounds
	const rounds = 6000
	for round := range rounds {
		// Room first: the oldest prefixes and decoders leave.
		for c.NumFree() < prefix+8 {
			if len(held) > 0 && (len(decoding) == 0 || rng.IntN(2) == 0) {
				c.Release(held[0], prefix)
				held = held[1:]
			} else {
				c.Release(decoding[0], 0)
				decoding = decoding[1:]
			}
		}
		dst, ok := c.AllocateNamed(nil, prefix, shared)
		if !ok {
			t.Fatalf("round %d: no room for %d blocks with %d free", round, prefix, c.NumFree())
		}
		half := 2 * round / rounds
		named[half] += shared
		runs[half]++
		for i := 1; i < shared; i++ {
			if d := dst[i] - dst[i-1]; d != 1 && d != -1 {
				runs[half]++
			}
		}
		if rng.IntN(4) == 0 {
			c.Release(dst, prefix) // a prefix that leaves at once
		} else {
			held = append(held, dst)
		}
		// Decode steps: a block each, anonymous.
		for range 1 + rng.IntN(24) {
			if c.NumFree() == 0 {
				break
			}
			one, _ := c.AllocateNamed(nil, 1, 0)
			decoding = append(decoding, one)
		}
		if round%500 == 0 {
			if err := c.Check(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	for h := range 2 {
		t.Logf("half %d: %d named blocks in %d runs (%.1f a run)", h, named[h], runs[h], float64(named[h])/float64(runs[h]))
	}
	if late := float64(named[1]) / float64(runs[1]); late < 16 {
		t.Errorf("late prefixes named in runs of %.1f blocks on average, want 16 or more (early ones: %.1f)", late, float64(named[0])/float64(runs[0]))
	}
}
