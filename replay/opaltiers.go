package replay

import "container/list"

// An opalTier is one worker's KV tier (kvc_manager.py's
// OpalStorageBackend): an index of the chunks it stored, on a device
// whose capacity a put reserves. Opal never evicts (Q9); with evict set,
// a put that does not fit evicts this tier's least recently used chunks
// first.
type opalTier struct {
	dev   *opalDevice
	evict bool
	index map[uint64]*list.Element // key → element of lru (Value: opalChunk)
	lru   *list.List               // front: most recently used
}

type opalChunk struct {
	key  uint64
	size float64
}

func newOpalTier(d *opalDevice, evict bool) *opalTier {
	return &opalTier{dev: d, evict: evict, index: map[uint64]*list.Element{}, lru: list.New()}
}

// contains is OpalStorageBackend.contains: an 8-byte IO, then the index.
func (t *opalTier) contains(p *simProc, key uint64) bool {
	t.dev.io(p, 8)
	e, ok := t.index[key]
	if ok && t.evict {
		t.lru.MoveToFront(e)
	}
	return ok
}

// batchedContains returns how many leading keys the tier holds, checking
// them one by one until the first miss.
func (t *opalTier) batchedContains(p *simProc, keys []uint64) int {
	for i, k := range keys {
		if !t.contains(p, k) {
			return i
		}
	}
	return len(keys)
}

// fits makes room for size bytes if it can, evicting when allowed.
func (t *opalTier) fits(size float64) bool {
	for size > t.dev.remaining && t.evict && t.lru.Len() > 0 {
		e := t.lru.Back()
		c := t.lru.Remove(e).(opalChunk)
		delete(t.index, c.key)
		t.dev.remaining += c.size
	}
	return size <= t.dev.remaining
}

// put reserves the chunk's bytes, writes them, and indexes the chunk.
func (t *opalTier) put(p *simProc, key uint64, size float64) {
	t.dev.remaining -= size
	t.dev.io(p, size)
	t.index[key] = t.lru.PushFront(opalChunk{key, size})
}

// lookup is OpalKVCacheEngine.lookup: the prompt tokens of r's longest
// prefix of chunks found across the tiers, tier by tier, each chunk key
// checked by an IO.
func (w *opalWorker) lookup(p *simProc, r *opalReq) int64 {
	if len(w.tiers) == 0 {
		p.sleep(0.0001)
		return 0
	}
	hit := w.prefixAcrossTiers(p, r.keys, nil)
	return sumTokens(r.chunkTok[:hit])
}

// prefixAcrossTiers is OpalStorageManager.batched_contains (and
// get_block_mapping): the leading keys found, continuing in each tier
// from where the previous one stopped; per records each tier's share.
func (w *opalWorker) prefixAcrossTiers(p *simProc, keys []uint64, per []int) int {
	total, all := 0, len(keys)
	for i, t := range w.tiers {
		hit := t.batchedContains(p, keys)
		if per != nil {
			per[i] = hit
		}
		if hit == 0 {
			continue
		}
		total += hit
		if total == all {
			break
		}
		keys = keys[hit:]
	}
	return total
}

// fetch is OpalKVCacheEngine.retrieve of the first prefix tokens: the
// block mapping again, then per chunk a contains, and get_blocking's
// contains and read. It returns the tokens fetched.
func (w *opalWorker) fetch(p *simProc, r *opalReq, prefix int64) int64 {
	if len(w.tiers) == 0 {
		p.sleep(0.0001)
		return 0
	}
	k := 0
	for tok := int64(0); k < len(r.keys) && tok < prefix; k++ {
		tok += r.chunkTok[k]
	}
	keys, sizes := r.keys[:k], r.chunkTok[:k]
	per := make([]int, len(w.tiers))
	total := w.prefixAcrossTiers(p, keys, per)
	next := 0
	for i, t := range w.tiers {
		for range per[i] {
			if next >= total {
				break
			}
			t.contains(p, keys[next])
			if t.contains(p, keys[next]) {
				t.dev.io(p, float64(sizes[next]*w.c.KVBytesPerToken))
			}
			next++
		}
	}
	return sumTokens(sizes[:total])
}

// store is OpalKVCacheEngine.store of the chunks keys (tokens sizes): per
// tier in order, while a chunk fits, a contains and, if absent, a put;
// the chunks that did not fit go on to the next tier.
func (w *opalWorker) store(p *simProc, keys []uint64, sizes []int64) {
	if len(w.tiers) == 0 {
		p.sleep(0.0001)
		return
	}
	for _, t := range w.tiers {
		stored := 0
		for i, k := range keys {
			size := float64(sizes[i] * w.c.KVBytesPerToken)
			if !t.fits(size) {
				break
			}
			if !t.contains(p, k) {
				t.put(p, k, size)
			}
			stored++
		}
		keys, sizes = keys[stored:], sizes[stored:]
	}
}

// writeThrough stores, without stalling the loop, r's chunks that its
// last prefill step completed (StoreAtCompletion off).
func (w *opalWorker) writeThrough(r *opalReq) {
	if len(w.tiers) == 0 {
		return
	}
	from := r.storedChunks
	var tok int64
	for i := range from {
		tok += r.chunkTok[i]
	}
	to := from
	for to < len(r.keys) && tok+r.chunkTok[to] <= r.processed {
		tok += r.chunkTok[to]
		to++
	}
	if to == from {
		return
	}
	r.storedChunks = to
	keys, sizes := r.keys[from:to], r.chunkTok[from:to]
	w.s.env.spawn(func(p *simProc) { w.store(p, keys, sizes) })
}

func sumTokens(l []int64) int64 {
	var n int64
	for _, x := range l {
		n += x
	}
	return n
}
