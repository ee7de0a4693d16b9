package kvcache

import "testing"

func keys(ids []int64, prompt, out int64, unique uint64) []Run {
	return TokenKeys(nil, ids, 4, prompt, out, unique)
}

// admit runs one request through the tree as the SGLang worker does:
// match, lock, allocate the rest, insert, and returns the locked node.
func admit(t *testing.T, tr *Radix, key []Run, n int64) (hit int64, node *RadixNode) {
	t.Helper()
	hit, node = tr.Match(key, n)
	tr.Lock(node)
	if !tr.Alloc(n - hit) {
		t.Fatalf("alloc %d failed: free %d evictable %d", n-hit, tr.Free(), tr.Evictable())
	}
	newNode := tr.Insert(key, hit, n)
	tr.Lock(newNode)
	tr.Unlock(node)
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	return hit, newNode
}

func TestTokenKeys(t *testing.T) {
	// 10 prompt tokens over blocks of 4: 4 + 4 + 2 shared, then 3
	// generated tokens unique.
	k := keys([]int64{7, 8, 9}, 10, 3, 1)
	if len(k) != 4 || k[0].Len != 4 || k[1].Len != 4 || k[2].Len != 2 || k[3].Len != 3 {
		t.Fatalf("runs %+v", k)
	}
	// Prompt longer than the ids cover: the rest is unique.
	k2 := keys([]int64{7}, 10, 0, 2)
	if len(k2) != 2 || k2[0] != k[0] || k2[1].Len != 6 || k2[1].Key == k[3].Key {
		t.Fatalf("runs %+v vs %+v", k2, k)
	}
	// Same ids, another block size: other tokens.
	if k3 := TokenKeys(nil, []int64{7}, 8, 8, 0, 1); k3[0].Key == k[0].Key {
		t.Fatal("block size not part of the key")
	}
	// No ids: one unique run.
	if k4 := keys(nil, 5, 2, 3); len(k4) != 1 || k4[0].Len != 7 {
		t.Fatalf("runs %+v", k4)
	}
}

func TestRadixSharing(t *testing.T) {
	tr := NewRadix(100)
	a := keys([]int64{1, 2, 3}, 12, 0, 1)
	hit, na := admit(t, tr, a, 12)
	if hit != 0 || tr.TreeTokens() != 12 || tr.Private() != 0 || tr.Evictable() != 0 {
		t.Fatalf("hit %d tree %d private %d evictable %d", hit, tr.TreeTokens(), tr.Private(), tr.Evictable())
	}
	// b's ids 1, 2, 4 share a's first two blocks: 8 tokens hit, the
	// other 3 are added under a new branch.
	b := keys([]int64{1, 2, 4}, 11, 0, 2)
	hit, nb := admit(t, tr, b, 11)
	if hit != 8 || tr.TreeTokens() != 12+3 {
		t.Fatalf("hit %d tree %d", hit, tr.TreeTokens())
	}
	// c: a shorter prompt of a's ids matches inside the last block: 10
	// tokens, splitting a's edge.
	c := keys([]int64{1, 2, 3}, 10, 0, 3)
	if n, _ := tr.Match(c, 10); n != 10 {
		t.Fatalf("c matched %d, want 10", n)
	}
	// A request without ids shares nothing.
	if n, _ := tr.Match(keys(nil, 12, 0, 4), 12); n != 0 {
		t.Fatalf("matched %d without ids", n)
	}
	// Match limit: at most limit tokens.
	if n, _ := tr.Match(a, 5); n != 5 {
		t.Fatalf("limited match %d", n)
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	tr.Unlock(na)
	tr.Unlock(nb)
	if tr.Evictable() != 15 {
		t.Fatalf("evictable %d, want 15", tr.Evictable())
	}
}

func TestRadixEvictionLeafFirstLRU(t *testing.T) {
	tr := NewRadix(20)
	a := keys([]int64{1, 2}, 8, 0, 1) // 8 tokens
	b := keys([]int64{1, 3}, 8, 0, 2) // shares 4 with a
	_, na := admit(t, tr, a, 8)
	_, nb := admit(t, tr, b, 8)
	tr.Unlock(na)
	tr.Unlock(nb)
	// Tree: [1](4) -> [2](4), [3](4). a's leaf is least recent.
	if tr.TreeTokens() != 12 {
		t.Fatalf("tree %d", tr.TreeTokens())
	}
	if n := tr.Evict(1); n != 4 {
		t.Fatalf("evicted %d, want a whole leaf of 4", n)
	}
	if n, _ := tr.Match(a, 8); n != 4 {
		t.Fatalf("a's leaf should be gone (matched %d)", n)
	}
	if n, _ := tr.Match(b, 8); n != 8 {
		t.Fatalf("b's leaf should stay (matched %d)", n)
	}
	// A locked path is never evicted; the parent goes only after its
	// last child.
	_, nb2 := tr.Match(b, 8)
	tr.Lock(nb2)
	if n := tr.Evict(100); n != 0 {
		t.Fatalf("evicted %d locked tokens", n)
	}
	tr.Unlock(nb2)
	if n := tr.Evict(100); n != 8 || tr.TreeTokens() != 0 || tr.Evictions != 12 {
		t.Fatalf("evicted %d, tree %d, evictions %d", n, tr.TreeTokens(), tr.Evictions)
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestRadixAllocEvicts(t *testing.T) {
	tr := NewRadix(10)
	_, n := admit(t, tr, keys(nil, 6, 0, 1), 6)
	if tr.Alloc(5) {
		t.Fatal("allocated over capacity while the tree is held")
	}
	tr.Unlock(n)
	if !tr.Alloc(5) || tr.TreeTokens() != 0 || tr.Free() != 5 {
		t.Fatalf("alloc with eviction: tree %d free %d", tr.TreeTokens(), tr.Free())
	}
	tr.FreePrivate(5)
	if tr.Free() != 10 {
		t.Fatalf("free %d", tr.Free())
	}
}

func TestRadixDuplicateInsertFrees(t *testing.T) {
	// Two requests compute the same prefix at once (neither hit): the
	// second insert finds the tokens there and frees its copies.
	tr := NewRadix(100)
	a := keys([]int64{1, 2}, 8, 0, 1)
	tr.Alloc(8)
	tr.Alloc(8)
	tr.Insert(a, 0, 8)
	tr.Insert(keys([]int64{1, 2}, 8, 0, 2), 0, 8)
	if tr.TreeTokens() != 8 || tr.Private() != 0 {
		t.Fatalf("tree %d private %d", tr.TreeTokens(), tr.Private())
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
}

// Without eviction, Match finds the longest common token prefix with any
// inserted sequence, as a token-by-token scan of them all does.
func TestRadixMatchesNaive(t *testing.T) {
	rng := uint64(1)
	next := func(n int) int64 {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int64((rng >> 33) % uint64(n))
	}
	type tok struct {
		key uint64
		pos int64
	}
	expand := func(k []Run) []tok {
		var out []tok
		for _, r := range k {
			for range r.Len {
				out = append(out, tok{r.Key, int64(len(out))})
			}
		}
		return out
	}
	tr := NewRadix(1 << 30)
	var inserted [][]tok
	for i := range 300 {
		ids := make([]int64, 1+next(4))
		for j := range ids {
			ids[j] = next(3) + 10*int64(j)
		}
		prompt := 1 + next(int(4*len(ids)+3))
		k := TokenKeys(nil, ids, 4, prompt, next(3), uint64(i)+1)
		toks := expand(k)
		limit := int64(len(toks))
		var want int64
		for _, s := range inserted {
			var n int64
			for n < limit && n < int64(len(s)) && s[n] == toks[n] {
				n++
			}
			want = max(want, n)
		}
		got, node := tr.Match(k, limit)
		if got != want {
			t.Fatalf("sequence %d: matched %d, want %d", i, got, want)
		}
		tr.Lock(node)
		tr.Alloc(limit - got)
		tr.Unlock(node)
		tr.Insert(k, got, limit)
		inserted = append(inserted, toks)
		if err := tr.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Private() != 0 {
		t.Errorf("private %d after inserting everything", tr.Private())
	}
}
