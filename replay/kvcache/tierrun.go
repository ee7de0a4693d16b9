package kvcache

import "fmt"

// Runs: blocks only their owner can ask for, held as one LRU entry.
//
// Note: most blocks a replay stores are private to one request (no other
// request has its prompt's tail: BlockHasher.Private), so nothing but
// that request can ever look them up, and it does so only after a
// preemption. Stored one by one, each cost an index insert and, once the
// tier was full, an index delete, cache misses both, and a walk past
// every pending block in front of the LRU list. A run holds the blocks of
// one StoreRun, in order, as a single entry of the LRU list and no index
// entries: they are stored, completed and evicted (a prefix of the run at
// a time) exactly as StoreRun's blocks stored one by one would be, since
// nothing touches, pins or removes a block no one can find. Before its
// owner looks its blocks up, Promote turns the owner's runs into blocks
// of their own, in place; from then on they are ordinary blocks. The
// LRU order, hits, evictions and counters are the same as with every
// block stored by Store (TestTierRunsMatchBlocks).
//
// A run does not even hold its blocks' keys, only where they lie in its
// owner's sequence of blocks: computing them was most of the remaining
// cost of a private block, and only Promote needs them, from the owner,
// which can compute them. So a write-back policy, which stores what a
// tier evicts below, cannot use runs (Store reports a run's block it
// evicts without its key).

// A tierRun is its owner's blocks first … end−1 (indices in the owner's
// sequence of blocks) not yet evicted, least recently used first, and its
// place among its owner's runs. A run promoted while pending (slot −1,
// keys set) waits for CompleteRun to complete its blocks by key.
type tierRun struct {
	owner            uint64
	first, end       int64
	slot             int32    // its entry in the LRU list
	seq              uint32   // changes when the run ends (RunRef)
	prevOwn, nextOwn int32    // the owner's other runs; -1: none
	keys             []uint64 // promoted while pending: its blocks
}

// A RunRef names the run a StoreRun made, for CompleteRun.
type RunRef struct {
	i   int32 // 1 + index in Tier.runs; 0: none
	seq uint32
}

// StoreRun is Store of each of owner's blocks first … first+k−1 in
// order (indices in owner's sequence of blocks, whose keys Promote
// takes), for blocks that no one but owner can ask for and that the tier
// does not hold (a request's private blocks, each offered once): it
// inserts the first n of them, pending until CompleteRun, evicting as
// those Stores would, and drops the rest. It returns the run to complete
// (none when n is 0). The evicted blocks are not reported: under a
// write-back policy, which stores them below, store one by one.
func (t *Tier) StoreRun(owner uint64, first, k int64) (ref RunRef, n int64) {
	if k <= 0 {
		return RunRef{}, 0
	}
	if room := t.cap - t.n; k > room {
		// Each Store of a full tier evicts the least recently used
		// ready, unpinned block; the blocks it inserts are pending, so
		// the victims are the first k − room such blocks in LRU order,
		// and once none is left every later Store drops.
		need := k - room
		for s := t.evictable(t.head); need > 0 && s >= 0; s = t.evictable(s) {
			next := t.slots[s].next
			if r := t.slots[s].run; r != 0 {
				run := &t.runs[r-1]
				m := min(need, run.end-run.first)
				t.evictRun(s, m)
				need -= m
			} else {
				t.index.del(t.slots[s].hash, s)
				t.unlink(s)
				t.free = append(t.free, s)
				t.n--
				t.Evictions++
				need--
			}
			s = next
		}
	}
	n = min(k, t.cap-t.n)
	t.Dropped += k - n
	if n == 0 {
		return RunRef{}, 0
	}
	var i int32
	if m := len(t.freeRuns); m > 0 {
		i = t.freeRuns[m-1]
		t.freeRuns = t.freeRuns[:m-1]
	} else {
		t.runs = append(t.runs, tierRun{})
		i = int32(len(t.runs) - 1)
	}
	s := t.newSlot()
	t.slots[s] = tierSlot{prev: -1, next: -1, run: i + 1}
	t.pushBack(s)
	run := &t.runs[i]
	run.owner, run.first, run.end, run.slot = owner, first, first+n, s
	run.prevOwn, run.nextOwn = -1, -1
	if j, ok := t.owners[owner]; ok {
		run.nextOwn = j
		t.runs[j].prevOwn = i
	}
	t.owners[owner] = i
	t.n += n
	t.Stores += n
	return RunRef{i: i + 1, seq: run.seq}, n
}

// CompleteRun completes the blocks of run ref (StoreRun's) as Complete
// does: a pending run is never evicted, so it is still there unless
// promoted, and then its blocks are completed one by one.
func (t *Tier) CompleteRun(ref RunRef) {
	i := ref.i - 1
	if i < 0 || int(i) >= len(t.runs) || t.runs[i].seq != ref.seq {
		panic(fmt.Sprintf("kvcache: tier %s: completion of a run that ended", t.name))
	}
	run := &t.runs[i]
	if run.slot >= 0 {
		t.slots[run.slot].ready = true
		return
	}
	for _, h := range run.keys {
		t.Complete(h)
	}
	t.endRun(i)
}

// Promote makes the blocks of owner's runs blocks of their own, at their
// places in the LRU order, so that lookups find them: call it before
// owner looks up, touches or pins its blocks. Keys holds the keys of the
// owner's blocks from its first (index 0) to at least its last in a run.
func (t *Tier) Promote(owner uint64, keys []uint64) {
	i, ok := t.owners[owner]
	if !ok {
		return
	}
	delete(t.owners, owner)
	for i >= 0 {
		run := &t.runs[i]
		next := run.nextOwn
		s := run.slot
		ready := t.slots[s].ready
		// The run's slot takes its first block, the others follow it.
		prev := s
		for j, h := range keys[run.first:run.end] {
			b := s
			if j > 0 {
				b = t.newSlot()
				t.slots[b] = tierSlot{prev: prev, next: t.slots[prev].next}
				if nx := t.slots[prev].next; nx >= 0 {
					t.slots[nx].prev = b
				} else {
					t.tail = b
				}
				t.slots[prev].next = b
			}
			t.slots[b].ready, t.slots[b].run, t.slots[b].hash = ready, 0, h
			t.index.add(h, b, t.slots)
			prev = b
		}
		if ready {
			t.endRun(i)
		} else {
			// CompleteRun completes them by key.
			run.slot = -1
			run.keys = append(run.keys[:0], keys[run.first:run.end]...)
		}
		i = next
	}
}

// evictRun evicts the first m blocks of the run at entry s, ending the
// run when none is left.
func (t *Tier) evictRun(s int32, m int64) {
	i := t.slots[s].run - 1
	run := &t.runs[i]
	run.first += m
	t.n -= m
	t.Evictions += m
	if run.first == run.end {
		t.unlink(s)
		t.free = append(t.free, s)
		// Off its owner's list.
		if run.prevOwn >= 0 {
			t.runs[run.prevOwn].nextOwn = run.nextOwn
		} else if run.nextOwn >= 0 {
			t.owners[run.owner] = run.nextOwn
		} else {
			delete(t.owners, run.owner)
		}
		if run.nextOwn >= 0 {
			t.runs[run.nextOwn].prevOwn = run.prevOwn
		}
		t.endRun(i)
	}
}

// endRun frees run i, whose entry is gone or taken over.
func (t *Tier) endRun(i int32) {
	run := &t.runs[i]
	run.seq++
	run.slot = -1
	run.keys = run.keys[:0]
	t.freeRuns = append(t.freeRuns, i)
}
