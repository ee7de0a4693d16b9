package kvcache

import "fmt"

// A Tier is one level of KV storage below the GPU (host DRAM, local NVMe,
// a remote store) as one worker's or node's connector manages it: a set of
// blocks keyed by the chained hash of their content, a capacity in blocks,
// and least-recently-used eviction.
//
// An entry is first pending (Insert: space reserved, the store in
// flight), then ready (Complete): only ready entries hit (Contains), as
// vLLM's CPUOffloadingManager and LMCache answer a lookup only for stored
// data. Loads pin the entries they read (Pin, Unpin); pending and pinned
// entries are never evicted, so an insert into a tier full of them fails
// and the store is dropped, as vLLM's prepare_store returns None.
//
// Note: eviction is what Opal's tiers lack (opal-notes.md Q9): there a
// full tier takes nothing more, for ever. Here a full tier evicts its
// least recently used ready, unpinned block; Touch (a lookup that hits,
// a store of a block already held) makes a block most recently used, as
// vLLM's LRU policy and LMCache's LRU backends do.
//
// The hash index is a table of its own (tierIndex), grown with its
// entries: a Go map's probes grew long under the insert-evict churn of
// a full tier, a third of a replay's time; keys made by TierKey fall in
// it a group to a cache line. Blocks only one request can ask for are
// held as runs, one LRU entry each and not indexed (StoreRun, Promote).
type Tier struct {
	name  string
	cap   int64
	slots []tierSlot
	index tierIndex // hash → slot (a Go map degrades under the churn)
	n     int64     // blocks
	free  []int32
	// The LRU list of entries (a block, or a run: tierrun.go): head is
	// the least recently used; -1: empty.
	head, tail int32

	runs     []tierRun
	freeRuns []int32
	owners   map[uint64]int32 // an owner's runs: the first of its list

	// Counters since the tier was made.
	Stores    int64 // entries inserted
	Evictions int64 // ready entries evicted to make room
	Dropped   int64 // inserts refused: every entry pending or pinned
}

type tierSlot struct {
	prev, next int32
	pins       int32
	ready      bool
	run        int32  // a run's entry: 1 + its index in Tier.runs; 0: one block
	hash       uint64 // the block's (a run's: 0), here for the index to confirm a match in the line read next
}

// NewTier returns an empty tier of capacity blocks.
func NewTier(name string, capacity int64) *Tier {
	if capacity < 0 || capacity > 1<<31-1 {
		panic(fmt.Sprintf("kvcache: tier %s of %d blocks", name, capacity))
	}
	// The slots are made at once: grown by appends they were copied
	// over and over as a large tier filled.
	return &Tier{name: name, cap: capacity, index: newTierIndex(capacity), head: -1, tail: -1,
		slots: make([]tierSlot, 0, capacity), owners: map[uint64]int32{}}
}

func (t *Tier) lookup(h uint64) (int32, bool) { return t.index.get(h, t.slots) }

// Name returns the tier's name.
func (t *Tier) Name() string { return t.name }

// Capacity returns the tier's capacity in blocks.
func (t *Tier) Capacity() int64 { return t.cap }

// Len returns the number of entries, pending or ready.
func (t *Tier) Len() int64 { return t.n }

// Contains reports whether the tier holds block h, stored and ready.
func (t *Tier) Contains(h uint64) bool {
	s, ok := t.lookup(h)
	return ok && t.slots[s].ready
}

// Has reports whether the tier holds block h or is storing it.
func (t *Tier) Has(h uint64) bool {
	_, ok := t.lookup(h)
	return ok
}

// Touch makes block h, if held, the most recently used.
func (t *Tier) Touch(h uint64) {
	if s, ok := t.lookup(h); ok {
		t.unlink(s)
		t.pushBack(s)
	}
}

// Insert reserves room for block h, pending until Complete, and makes it
// the most recently used. A block already held is only touched. When the
// tier is full it evicts its least recently used ready, unpinned block and
// returns it (victim, true) so that a write-back policy can store it
// below (a block of a run, whose key the tier does not know: victim 0). It reports ok false, changing nothing, when no block can be
// evicted.
func (t *Tier) Insert(h uint64) (victim uint64, evicted, ok bool) {
	_, st, victim, evicted := t.Store(h)
	return victim, evicted, st != StoreDropped
}

// What Store did with a block.
type StoreResult uint8

const (
	StoreInserted StoreResult = iota // room reserved: pending until Complete
	StoreHeld                        // the tier holds it already: only touched
	StoreDropped                     // no block could be evicted: nothing changed
)

// Store is Insert that says what it did, and for an inserted block its
// slot, which CompleteAt takes instead of looking the block up again.
func (t *Tier) Store(h uint64) (s int32, st StoreResult, victim uint64, evicted bool) {
	if s, held := t.lookup(h); held {
		t.unlink(s)
		t.pushBack(s)
		return s, StoreHeld, 0, false
	}
	if t.cap == 0 {
		t.Dropped++
		return 0, StoreDropped, 0, false
	}
	if t.n >= t.cap {
		v := t.evictable(t.head)
		if v < 0 {
			t.Dropped++
			return 0, StoreDropped, 0, false
		}
		if t.slots[v].run != 0 {
			t.evictRun(v, 1) // (its key unknown: reported as 0)
		} else {
			victim = t.slots[v].hash
			t.index.del(victim, v)
			t.unlink(v)
			t.free = append(t.free, v)
			t.n--
			t.Evictions++
		}
		evicted = true
	}
	s = t.newSlot()
	t.slots[s] = tierSlot{prev: -1, next: -1, hash: h}
	t.index.add(h, s, t.slots)
	t.n++
	t.pushBack(s)
	t.Stores++
	return s, StoreInserted, victim, evicted
}

// Complete marks block h stored: it hits from now on. A block no longer
// held (its store was dropped) is ignored.
func (t *Tier) Complete(h uint64) {
	if s, ok := t.lookup(h); ok {
		t.slots[s].ready = true
	}
}

// CompleteAt is Complete for block h that Store inserted at slot s: a
// pending block is never evicted, so it is still there unless removed
// (then, if s holds another block, Complete looks h up).
func (t *Tier) CompleteAt(s int32, h uint64) {
	if s >= 0 && int(s) < len(t.slots) && t.slots[s].hash == h {
		t.slots[s].ready = true
		return
	}
	t.Complete(h)
}

// Pin protects block h from eviction while a load reads it.
func (t *Tier) Pin(h uint64) {
	s, ok := t.lookup(h)
	if !ok {
		panic(fmt.Sprintf("kvcache: tier %s: pin of block %#x it does not hold", t.name, h))
	}
	t.slots[s].pins++
}

// Unpin ends one Pin of block h.
func (t *Tier) Unpin(h uint64) {
	s, ok := t.lookup(h)
	if !ok || t.slots[s].pins == 0 {
		panic(fmt.Sprintf("kvcache: tier %s: unpin of block %#x not pinned", t.name, h))
	}
	t.slots[s].pins--
}

// Remove drops block h if it is held and not pinned (a store that
// failed, or a move to another tier), and reports whether it did.
func (t *Tier) Remove(h uint64) bool {
	s, ok := t.lookup(h)
	if !ok || t.slots[s].pins > 0 {
		return false
	}
	t.index.del(h, s)
	t.unlink(s)
	t.n--
	t.free = append(t.free, s)
	return true
}

// evictable returns the first entry from s on, in LRU order, that can be
// evicted: ready and unpinned; -1: none.
func (t *Tier) evictable(s int32) int32 {
	for s >= 0 && (!t.slots[s].ready || t.slots[s].pins > 0) {
		s = t.slots[s].next
	}
	return s
}

// newSlot returns an unused slot.
func (t *Tier) newSlot() int32 {
	if n := len(t.free); n > 0 {
		s := t.free[n-1]
		t.free = t.free[:n-1]
		return s
	}
	t.slots = append(t.slots, tierSlot{})
	return int32(len(t.slots) - 1)
}

func (t *Tier) unlink(s int32) {
	p, n := t.slots[s].prev, t.slots[s].next
	if p >= 0 {
		t.slots[p].next = n
	} else {
		t.head = n
	}
	if n >= 0 {
		t.slots[n].prev = p
	} else {
		t.tail = p
	}
	t.slots[s].prev, t.slots[s].next = -1, -1
}

func (t *Tier) pushBack(s int32) {
	t.slots[s].prev, t.slots[s].next = t.tail, -1
	if t.tail >= 0 {
		t.slots[t.tail].next = s
	} else {
		t.head = s
	}
	t.tail = s
}

// LRU returns the held blocks, least recently used first (for tests);
// key gives the key of block i of a run's owner.
func (t *Tier) LRU(key func(owner uint64, i int64) uint64) []uint64 {
	var hs []uint64
	for s := t.head; s >= 0; s = t.slots[s].next {
		if r := t.slots[s].run; r != 0 {
			run := &t.runs[r-1]
			for i := run.first; i < run.end; i++ {
				hs = append(hs, key(run.owner, i))
			}
			continue
		}
		hs = append(hs, t.slots[s].hash)
	}
	return hs
}

// Pinned reports whether a load is reading block h.
func (t *Tier) Pinned(h uint64) bool {
	s, ok := t.lookup(h)
	return ok && t.slots[s].pins > 0
}

// Hit is Contains and Touch of block h in one lookup: it reports whether
// the tier holds h stored and ready, and if so makes it the most
// recently used and returns its slot, which PinAt and UnpinAt take
// instead of looking h up again.
func (t *Tier) Hit(h uint64) (int32, bool) {
	s, ok := t.lookup(h)
	if !ok || !t.slots[s].ready {
		return 0, false
	}
	t.unlink(s)
	t.pushBack(s)
	return s, true
}

// Find is Contains that returns the block's slot (for PinAt).
func (t *Tier) Find(h uint64) (int32, bool) {
	s, ok := t.lookup(h)
	return s, ok && t.slots[s].ready
}

// TouchAt is Touch of the block at slot s (Find's, nothing changed in
// the tier since).
func (t *Tier) TouchAt(s int32) {
	t.unlink(s)
	t.pushBack(s)
}

// PinnedAt is Pinned of the block at slot s (Find's, nothing changed in
// the tier since).
func (t *Tier) PinnedAt(s int32) bool { return t.slots[s].pins > 0 }

// PinAt is Pin of the block at slot s (Hit's or Find's, nothing changed
// in the tier since).
func (t *Tier) PinAt(s int32) {
	if t.slots[s].run != 0 {
		panic(fmt.Sprintf("kvcache: tier %s: pin of a run", t.name))
	}
	t.slots[s].pins++
}

// UnpinAt is Unpin of the block at slot s, pinned by PinAt: a pinned
// block stays at its slot.
func (t *Tier) UnpinAt(s int32) {
	if t.slots[s].pins == 0 {
		panic(fmt.Sprintf("kvcache: tier %s: unpin of slot %d not pinned", t.name, s))
	}
	t.slots[s].pins--
}
