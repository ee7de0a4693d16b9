package kvcache

import (
	"math/rand/v2"
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
