package kvcache

// LookupChain appends to dst, for blocks from, from+1, … of ch up to to
// (at most ch.Shared()), the block Lookup returns for each block's hash,
// up to the first it misses, and returns dst: what
// LookupAll(dst, ch.Hashes(from, to)) returns. ch hashes its blocks up to
// the end of the group of slotRun blocks the miss lies in, no further.
//
// Note: a prefix match hashed its blocks ahead in doubling stretches, then
// looked them up, comparing each group's hashes with its first's steps to
// take a whole entry's line at once (lookupAll); hashing and lookups were
// 34.8 million instructions of BenchmarkReplayMooncakeRouters/round_robin
// and 95.6 of sglang_cache_aware. A group whose slotRun blocks are
// continuations in one trace block (all of Mooncake's: 32 engine blocks
// a trace block, one group) is one run start and its steps, so here it
// is hashed and looked up at once (nextGroup): its first hash is the
// entry's key, and the others are its steps by construction, compared
// with nothing; and nothing is hashed past the group of the first miss.
// Then 29.0 and 89.0 million. (Blocks a router hashed before the match,
// to promote a neighbour's, are looked up as LookupAll does, a group
// told whole by its last hash, chainMembers: a bit per group saying that
// its hashes are a key's members, set as they were hashed, cost more than
// the comparisons it saved with groups of eight, 12 million instructions
// on sglang_cache_aware.)
func (c *Cache) LookupChain(dst []int32, ch *Chain, from, to int64) []int32 {
	to = min(to, ch.shared)
	if from >= to {
		return dst
	}
	n := len(dst)
	dst = grow(dst, int(to-from))
	found := ch.lookup(dst[n:n+int(to-from)], from, c.index.slots, c.index.mask)
	return dst[:n+found]
}

// lookup is LookupChain's loop: it writes the blocks of the leading hits
// among blocks from, from+1, … (shared, as many as out) to out, and
// returns how many.
func (c *Chain) lookup(out []int32, from int64, slots []islot, mask uint64) int {
	to := from + int64(len(out))
	for x := from; x < to; {
		if have := int64(len(c.hashes)); x < have {
			// Hashed already: looked up as LookupAll does, a
			// group told whole by its last hash (chainMembers).
			e := min(have, to)
			got := int64(lookupAll(out[x-from:e-from], c.hashes[x:e], slots, mask, true))
			if x += got; x < e {
				return int(x - from)
			}
			continue
		}
		if x > int64(len(c.hashes)) || x%slotRun != 0 || to-x < slotRun || !c.nextGroup() {
			c.extend(x) // hashes up to the end of x's group
			continue
		}
		// Block x starts a group, just hashed by nextGroup: its first
		// hash is its key, the others its steps. The first entry of
		// the key that holds member 0 holds its earliest copy; if it
		// holds all slotRun and no earlier entry of the key holds any
		// of them, their earliest copies lie on its line (lookupAll).
		k := c.hashes[x]
		i := home(k, mask)
		var earlier uint64 // the members of k's entries before slot i
		for {
			s := slots[i]
			if s.meta == 0 {
				return int(x - from)
			}
			if s.key == k {
				if s.meta&(1<<memberShift) != 0 {
					break
				}
				earlier |= s.meta
			}
			i = (i + 1) & mask
		}
		m := slots[i].meta
		if (m&^earlier)>>memberShift != 1<<groupLen-1 {
			// Not all on one line: a member at a time.
			got := int64(lookupAll(out[x-from:x-from+slotRun], c.hashes[x:x+slotRun], slots, mask, true))
			if x += got; got < slotRun {
				return int(x - from)
			}
			continue
		}
		b, d := blockAt(m, 0), int32(1)
		if m&descBit != 0 {
			d = -1
		}
		o := out[x-from : x-from+slotRun]
		o[0] = b
		fillLine((*[groupLen - 1]int32)(o[1:]), b, d)
		x += slotRun
	}
	return len(out)
}

// nextGroup hashes the group of slotRun blocks that starts at block
// len(c.hashes), a multiple of slotRun, when they are shared
// continuations in one trace block after its first (a run start and its
// steps) or that trace block's first block and continuations, and
// reports whether it did: then the group's first hash is member 0 of
// its key and the others are its next members (index). Else it hashes
// nothing.
//
// Note: it is extend's loop for these two cases, a group at a time,
// without the bookkeeping of stretches of any length.
func (c *Chain) nextGroup() bool {
	h := &c.h
	n := int64(len(c.hashes))
	eb, tb := h.EngineBlock, h.TraceBlock
	if n+slotRun > c.shared || c.off+slotRun*eb > tb {
		return false
	}
	prev := Root
	if n > 0 {
		prev = c.hashes[n-1]
	}
	var x uint64
	if c.off > 0 {
		x = runStart(prev, n)
	} else {
		// The trace block's first engine block (extend's other case,
		// one trace block: eb ≤ tb).
		x = mix(prev, uint64(h.HashIDs[c.j]), 1)
		x = mix(x, uint64(tb), 2)
		x = mix(x, uint64(n), 4)
		x = x&^0xffffffff | uint64(uint32(x)&^(slotRun-1))
		if x == 0 {
			x = 1
		}
	}
	if x&(slotRun-1) != 0 {
		return false // 0 made 1: not member 0 (hashed by extend instead)
	}
	if hs := c.hashes; int64(cap(hs)) < n+slotRun {
		c.hashes = grow(hs, int(max(n+slotRun, 2*int64(cap(hs))))-len(hs))
	}
	// The chain's own slice resliced: only its length is stored, where
	// assigning a local copy back stored the pointer too, behind a
	// write barrier's check.
	c.hashes = c.hashes[:n+slotRun]
	steps(c.hashes[n:], x)
	if c.off += slotRun * eb; c.off >= tb {
		c.off -= tb
		c.j++
	}
	return true
}
