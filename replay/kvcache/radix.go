package kvcache

import (
	"container/heap"
	"fmt"
)

// A Run is Len consecutive tokens of one sequence whose identities all
// derive from Key: token i of the run, at absolute position p+i in its
// sequence, is the same token as token i of any run with the same Key at
// the same position. Runs let the radix tree hold token-granular keys
// without one entry per token: a trace names its prompts by blocks of
// hundreds of tokens (TokenKeys).
type Run struct {
	Key uint64
	Len int64
}

// TokenKeys returns the token-level key of a sequence of prompt tokens
// followed by out generated tokens, as runs.
//
// Note: the tokens of trace block j (positions [j·traceBlock,
// (j+1)·traceBlock)) are keyed by the chain hash of hashIDs[0..j] and the
// block size, so equal leading hash_ids give equal token keys and a match
// may end inside a block (a shorter prompt covers only part of its last
// block). Tokens past what hashIDs cover, generated tokens, and every
// token of a request without hash_ids take the key unique (distinct per
// request), so they are never shared with another request.
func TokenKeys(dst []Run, hashIDs []int64, traceBlock, prompt, out int64, unique uint64) []Run {
	dst = dst[:0]
	var covered int64
	if traceBlock > 0 {
		covered = min(prompt, int64(len(hashIDs))*traceBlock)
	}
	x := Root
	for j := int64(0); j*traceBlock < covered; j++ {
		x = mix(x, uint64(hashIDs[j]), 1)
		k := mix(mix(x, uint64(traceBlock), 2), uint64(j), 5)
		if k == 0 {
			k = 1
		}
		dst = append(dst, Run{k, min(traceBlock, covered-j*traceBlock)})
	}
	if rest := prompt + out - covered; rest > 0 {
		u := mix(unique, 0x756e697175652121, 6) // "unique!!"
		dst = append(dst, Run{u, rest})
	}
	return dst
}

// A RadixNode is a node of a Radix tree: an edge of tokens from its parent.
// Callers hold nodes only as handles for Lock and Unlock.
type RadixNode struct {
	parent   *RadixNode
	children map[uint64]*RadixNode // by the key of the edge's first token
	key      []Run
	n        int64  // tokens on the edge
	lock     int32  // requests holding this node (and so its ancestors)
	access   uint64 // logical time of the last match or insert through it
	id       uint64 // creation order: breaks access ties
	heapPos  int32  // 1 + its index in the tree's heap of evictable leaves; 0: not there
}

// A Radix is SGLang's RadixCache over a pool of KV token slots: a radix
// tree of token sequences whose nodes hold the KV of their edge tokens,
// reference counts (lock) from running requests, and eviction of
// unlocked leaves, least recently used first.
//
// Note: the pool is accounted here too. Tokens are either in the tree,
// held privately by requests (computed but not yet inserted: Alloc and
// Free), or free; Alloc evicts when the free slots do not suffice, as
// SGLang's allocator callers call tree_cache.evict first.
type Radix struct {
	root      *RadixNode
	capacity  int64
	tree      int64 // tokens in the tree
	private   int64 // tokens held outside the tree
	evictable int64 // tree tokens in unlocked nodes
	clock     uint64
	ids       uint64
	// Evictions counts tokens evicted from the tree.
	Evictions int64
	// OnEvict, when set, is told of every node Evict removes, before
	// it goes: its edge's key and the position of its first token (a
	// write-back policy stores what the GPU drops).
	OnEvict func(key []Run, start int64)
	// leaves holds the evictable leaves (unlocked, childless, not the
	// root), least recently used first.
	//
	// Note: SGLang's evict collects the leaves by walking the whole tree
	// on every call, and so did Evict: with the pool full, every
	// allocation evicts a little, and a replay of SGLang's scheduler on
	// 64 workers spent four fifths of its time walking trees. The heap is
	// kept as nodes change, and its order is total (access, then
	// creation), so eviction takes the same leaves in the same order.
	leaves leafHeap
}

// NewRadix returns an empty tree over a pool of capacity token slots.
func NewRadix(capacity int64) *Radix {
	t := &Radix{capacity: capacity}
	t.root = &RadixNode{children: map[uint64]*RadixNode{}, lock: 1}
	return t
}

// Root returns the root node (matching nothing).
func (t *Radix) Root() *RadixNode { return t.root }

// Capacity returns the pool size in tokens.
func (t *Radix) Capacity() int64 { return t.capacity }

// Free returns the free token slots.
func (t *Radix) Free() int64 { return t.capacity - t.tree - t.private }

// Evictable returns the tree tokens no running request holds.
func (t *Radix) Evictable() int64 { return t.evictable }

// TreeTokens returns the tokens held by the tree.
func (t *Radix) TreeTokens() int64 { return t.tree }

// Private returns the tokens held outside the tree.
func (t *Radix) Private() int64 { return t.private }

// Used returns the slots not free.
func (t *Radix) Used() int64 { return t.tree + t.private }

// Alloc takes n slots for a request's private tokens, evicting first if
// needed. It reports false, changing nothing but evictions, when even
// after evicting every unlocked leaf the slots do not suffice.
func (t *Radix) Alloc(n int64) bool {
	if f := t.Free(); f < n {
		t.Evict(n - f)
	}
	if t.Free() < n {
		return false
	}
	t.private += n
	return true
}

// FreePrivate returns n private slots to the pool.
func (t *Radix) FreePrivate(n int64) {
	if n < 0 || n > t.private {
		panic(fmt.Sprintf("kvcache: freeing %d private tokens of %d", n, t.private))
	}
	t.private -= n
}

// Match returns how many leading tokens of key (at most limit) the tree
// holds, and the node where the match ends, splitting an edge the match
// ends inside (as SGLang's match_prefix does), so that the node covers
// exactly the matched tokens. It touches the access time of the path.
func (t *Radix) Match(key []Run, limit int64) (int64, *RadixNode) {
	t.clock++
	node := t.root
	var n int64
	cur := runCursor{runs: key, limit: limit}
	for !cur.done() {
		child := node.children[cur.key()]
		if child == nil {
			break
		}
		t.touch(child)
		m := cur.common(child.key)
		if m < child.n {
			if m == 0 {
				break
			}
			child = t.split(child, m)
		}
		n += m
		cur.advance(m)
		node = child
	}
	return n, node
}

// Insert adds the first limit tokens of key to the tree. The caller holds
// tokens [0, held) in the tree already (a locked match) and [held, limit)
// as private slots, which become tree slots: those the tree already held
// are freed (the caller's copies were duplicates, as SGLang's
// cache_unfinished_req frees them), the others move. It returns the node
// where the inserted sequence ends.
func (t *Radix) Insert(key []Run, held, limit int64) *RadixNode {
	t.clock++
	node := t.root
	cur := runCursor{runs: key, limit: limit}
	for !cur.done() {
		child := node.children[cur.key()]
		if child == nil {
			rest := cur.rest()
			c := &RadixNode{
				parent: node, children: map[uint64]*RadixNode{}, key: rest, n: cur.left(),
				access: t.clock, id: t.nextID(),
			}
			if cur.pos < held {
				panic("kvcache: a held prefix is missing from the radix tree")
			}
			node.children[rest[0].Key] = c
			t.tree += c.n
			t.private -= c.n
			t.evictable += c.n // unlocked when created
			t.leafCheck(node)
			t.leafCheck(c)
			return c
		}
		t.touch(child)
		m := cur.common(child.key)
		if m < child.n {
			child = t.split(child, m)
		}
		// Duplicates of the private part: the tree's copy stays.
		t.private -= max(0, cur.pos+m-max(cur.pos, held))
		cur.advance(m)
		node = child
	}
	return node
}

func (t *Radix) nextID() uint64 { t.ids++; return t.ids }

// split cuts child's edge after m tokens (0 < m < child.n) and returns the
// new upper node.
func (t *Radix) split(child *RadixNode, m int64) *RadixNode {
	upper, lower := splitRuns(child.key, m)
	p := &RadixNode{
		parent: child.parent, children: map[uint64]*RadixNode{}, key: upper, n: m,
		lock: child.lock, access: child.access, id: t.nextID(),
	}
	child.parent.children[upper[0].Key] = p
	child.key, child.n, child.parent = lower, child.n-m, p
	p.children[lower[0].Key] = child
	return p
}

// Lock marks node and its ancestors held by one more request (SGLang's
// inc_lock_ref); held nodes are never evicted.
func (t *Radix) Lock(node *RadixNode) {
	for x := node; x != t.root; x = x.parent {
		if x.lock == 0 {
			t.evictable -= x.n
		}
		x.lock++
		if x.heapPos != 0 {
			heap.Remove(&t.leaves, int(x.heapPos-1))
		}
	}
}

// Unlock undoes one Lock (dec_lock_ref).
func (t *Radix) Unlock(node *RadixNode) {
	for x := node; x != t.root; x = x.parent {
		if x.lock <= 0 {
			panic("kvcache: unlocking an unlocked radix node")
		}
		x.lock--
		if x.lock == 0 {
			t.evictable += x.n
			t.leafCheck(x)
		}
	}
}

// Evict frees at least n tree tokens if it can, removing unlocked leaves
// least recently used first; a parent left a leaf joins the candidates
// (SGLang's evict). It returns the tokens freed.
func (t *Radix) Evict(n int64) int64 {
	var freed int64
	for freed < n && t.leaves.Len() > 0 {
		x := heap.Pop(&t.leaves).(*RadixNode)
		p := x.parent
		if t.OnEvict != nil {
			var start int64
			for a := p; a != t.root; a = a.parent {
				start += a.n
			}
			t.OnEvict(x.key, start)
		}
		delete(p.children, x.key[0].Key)
		freed += x.n
		t.tree -= x.n
		t.evictable -= x.n
		t.Evictions += x.n
		x.parent = nil
		t.leafCheck(p)
	}
	return freed
}

// leafCheck puts x in the heap of evictable leaves, or takes it out,
// as it now is one or not.
func (t *Radix) leafCheck(x *RadixNode) {
	evictable := x != t.root && x.parent != nil && x.lock == 0 && len(x.children) == 0
	switch {
	case evictable && x.heapPos == 0:
		heap.Push(&t.leaves, x)
	case !evictable && x.heapPos != 0:
		heap.Remove(&t.leaves, int(x.heapPos-1))
	}
}

// touch records an access to x now, moving it in the heap if it is there.
func (t *Radix) touch(x *RadixNode) {
	x.access = t.clock
	if x.heapPos != 0 {
		heap.Fix(&t.leaves, int(x.heapPos-1))
	}
}

// Check verifies the tree's accounting: edge lengths, lock counts (a
// node is held at least as much as its children), and that tree, private
// and free slots add up to the capacity.
func (t *Radix) Check() error {
	var tree, evictable int64
	leaves := 0
	var walk func(x *RadixNode) error
	walk = func(x *RadixNode) error {
		for k, c := range x.children {
			if c.parent != x || len(c.key) == 0 || c.key[0].Key != k {
				return fmt.Errorf("radix: bad child link")
			}
			var n int64
			for _, r := range c.key {
				n += r.Len
			}
			if n != c.n || n <= 0 {
				return fmt.Errorf("radix: edge of %d tokens says %d", n, c.n)
			}
			if x != t.root && c.lock > x.lock {
				return fmt.Errorf("radix: child held %d times, parent %d", c.lock, x.lock)
			}
			tree += c.n
			if c.lock == 0 {
				evictable += c.n
			}
			if leaf := c.lock == 0 && len(c.children) == 0; leaf != (c.heapPos != 0) {
				return fmt.Errorf("radix: node %d (lock %d, %d children) in the heap of evictable leaves: %v", c.id, c.lock, len(c.children), c.heapPos != 0)
			} else if leaf {
				leaves++
			}
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(t.root); err != nil {
		return err
	}
	switch {
	case tree != t.tree:
		return fmt.Errorf("radix: tree holds %d tokens, accounted %d", tree, t.tree)
	case evictable != t.evictable:
		return fmt.Errorf("radix: %d evictable tokens, accounted %d", evictable, t.evictable)
	case t.private < 0 || t.Free() < 0:
		return fmt.Errorf("radix: tree %d + private %d tokens over capacity %d", t.tree, t.private, t.capacity)
	case leaves != t.leaves.Len():
		return fmt.Errorf("radix: %d evictable leaves, %d in the heap", leaves, t.leaves.Len())
	}
	for i, x := range t.leaves {
		if int(x.heapPos) != i+1 {
			return fmt.Errorf("radix: heap entry %d says it is at %d", i, x.heapPos-1)
		}
		if i > 0 && t.leaves.Less(i, (i-1)/2) {
			return fmt.Errorf("radix: heap entry %d comes before its parent", i)
		}
	}
	return nil
}

// A runCursor walks a key sequence token by token, by runs.
type runCursor struct {
	runs  []Run
	i     int   // current run
	off   int64 // tokens of runs[i] consumed
	pos   int64 // tokens consumed
	limit int64
}

func (c *runCursor) done() bool  { return c.pos >= c.limit || c.i >= len(c.runs) }
func (c *runCursor) key() uint64 { return c.runs[c.i].Key }
func (c *runCursor) left() int64 {
	var n int64
	for _, r := range c.runs[c.i:] {
		n += r.Len
	}
	return min(n-c.off, c.limit-c.pos)
}

// rest returns a copy of the runs not consumed, cut at the limit.
func (c *runCursor) rest() []Run {
	out := make([]Run, 0, len(c.runs)-c.i)
	left := c.limit - c.pos
	for j := c.i; j < len(c.runs) && left > 0; j++ {
		r := c.runs[j]
		if j == c.i {
			r.Len -= c.off
		}
		r.Len = min(r.Len, left)
		left -= r.Len
		out = append(out, r)
	}
	return out
}

// common returns how many tokens from the cursor equal the leading
// tokens of edge.
func (c *runCursor) common(edge []Run) int64 {
	i, off, left := c.i, c.off, c.limit-c.pos
	var n int64
	for _, e := range edge {
		if i >= len(c.runs) || left <= 0 || c.runs[i].Key != e.Key {
			return n
		}
		m := min(c.runs[i].Len-off, e.Len, left)
		n += m
		left -= m
		if m < e.Len {
			return n
		}
		off += m
		if off == c.runs[i].Len {
			i, off = i+1, 0
		}
	}
	return n
}

func (c *runCursor) advance(m int64) {
	c.pos += m
	for m > 0 {
		k := min(c.runs[c.i].Len-c.off, m)
		c.off += k
		m -= k
		if c.off == c.runs[c.i].Len {
			c.i, c.off = c.i+1, 0
		}
	}
}

// splitRuns cuts runs after m tokens.
func splitRuns(runs []Run, m int64) (upper, lower []Run) {
	for i, r := range runs {
		if m < r.Len {
			upper = append(append([]Run(nil), runs[:i]...), Run{r.Key, m})
			lower = append([]Run{{r.Key, r.Len - m}}, runs[i+1:]...)
			return upper, lower
		}
		m -= r.Len
		if m == 0 {
			return append([]Run(nil), runs[:i+1]...), append([]Run(nil), runs[i+1:]...)
		}
	}
	panic("kvcache: split past the edge")
}

// A leafHeap orders eviction candidates by last access, then creation.
type leafHeap []*RadixNode

func (h leafHeap) Len() int { return len(h) }
func (h leafHeap) Less(i, j int) bool {
	if h[i].access != h[j].access {
		return h[i].access < h[j].access
	}
	return h[i].id < h[j].id
}
func (h leafHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapPos, h[j].heapPos = int32(i+1), int32(j+1)
}
func (h *leafHeap) Push(x any) {
	n := x.(*RadixNode)
	n.heapPos = int32(len(*h) + 1)
	*h = append(*h, n)
}
func (h *leafHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	x.heapPos = 0
	*h = old[:len(old)-1]
	return x
}
