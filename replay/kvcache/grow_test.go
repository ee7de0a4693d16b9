package kvcache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGrowKeepsContents: grow keeps every value across growth, gives room
// for n more, at least doubles the capacity when it grows and returns s
// itself when it has the room.
func TestGrowKeepsContents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s []int32
	var want []int32
	for range 300 {
		n := rng.IntN(3000)
		before := cap(s)
		g := grow(s, n)
		if !slices.Equal(g, want) {
			t.Fatalf("grow(len %d, %d) changed the contents", len(s), n)
		}
		if cap(g)-len(g) < n {
			t.Fatalf("grow(len %d cap %d, %d): cap %d", len(s), before, n, cap(g))
		}
		if before-len(s) >= n && !unsafeSame(g, s) {
			t.Fatalf("grow(len %d cap %d, %d) reallocated with room", len(s), before, n)
		}
		if before-len(s) < n && cap(g) < 2*before {
			t.Fatalf("grow(cap %d, %d): cap %d, not doubled", before, n, cap(g))
		}
		for range rng.IntN(n + 1) {
			v := rng.Int32()
			g = append(g, v)
			want = append(want, v)
		}
		s = g
	}
	if !slices.Equal(s, want) {
		t.Fatal("contents lost")
	}
	// The exported form and a chain's hashes: the same.
	h := []uint64{1, 2, 3}
	if g := Grow(h, 1<<16); !slices.Equal(g, h) || cap(g) < 3+1<<16 {
		t.Fatalf("Grow: %v cap %d", g[:3], cap(g))
	}
}

func unsafeSame(a, b []int32) bool {
	return cap(a) == cap(b) && (cap(a) == 0 || &a[:1][0] == &b[:1][0])
}
