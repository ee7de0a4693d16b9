package kvcache

// Lookups, commits and acquisitions of a stretch of a request's blocks
// in one call.
//
// Note: a router that sends requests sharing a prefix to one worker makes
// its cache look up, acquire and commit millions of shared blocks; one
// call per block, with the cache's fields loaded again each time, cost
// about a third more instructions than these loops (sglang_cache_aware on
// Mooncake: lookups 190 → 120 million, acquisitions with the free-hit
// count 160 → 69). Each call here does exactly what the one-block calls
// do, block after block, in order.

// LookupAll appends to dst, for hs[0], hs[1], …, the block Lookup returns,
// up to the first hash it misses, and returns dst.
//
// Note: dst is grown once, for every hash, and the loop, a function of
// its own, writes the hits by index: with dst, its append and the cache
// in the loop, the compiler kept half of the loop's values on the stack
// and reloaded them at every hit (on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware, whose router sends
// requests where their prefix is, 4.5 million hits).
func (c *Cache) LookupAll(dst []int32, hs []uint64) []int32 {
	n := len(dst)
	dst = grow(dst, len(hs))
	found := lookupAll(dst[n:n+len(hs)], hs, c.hashes, c.index.slots, c.index.mask)
	return dst[:n+found]
}

// lookupAll is LookupAll's loop: it writes the blocks of hs's leading
// hits to out, as long, and returns how many.
func lookupAll(out []int32, hs, hashes, slots []uint64, mask uint64) int {
	out = out[:len(hs)]
	for x, h := range hs {
		fp := fingerprint(h)
		i := uint64(fp) & mask
		for {
			s := slots[i]
			if s == 0 {
				return x
			}
			if f, b := unpack(s); f == fp && hashes[b] == h {
				out[x] = b
				break
			}
			if i += probeStride; i > mask {
				i = (i + 1) & (probeStride - 1) // index.next
			}
		}
	}
	return len(hs)
}

// CommitAll commits hs[i] to blocks[i], in order, as Commit does; the two
// are as long.
func (c *Cache) CommitAll(blocks []int32, hs []uint64) {
	recs, hashes := c.blocks, c.hashes
	slots, mask := c.index.slots, c.index.mask // index.add's, in locals
	added := 0
	for i, b := range blocks[:len(hs)] {
		k := &recs[b]
		if k.flags()&recorded != 0 {
			continue
		}
		h := hs[i]
		hashes[b] = h
		k.pos = withFlags(hashed | recorded)
		fp := fingerprint(h)
		slots[freeSlot(slots, mask, fp)] = pack(fp, b)
		added++
	}
	c.index.n += added
}

// AcquireAll acquires blocks, in order, as Acquire does.
//
// Note: a block promoted out of a run (Promote) is taken out of its
// run's tail here, in the loop's locals, not by a call to acquireTail: a
// router that sends sharers together acquires most of its hits there
// (815,000 of sglang_cache_aware's on Mooncake, 47 instructions each
// through the call). Its entry in the tail is left as it is: its record
// no longer says it is there (tailed).
func (c *Cache) AcquireAll(blocks []int32) {
	for len(blocks) > 0 {
		n, freed, emptied := acquireAll(blocks, c.blocks, c.ring, c.runs)
		c.nfree -= freed
		blocks = blocks[n:]
		if emptied >= 0 {
			// Its last tail block acquired: the run leaves the
			// queue.
			c.ring[c.runs[emptied].at&int64(len(c.ring)-1)] = tombstone
			c.freeRun(emptied)
		}
	}
}

// acquireAll is AcquireAll's loop, a function of its own so that the
// compiler keeps its values in registers (with freeRun's append in it,
// it reloaded some at every block): it acquires blocks in order, up to
// one whose acquisition leaves its run empty (a run in the queue holds
// at least one block; the caller frees it), and returns how many it
// acquired, how many of them were free, and that run's slot, or -1.
func acquireAll(blocks []int32, recs []block, ring []entry, runs []anonRun) (n int, freed int64, emptied int32) {
	mask := int64(len(ring) - 1)
	for i, b := range blocks {
		k := &recs[b]
		if k.ref == 0 {
			freed++
			if p := k.pos; p >= 0 {
				slot := &ring[int64(p)&mask]
				k.pos = withFlags(*slot &^ idMask)
				*slot = tombstone
			} else {
				s := inTail - p
				ru := &runs[s]
				ru.live--
				k.pos = withFlags(hashed | recorded)
				if ru.live == 0 && ru.uncached == 0 && ru.cached == 0 {
					k.ref++
					return i + 1, freed, s
				}
			}
		}
		k.ref++
	}
	return len(blocks), freed, -1
}
