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
	return int64(ru.done), int64(ru.cached), true
}

// Promote names the next len(hashes) anonymous cached blocks of run r
// (RunLeft: blocks done, done+1, …; at most left), commits hashes[x] to
// the x-th and indexes it, as Commit does; hashes are consecutive hashes
// of one chain (CommitAll). They stay free and where they were in the
// queue: after the run's anonymous blocks, and before those it promoted
// earlier.
//
// Note: they take consecutive ids, a span of the run's tail each range
// of the stack gives (the x-th block the range's x-th id, so that the
// span is evicted from its highest id down, as the blocks are), with
// one record: a router that sends sharers together promotes most of its
// hits (816,000 blocks of sglang_cache_aware's on Mooncake).
func (c *Cache) Promote(r FreeRun, hashes []uint64) {
	if _, left, ok := c.RunLeft(r); !ok || int64(len(hashes)) > left {
		panic("kvcache: promotion of blocks a run does not hold")
	}
	flags, hs := c.flags, c.hashes
	ix := &c.index
	for len(hashes) > 0 {
		lo, k := c.takeIDs(int32(len(hashes)))
		x := c.newSpan(span{lo: lo, hi: lo + k, live: k, owner: r.slot})
		c.makeRun(lo, runRec{n: k, span: x})
		// The range's flags and hashes as slices as long as its
		// hashes, so that the compiler checks no bound per block.
		src := hashes[:k]
		fl, hr := flags[lo : lo+k][:len(src)], hs[lo : lo+k][:len(src)]
		for i := 0; i < len(src); {
			h := src[i]
			fl[i], hr[i] = fHashed|fRecorded, h
			gk, j := keyOf(h)
			if j == 0 && len(src)-i >= groupLen && chainMembers((*[groupLen - 1]uint64)(src[i+1:i+groupLen]), h) {
				// A whole group (CommitAll).
				*(*[groupLen]uint64)(hr[i : i+groupLen]) = *(*[groupLen]uint64)(src[i : i+groupLen])
				setFlags(fl[i:i+groupLen], fHashed|fRecorded)
				ix.insert(gk, line(lo+int32(i), 0, groupLen, false))
				i += groupLen
				continue
			}
			// A stretch of a group's members as one insert
			// (CommitAll).
			n := promoteSteps(fl[i:], hr[i:], src[i:i+min(len(src)-i, groupLen-int(j))])
			ix.insert(gk, line(lo+int32(i), j, uint(n), false))
			i += n
		}
		ru := &c.runs[r.slot]
		ru.tail = append(ru.tail, x)
		ru.cached -= k
		ru.live += k
		ru.done += k
		ix.n += int(k)
		hashes = hashes[k:]
	}
}

// promoteSteps records hs[1], hs[2], … in fl and hr (a promoted
// range's flags and hashes, from the stretch's first) as long as they
// go on from hs[0] by contStep, and returns how many hashes the stretch
// has, hs[0] included (commitSteps' twin: the hash carried along in a
// register, where Promote's loop spilled it at each block).
func promoteSteps(fl []uint8, hr []uint64, hs []uint64) int {
	fl, hr = fl[:len(hs)], hr[:len(hs)]
	h, c := hs[0], stepAdd
	n := 1
	for ; n < len(hs); n++ {
		if h += c; hs[n] != h {
			break
		}
		fl[n], hr[n] = fHashed|fRecorded, h
	}
	return n
}

// takeTail hands out blocks of run slot's tail into dst[taken:end], as
// AllocateNamed does (ids up to nameEnd, Anonymous after), last promoted
// first, and returns where it stopped.
func (c *Cache) takeTail(slot int32, dst []int32, taken, end, nameEnd int) int {
	for taken < end && c.runs[slot].live > 0 {
		ru := &c.runs[slot]
		x := ru.tail[len(ru.tail)-1]
		live := c.spans[x].live
		taken = c.evictSpan(x, dst, taken, end, nameEnd)
		ru = &c.runs[slot]
		ru.live -= live - c.spans[x].live
		if c.spans[x].live == 0 {
			ru.tail = ru.tail[:len(ru.tail)-1]
			c.freeSpan(x)
		}
	}
	return taken
}

// inTail reports whether b is free in a run's tail (for tests).
func (c *Cache) inTail(b int32) bool {
	r := c.recs[c.runStart(b)]
	return r.ref == 0 && c.spans[r.span].owner >= 0
}

// freeRun makes run slot s spare, and the spans of its tail.
func (c *Cache) freeRun(s int32) {
	ru := &c.runs[s]
	for _, x := range ru.tail {
		c.freeSpan(x)
	}
	ru.serial, ru.live, ru.done, ru.tail = 0, 0, 0, ru.tail[:0]
	c.spare = append(c.spare, s)
}
