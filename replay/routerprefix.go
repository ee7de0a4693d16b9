package replay

// A prefixIndex is a router's record of which prefix blocks each worker
// holds, keyed by the trace's block ids (trace.Request.HashIDs, whose
// equal ids mean equal prefixes): an approximate radix tree per worker
// (SGLang's router, llm-d's approximate prefix scorer) when fed the
// requests the router sent, or a mirror of the workers' caches (Dynamo's
// KvIndexer, Opal's KVBM) when fed their KV events.
//
// Each worker's part is bounded, in tokens, least recently used blocks
// first; within one insertion the deeper blocks count as older, so a
// prefix is evicted from its end, as a radix tree evicts leaves first.
//
// Note: matching is at the trace's block granularity (Mooncake: 512
// tokens), coarser than SGLang's characters or Dynamo's 16-token blocks;
// a trace's block ids are all a router can know of the prompts.
type prefixIndex struct {
	workers   int
	capTokens int64           // per worker; 0: unbounded
	slots     map[int64]int32 // block id → slot
	stamp     []uint64        // slot·workers + worker → last use; 0: absent
	count     []int64         // per worker: blocks held
	lru       [][]lruEntry    // per worker: insertions, oldest first (stale entries skipped)
	clock     uint64
}

type lruEntry struct {
	slot  int32
	stamp uint64
}

func newPrefixIndex(workers int, capTokens int64) *prefixIndex {
	return &prefixIndex{
		workers: workers, capTokens: capTokens, slots: map[int64]int32{},
		count: make([]int64, workers), lru: make([][]lruEntry, workers),
	}
}

// matchAll sets n[w] to the number of leading ids that worker w holds.
func (x *prefixIndex) matchAll(ids []int64, n []int) {
	clear(n)
	for j, id := range ids {
		s, ok := x.slots[id]
		if !ok {
			return
		}
		row := x.stamp[int(s)*x.workers : int(s+1)*x.workers]
		alive := 0 // workers still matching every id so far
		for w, st := range row {
			if st != 0 && n[w] == j {
				n[w]++
				alive++
			}
		}
		if alive == 0 {
			return
		}
	}
}

// insert records that worker w holds ids, blockSize tokens each, and
// evicts its least recently used blocks beyond the capacity.
func (x *prefixIndex) insert(w int, ids []int64, blockSize int64) {
	bounded := x.capTokens > 0 && blockSize > 0
	for j := len(ids) - 1; j >= 0; j-- { // deepest first: evicted first
		id := ids[j]
		s, ok := x.slots[id]
		if !ok {
			s = int32(len(x.slots))
			x.slots[id] = s
			x.stamp = append(x.stamp, make([]uint64, x.workers)...)
		}
		x.clock++
		p := &x.stamp[int(s)*x.workers+w]
		if *p == 0 {
			x.count[w]++
		}
		*p = x.clock
		if bounded {
			x.lru[w] = append(x.lru[w], lruEntry{s, x.clock})
		}
	}
	if !bounded {
		return
	}
	limit := x.capTokens / blockSize
	q := x.lru[w]
	// The queue is by insertion, not by stamp; a block inserted again
	// has a newer entry, and its older ones are stale and skipped.
	for x.count[w] > limit && len(q) > 0 {
		e := q[0]
		q = q[1:]
		if p := &x.stamp[int(e.slot)*x.workers+w]; *p == e.stamp {
			*p = 0
			x.count[w]--
		}
	}
	if cap(q) > 64 && len(q) < cap(q)/4 {
		q = append([]lruEntry(nil), q...)
	}
	x.lru[w] = q
}

// dropWorker forgets everything worker w held: it was started afresh.
func (x *prefixIndex) dropWorker(w int) {
	for s := w; s < len(x.stamp); s += x.workers {
		x.stamp[s] = 0
	}
	x.count[w] = 0
	x.lru[w] = x.lru[w][:0]
}
