package kvcache

import (
	"math/rand/v2"
	"testing"
)

// The tier index against a map, under the churn of a full tier: keys in
// groups (TierKey) over few buckets, so that groups share buckets and
// entries overflow into the next ones, and random keys besides.
func TestTierIndexChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const capacity = 64
	x := newTierIndex(capacity)
	want := map[uint64]int32{}
	hashes := make([]uint64, capacity)
	var free []int32
	for s := range int32(capacity) {
		free = append(free, s)
	}
	var held []uint64
	overflowed := false
	for step := range 200_000 {
		var h uint64
		if step%3 == 0 {
			h = rng.Uint64() | 1
		} else {
			// Few groups and seeds: groups meet in buckets.
			g := rng.Uint64N(40)
			i := rng.Uint64N(GroupBlocks)
			h = TierKey((rng.Uint64N(4)*1000+g*GroupBlocks+i+1)<<32, g, int64(g*GroupBlocks+i))
		}
		if _, ok := want[h]; !ok && len(free) > 0 {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			x.add(h, s)
			hashes[s], want[h] = h, s
			held = append(held, h)
		} else if len(held) > 0 {
			k := rng.IntN(len(held))
			d := held[k]
			held[k] = held[len(held)-1]
			held = held[:len(held)-1]
			x.del(d, want[d])
			free = append(free, want[d])
			delete(want, d)
		}
		for _, b := range x.buckets {
			overflowed = overflowed || b.over > 0
		}
		if step%97 == 0 {
			for h, s := range want {
				if got, ok := x.get(h, hashes); !ok || got != s {
					t.Fatalf("step %d: get(%#x) = %d, %v; want %d", step, h, got, ok, s)
				}
			}
			if _, ok := x.get(rng.Uint64()|2, hashes); ok {
				t.Fatalf("step %d: a key never added found", step)
			}
		}
	}
	if !overflowed {
		t.Error("no entry ever overflowed its bucket: the test does not test probing")
	}
	for h := range want {
		x.del(h, want[h])
	}
	for i, b := range x.buckets {
		if b.tags != 0 || b.over != 0 {
			t.Fatalf("bucket %d after deleting everything: tags %#x, over %d", i, b.tags, b.over)
		}
	}
}

// A group's keys fall in one bucket, each at its place.
func TestTierKeyGroups(t *testing.T) {
	x := newTierIndex(1 << 10)
	hashes := make([]uint64, GroupBlocks)
	for i := range int64(GroupBlocks) {
		h := TierKey(uint64(i+1)*0x9e3779b97f4a7c15, 42, 16+i)
		hashes[i] = h
		x.add(h, int32(i))
	}
	b, _, _ := x.home(hashes[0])
	bk := x.buckets[b]
	for i := range GroupBlocks {
		if bk.slots[i] != int32(i) || bk.tags>>(8*i)&0x80 == 0 {
			t.Fatalf("bucket %+v: entry %d not in its place", bk, i)
		}
	}
}
