package kvcache

import (
	"slices"
	"testing"
)

func TestTierLRU(t *testing.T) {
	tr := NewTier("host", 3)
	for _, h := range []uint64{1, 2, 3} {
		if _, ev, ok := tr.Insert(h); !ok || ev {
			t.Fatalf("insert %d: ok %v evicted %v", h, ok, ev)
		}
	}
	if tr.Contains(1) || !tr.Has(1) {
		t.Error("a pending block hits")
	}
	// Full of pending blocks: nothing can be evicted, the store is dropped.
	if _, _, ok := tr.Insert(4); ok || tr.Dropped != 1 {
		t.Errorf("insert into a tier full of pending blocks: ok %v, dropped %d", ok, tr.Dropped)
	}
	for _, h := range []uint64{1, 2, 3} {
		tr.Complete(h)
	}
	tr.Touch(1) // 2 is now the least recently used
	tr.Pin(2)   // ... but a load reads it: 3 goes
	v, ev, ok := tr.Insert(4)
	if !ok || !ev || v != 3 {
		t.Fatalf("insert 4 evicted %d (%v, %v), want 3", v, ev, ok)
	}
	if got := tr.LRU(nil); !slices.Equal(got, []uint64{2, 1, 4}) {
		t.Errorf("LRU order %v, want [2 1 4]", got)
	}
	tr.Unpin(2)
	tr.Complete(4)
	if v, _, _ := tr.Insert(5); v != 2 {
		t.Errorf("evicted %d, want 2", v)
	}
	// Inserting a held block only touches it.
	if _, ev, ok := tr.Insert(1); !ok || ev || tr.Len() != 3 {
		t.Errorf("re-insert: ok %v evicted %v len %d", ok, ev, tr.Len())
	}
	if got := tr.LRU(nil); !slices.Equal(got, []uint64{4, 5, 1}) {
		t.Errorf("LRU order %v, want [4 5 1]", got)
	}
	if !tr.Remove(5) || tr.Has(5) || tr.Len() != 2 {
		t.Error("remove")
	}
	if tr.Stores != 5 || tr.Evictions != 2 {
		t.Errorf("stores %d evictions %d", tr.Stores, tr.Evictions)
	}
	zero := NewTier("none", 0)
	if _, _, ok := zero.Insert(1); ok {
		t.Error("a tier of no capacity took a block")
	}
}
