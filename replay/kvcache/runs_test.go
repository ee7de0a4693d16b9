package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFollow checks followUp and followDown, which compare eight blocks
// at a time, against a block at a time, on stretches of consecutive ids
// broken at every offset.
func TestFollow(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for range 20000 {
		b := int32(rng.IntN(1000))
		up := rng.IntN(2) == 0
		step := int32(1)
		if !up {
			step = -1
		}
		s := make([]int32, rng.IntN(40))
		for i := range s {
			s[i] = b + step*int32(i)
		}
		if len(s) > 0 && rng.IntN(4) != 0 {
			s[rng.IntN(len(s))] += int32(1 + rng.IntN(3))
		}
		want := 0
		for want < len(s) && s[want] == b+step*int32(want) {
			want++
		}
		got := followUp(s, b)
		if !up {
			got = followDown(s, b)
		}
		if got != want {
			t.Fatalf("%v from %d (up %v): %d follow, want %d", s, b, up, got, want)
		}
	}
}

// TestEvictSpanTopGone checks evictSpan's hint (span.top) once the piece
// it names is gone: a span whose top piece was evicted whole, its ids
// handed out without names (their records and start bits stale), and a
// referenced piece below it, must go on to the free piece under that.
func TestEvictSpanTopGone(t *testing.T) {
	c := New(8)
	a, ok := c.AllocateNamed(nil, 8, 8) // ids 0…7, one run: the only blocks
	if !ok {
		t.Fatal("no room")
	}
	c.Release(a, 0) // a span evicted from 7 down
	c.Acquire(3)    // pieces 0…2 and 4…7 free, 3 held
	if got, ok := c.AllocateNamed(nil, 4, 0); !ok || !slices.Equal(got, []int32{Anonymous, Anonymous, Anonymous, Anonymous}) {
		t.Fatalf("first allocation: %v %v", got, ok) // 7…4, the top piece whole
	}
	got, ok := c.AllocateNamed(nil, 1, 1)
	if !ok || !slices.Equal(got, []int32{2}) {
		t.Fatalf("second allocation: %v %v, want [2] (3 is held)", got, ok)
	}
	mustCheck(t, c)
}
