package kvcache

import (
	"math/rand/v2"
	"testing"
)

// The index agrees with a map under random churn. Keys share
// fingerprints and home slots on purpose (few distinct high bits), so
// probe runs, backward shifts and fingerprint confirmation all happen.
func TestIndexChurn(t *testing.T) {
	for _, n := range []int64{4, 1000} {
		x := newIndex(n)
		blocks := make([]uint64, n)
		var free []int32
		for b := range int32(n) {
			free = append(free, b)
		}
		ref := map[uint64]int32{}
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		keys := make([]uint64, 3*n)
		for i := range keys {
			// Multiply back by the inverse of the fingerprint
			// multiplier so that many keys share a fingerprint.
			keys[i] = (uint64(rng.IntN(8))<<32 | uint64(i+1)) * 0xf1de83e19937733d
		}
		for step := range 200000 {
			h := keys[rng.IntN(len(keys))]
			b, in := ref[h]
			switch {
			case in && rng.IntN(2) == 0:
				x.del(h, b)
				blocks[b] = 0
				free = append(free, b)
				delete(ref, h)
			case !in && len(free) > 0:
				b := free[len(free)-1]
				x.add(h, b)
				free = free[:len(free)-1]
				blocks[b] = h
				ref[h] = b
			}
			if step%997 == 0 {
				for _, k := range keys {
					got, ok := x.get(k, blocks)
					want, wok := ref[k]
					if ok != wok || got != want {
						t.Fatalf("step %d key %#x: index %d %v, map %d %v", step, k, got, ok, want, wok)
					}
				}
				if x.n != len(ref) {
					t.Fatalf("n %d, map %d", x.n, len(ref))
				}
			}
		}
	}
}

func TestFingerprintInverse(t *testing.T) {
	// 0xf1de83e19937733d is the multiplicative inverse of the
	// fingerprint multiplier mod 2^64; the churn test relies on it.
	a, b := uint64(0x9e3779b97f4a7c15), uint64(0xf1de83e19937733d)
	if a*b != 1 {
		t.Fatal("not the inverse")
	}
}

// Duplicates: get returns the earliest added still present.
func TestIndexDuplicates(t *testing.T) {
	x := newIndex(8)
	blocks := make([]uint64, 8)
	const h, g = 0x1234, 0x1234 + 1<<40 // different hashes, near slots
	for _, b := range []int32{3, 5, 6} {
		blocks[b] = h
		x.add(h, b)
	}
	blocks[4] = g
	x.add(g, 4)
	for _, c := range []struct {
		del  int32
		want int32
	}{{-1, 3}, {3, 5}, {6, 5}, {5, -1}} {
		if c.del >= 0 {
			x.del(h, c.del)
			blocks[c.del] = 0
		}
		b, ok := x.get(h, blocks)
		if c.want < 0 && ok || c.want >= 0 && b != c.want {
			t.Errorf("after deleting %d: get = %d %v, want %d", c.del, b, ok, c.want)
		}
	}
	if b, ok := x.get(g, blocks); !ok || b != 4 {
		t.Errorf("other key lost: %d %v", b, ok)
	}
}
