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
	flags, hashes := c.flags, c.hashes
	slots, mask := c.index.slots, c.index.mask // index.add's, in locals
	added := 0
	for i, b := range blocks[:len(hs)] {
		if flags[b]&fRecorded != 0 {
			continue
		}
		h := hs[i]
		hashes[b] = h
		flags[b] = fHashed | fRecorded
		fp := fingerprint(h)
		slots[freeSlot(slots, mask, fp)] = pack(fp, b)
		added++
	}
	c.index.n += added
}

// FreeAmong returns how many of blocks (with ids, distinct) are free:
// how many more blocks acquiring them all takes out of the free queue
// than they are; once that count passes most, it stops and returns a
// count above most (a caller asking whether they fit needs no more).
//
// Note: a run at a time, as AcquireAll; Ref block by block finds each
// block's run from its start (runStart), a scan of its run's bits per
// block: 219 million instructions more of the autoscaled Mooncake
// replay, whose build counts free hits while the cache is full, at
// every step a request waits for room.
func (c *Cache) FreeAmong(blocks []int32, most int64) int64 {
	var n int64
	for len(blocks) > 0 && n <= most {
		lo := c.runStart(blocks[0])
		_, m := c.follow(blocks, lo)
		if c.recs[lo].ref == 0 {
			n += int64(m)
		}
		blocks = blocks[m:]
	}
	return n
}

// AcquireAll acquires blocks, in order, as Acquire does.
//
// Note: a run at a time (acquireRun): the blocks of a prefix hit are
// mostly whole runs, a request's shared blocks, and one reference count
// a run is what a run of hits changes.
func (c *Cache) AcquireAll(blocks []int32) {
	for len(blocks) > 0 {
		blocks = blocks[c.acquireRun(blocks):]
	}
}
