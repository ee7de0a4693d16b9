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
		blocks := make([]block, n)
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
				blocks[b].hash = 0
				free = append(free, b)
				delete(ref, h)
			case !in && len(free) > 0:
				b := free[len(free)-1]
				if !x.add(h, b, blocks) {
					t.Fatal("add of an absent key failed")
				}
				free = free[:len(free)-1]
				blocks[b].hash = h
				ref[h] = b
			case in:
				if x.add(h, 0, blocks) {
					t.Fatal("add of a present key succeeded")
				}
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
