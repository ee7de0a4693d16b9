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
	slots := make([]tierSlot, capacity)
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
			slots[s].hash, want[h] = h, s
			x.add(h, s, slots)
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
				if got, ok := x.get(h, slots); !ok || got != s {
					t.Fatalf("step %d: get(%#x) = %d, %v; want %d", step, h, got, ok, s)
				}
			}
			if _, ok := x.get(rng.Uint64()|2, slots); ok {
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
	slots := make([]tierSlot, GroupBlocks)
	for i := range int64(GroupBlocks) {
		h := TierKey(uint64(i+1)*0x9e3779b97f4a7c15, 42, 16+i)
		slots[i].hash = h
		x.add(h, int32(i), slots)
	}
	b, _, _ := x.home(slots[0].hash)
	bk := x.buckets[b]
	for i := range GroupBlocks {
		if bk.slots[i] != int32(i) || bk.tags>>(8*i)&0x80 == 0 {
			t.Fatalf("bucket %+v: entry %d not in its place", bk, i)
		}
	}
}

// The index grows from room for initialEntries to a tier's worth of
// entries, keeping four places an entry, and finds every entry it holds
// (groups and random keys) before, across and after its growth.
func TestTierIndexGrows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const capacity = 20_000
	x := newTierIndex(capacity)
	if got := len(x.buckets) * GroupBlocks; got != 4*initialEntries {
		t.Fatalf("a new index has %d places, want %d", got, 4*initialEntries)
	}
	slots := make([]tierSlot, capacity)
	want := map[uint64]int32{}
	check := func() {
		t.Helper()
		for h, s := range want {
			if got, ok := x.get(h, slots); !ok || got != s {
				t.Fatalf("%d entries: get(%#x) = %d, %v; want %d", len(want), h, got, ok, s)
			}
		}
		for range 100 {
			if _, ok := x.get(rng.Uint64()|1<<63, slots); ok {
				t.Fatalf("%d entries: a key never added found", len(want))
			}
		}
	}
	grew := 0
	for s := range int32(capacity) {
		h := rng.Uint64() &^ (1 << 63)
		if s%3 != 0 {
			g := uint64(s / GroupBlocks)
			h = TierKey(uint64(s+1)*0x9e3779b97f4a7c15&^(1<<63), g, int64(s))
		}
		if _, dup := want[h]; dup {
			continue
		}
		n := len(x.buckets)
		slots[s].hash, want[h] = h, s
		x.add(h, s, slots)
		if len(x.buckets) != n {
			grew++
			if len(x.buckets) != 2*n {
				t.Fatalf("grew from %d to %d buckets", n, len(x.buckets))
			}
			check()
		}
		if 4*x.n > len(x.buckets)*GroupBlocks {
			t.Fatalf("%d entries in %d places", x.n, len(x.buckets)*GroupBlocks)
		}
	}
	if grew < 5 || x.n != len(want) {
		t.Fatalf("grew %d times, %d entries for %d keys", grew, x.n, len(want))
	}
	check()
	for h, s := range want {
		x.del(h, s)
	}
	for i, b := range x.buckets {
		if b.tags != 0 || b.over != 0 {
			t.Fatalf("bucket %d after deleting everything: tags %#x, over %d", i, b.tags, b.over)
		}
	}
}
