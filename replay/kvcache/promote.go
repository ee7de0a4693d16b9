package kvcache

// Promotion: private blocks made shared after they were freed.
//
// A replay that routes requests as they arrive cannot know, when a
// request computes its blocks, whether a later request will share them on
// its worker; indexing every block that might be shared was most of what
// online routing cost beyond round-robin. So a scheduler may leave such
// blocks anonymous, like private ones, and promote them when a sharer
// arrives: a running request's by naming and committing them (Name,
// Commit); a finished request's, which sit in the run Release made of its
// anonymous blocks (ReleaseRun), by Promote, which names and indexes the
// run's cached blocks that are evicted last and keeps them at their place
// in the queue. Eviction order and hits are then what naming and
// indexing the blocks at release gives (TestPromoteMatchesNamed), as long
// as no other copy of a promoted hash was indexed in between; the
// scheduler's promotion rule guarantees that (replay's lazyIndex).

// A FreeRun names the run Release made of a table's anonymous blocks, for
// as long as the run lasts; the zero FreeRun names none.
type FreeRun struct {
	serial uint64
	slot   int32
}

// inTail is the pos of a free block in the tail of run s, less s: below
// every referenced block's pos (withFlags).
const inTail = -512

// ReleaseRun is Release, and returns the run made of the stretch of
// anonymous blocks nearest the table's start (its first cached block is
// the table's first Anonymous one), or the zero FreeRun.
func (c *Cache) ReleaseRun(blocks []int32, full int64) FreeRun {
	s := c.release(blocks, full)
	if s < 0 {
		return FreeRun{}
	}
	return FreeRun{serial: c.runs[s].serial, slot: s}
}

// RunLeft reports, for run r, how many of its cached blocks, counted from
// its first (the one evicted last), were promoted (done: acquired or
// evicted since, or still free), and how many after them are still
// anonymous and cached (left, which Promote may promote); ok is false
// when r is gone (evicted to its end).
func (c *Cache) RunLeft(r FreeRun) (done, left int64, ok bool) {
	if r.serial == 0 || int(r.slot) >= len(c.runs) || c.runs[r.slot].serial != r.serial {
		return 0, 0, false
	}
	ru := &c.runs[r.slot]
	return int64(len(ru.tail)), int64(ru.cached), true
}

// Promote names the next len(hashes) anonymous cached blocks of run r
// (RunLeft: blocks done, done+1, …; at most left), commits hashes[x] to
// the x-th and indexes it, as Commit does. They stay free and where they
// were in the queue: after the run's anonymous blocks, and before those
// it promoted earlier.
func (c *Cache) Promote(r FreeRun, hashes []uint64) {
	if _, left, ok := c.RunLeft(r); !ok || int64(len(hashes)) > left {
		panic("kvcache: promotion of blocks a run does not hold")
	}
	ru := &c.runs[r.slot]
	recs, hs := c.blocks, c.hashes
	// The tail grown once and written by index, and the index's table
	// in locals (freeSlot): a router that sends sharers together
	// promotes most of its hits (816,000 blocks of sglang_cache_aware's
	// on Mooncake).
	n0 := len(ru.tail)
	tail := grow(ru.tail, len(hashes))[:n0+len(hashes)]
	names, fresh := c.names, c.fresh
	slots, mask := c.index.slots, c.index.mask
	in := block{pos: inTail - r.slot}
	for x, h := range hashes {
		// An id as name gives it, from the stack or fresh.
		var b int32
		if k := len(names); k > 0 {
			b = names[k-1]
			names = names[:k-1]
		} else {
			b = fresh
			fresh++
		}
		recs[b] = in
		hs[b] = h
		fp := fingerprint(h) // index.add
		slots[freeSlot(slots, mask, fp)] = pack(fp, b)
		tail[n0+x] = b
	}
	c.index.n += len(hashes)
	c.names, c.fresh, ru.tail = names, fresh, tail
	ru.cached -= int32(len(hashes))
	ru.live += int32(len(hashes))
}

// acquireTail takes free block b out of its run's tail (Acquire); a run
// left empty leaves the queue.
func (c *Cache) acquireTail(b int32) {
	s := inTail - c.blocks[b].pos
	ru := &c.runs[s]
	ru.live--
	c.blocks[b].pos = withFlags(hashed | recorded)
	if ru.uncached == 0 && ru.cached == 0 && ru.live == 0 {
		c.ring[ru.at&int64(len(c.ring)-1)] = tombstone
		c.freeRun(s)
	}
}

// takeTail hands out blocks of run ru's tail into dst[taken:end], as
// AllocateNamed does (ids up to nameEnd, Anonymous after), last promoted
// first; drops is AllocateNamed's count of blocks with ids evicted (Drops),
// and it returns where it stopped and that count after its own.
func (c *Cache) takeTail(slot int32, dst []int32, taken, end, nameEnd int, drops uint64) (int, uint64) {
	ru := &c.runs[slot]
	for taken < end && ru.live > 0 {
		x := len(ru.tail) - 1
		b := ru.tail[x]
		ru.tail = ru.tail[:x]
		if !c.tailed(b, slot) {
			continue // acquired since
		}
		ru.live--
		c.index.del(c.hashes[b], b)
		c.hashes[b] = 0
		drops++
		c.dropped[b] = uint32(drops)
		if taken >= nameEnd {
			c.names = append(c.names, b)
			dst[taken] = Anonymous
		} else {
			c.blocks[b] = block{ref: 1, pos: none}
			dst[taken] = b
		}
		taken++
	}
	return taken, drops
}

// tailed reports whether b, the x-th block of run s's tail, is still
// there: its record says it is free in s's tail.
//
// Note: a block acquired out of a tail (AcquireAll) leaves its entry
// there, where writing Anonymous over it was a load of its place and a
// store to the tail, a fifth of AcquireAll's instructions on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware. The entry is known
// stale by its record: referenced, or free in the ring. The block cannot
// come back to s's tail while s lasts, which would make the record say
// so again: only an id from the stack is promoted, and the block's id
// reaches the stack only when it is evicted, from the ring behind s's
// entry (it was released after s was made), so after s is gone.
func (c *Cache) tailed(b, s int32) bool {
	return c.blocks[b] == (block{pos: inTail - s})
}

// freeRun makes run slot s spare.
func (c *Cache) freeRun(s int32) {
	ru := &c.runs[s]
	ru.serial, ru.live, ru.tail = 0, 0, ru.tail[:0]
	c.spare = append(c.spare, s)
}
