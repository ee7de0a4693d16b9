package kvcache

import (
	"encoding/binary"
	"math"
)

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
	found := lookupAll(dst[n:n+len(hs)], hs, c.index.slots, c.index.mask, false)
	return dst[:n+found]
}

// lookupAll is LookupAll's loop: it writes the blocks of hs's leading
// hits to out, as long, and returns how many; chained says that hs are a
// chain's consecutive hashes (chainMembers).
//
// Note: the hashes of a prefix are mostly consecutive members of a
// group on consecutive ids (index), so a hit goes on along the entry's
// line while the hashes are its next members and it holds them, and no
// earlier entry of its key does (that one would hold an earlier copy),
// without a probe. (With only a hit in a key's first entry going on, a
// group's copy behind a partly evicted one took a probe a member: 158,000
// probes of BenchmarkReplayMooncakeRouters/sglang_cache_aware's 209,000.)
func lookupAll(out []int32, hs []uint64, slots []islot, mask uint64, chained bool) int {
	out = out[:len(hs)]
	for x := 0; x < len(hs); {
		h := hs[x]
		k, j := keyOf(h)
		bit := uint64(1) << (memberShift + j)
		i := home(k, mask)
		var earlier uint64 // the members of k's entries before slot i
		for {
			s := slots[i]
			if s.meta == 0 {
				return x
			}
			if s.key == k {
				if s.meta&bit != 0 {
					break
				}
				earlier |= s.meta
			}
			i = (i + 1) & mask
		}
		m := slots[i].meta
		b := blockAt(m, j)
		out[x] = b
		x++
		// The members whose earliest copy the entry holds: those no
		// entry of k before it holds.
		own := m &^ (earlier >> memberShift << memberShift)
		d := int32(1)
		if m&descBit != 0 {
			d = -1
		}
		if j == 0 && own>>memberShift == 1<<groupLen-1 && len(hs)-x >= groupLen-1 &&
			(chained && chainMembers((*[groupLen - 1]uint64)(hs[x:x+groupLen-1]), h) ||
				!chained && nextMembers((*[groupLen - 1]uint64)(hs[x:x+groupLen-1]), h)) {
			// A whole group, all of it in the entry.
			fillLine((*[groupLen - 1]int32)(out[x:x+groupLen-1]), b, d)
			x += groupLen - 1
			continue
		}
		// Members j+1, j+2, … while the entry holds them and the
		// hashes go on along the group (the next hash carried along,
		// the members' bits shifted down: as CommitAll's stretches).
		hh := hs[x : x+min(len(hs)-x, groupLen-1-int(j))]
		oo := out[x : x+len(hh)]
		ms, c := own>>(memberShift+j+1), stepAdd
		t := 0
		for ; t < len(hh); t++ {
			if h += c; hh[t] != h || ms&1 == 0 {
				break
			}
			ms >>= 1
			b += d
			oo[t] = b
		}
		x += t
	}
	return len(hs)
}

// ones has a 1 in each byte: a flag times ones is the flag in each of
// eight blocks' flags read as one word.
const ones = 0x0101010101010101

// CommitAll commits hs[i] to blocks[i], in order, as Commit does; the two
// are as long, and hs are consecutive hashes of one chain (Chain.Hashes,
// or BlockHasher.Hash block after block: see chainMembers).
//
// Note: a stretch of blocks on consecutive ids whose hashes are
// consecutive members of a group (index), a prefix's mostly, is one
// insert.
func (c *Cache) CommitAll(blocks []int32, hs []uint64) {
	flags, hashes := c.flags, c.hashes
	ix := &c.index
	blocks = blocks[:len(hs)]
	added := 0
	for i := 0; i < len(hs); {
		b, h := blocks[i], hs[i]
		if flags[b]&fRecorded != 0 {
			i++
			continue
		}
		k, j := keyOf(h)
		if j == 0 && len(hs)-i >= groupLen && chainMembers((*[groupLen - 1]uint64)(hs[i+1:i+groupLen]), h) {
			// A whole group on a line of ids, none committed: one
			// entry. (The group's flags as one word.)
			bl := (*[groupLen - 1]int32)(blocks[i+1 : i+groupLen])
			if d := bl[0] - b; (d == 1 || d == -1) && onLine(bl, b, d) {
				lo := min(b, b+(groupLen-1)*d)
				fl := flags[lo : lo+groupLen]
				if recordedAny(fl) == 0 {
					g := (*[groupLen]uint64)(hs[i : i+groupLen])
					hr := (*[groupLen]uint64)(hashes[lo : lo+groupLen])
					if d > 0 {
						*hr = *g
					} else {
						reverse(hr, g)
					}
					setFlags(fl, fHashed|fRecorded)
					ix.insert(k, line(b, 0, groupLen, d < 0))
					added += groupLen
					i += groupLen
					continue
				}
			}
		}
		hashes[b] = h
		flags[b] = fHashed | fRecorded
		// The stretch: blocks b, b+d, b+2d, … with hashes h,
		// h+contStep, h+2·contStep, … (d ±1), within the group.
		n, d := 1, int32(0)
		if lim := min(len(hs)-i, groupLen-int(j)); lim > 1 {
			bs := blocks[i : i+lim]
			if d = bs[1] - b; d == 1 || d == -1 {
				n = commitSteps(flags, hashes, bs, hs[i:i+len(bs)], d)
			}
		}
		ix.insert(k, line(b, j, uint(n), d < 0))
		added += n
		i += n
	}
	ix.n += added
}

// commitSteps commits hh[1], hh[2], … to bs[1], bs[2], … (flags and
// hashes: the cache's) as long as the blocks go on from bs[0] by d and
// the hashes from hh[0] by contStep, and the blocks hold no hash yet;
// it returns how many blocks the stretch has, bs[0] included.
//
// Note: a function of its own, so that the next block and hash are
// carried along in registers: in CommitAll's loop, with the block and
// hash each computed from n (two multiplications) and three bounds
// checked, a block was some 45 instructions (10 million of
// BenchmarkReplayMooncakeRouters/llm_d's, stretches that start inside
// a group, after a prefix hit), and carried along there, spilled to the
// stack at each block, 30.
func commitSteps(flags []uint8, hashes []uint64, bs []int32, hh []uint64, d int32) int {
	hh = hh[:len(bs)]
	b, h, c := bs[0], hh[0], stepAdd
	n := 1
	for ; n < len(bs); n++ {
		b += d
		h += c
		if bs[n] != b || hh[n] != h || flags[b]&fRecorded != 0 {
			break
		}
		hashes[b] = h
		flags[b] = fHashed | fRecorded
	}
	return n
}

// reverse sets dst to src's hashes, last first.
//
// Note: eight at a time, from arrays: a hash at a time, with its index
// computed and checked, it was 230 instructions a group.
func reverse(dst, src *[groupLen]uint64) {
	for i := 0; i < groupLen; i += 8 {
		d, s := (*[8]uint64)(dst[i:i+8]), (*[8]uint64)(src[groupLen-8-i:groupLen-i])
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] = s[7], s[6], s[5], s[4], s[3], s[2], s[1], s[0]
	}
}

// recordedAny returns the fRecorded bits of fl's flags, ORed a word at a time.
func recordedAny(fl []uint8) uint64 {
	a := (*[groupLen]uint8)(fl) // four words at constant places: no bound checked
	x := binary.LittleEndian.Uint64(a[0:]) | binary.LittleEndian.Uint64(a[8:]) |
		binary.LittleEndian.Uint64(a[16:]) | binary.LittleEndian.Uint64(a[24:])
	return x & (uint64(fRecorded) * ones)
}

// setFlags sets each of fl's groupLen flags to f.
func setFlags(fl []uint8, f uint8) {
	a, w := (*[groupLen]uint8)(fl), uint64(f)*ones // as recordedAny
	binary.LittleEndian.PutUint64(a[0:], w)
	binary.LittleEndian.PutUint64(a[8:], w)
	binary.LittleEndian.PutUint64(a[16:], w)
	binary.LittleEndian.PutUint64(a[24:], w)
}

// FreeAmong returns how many of blocks (with ids, distinct) are free:
// how many more blocks acquiring them all takes out of the free queue
// than they are; once that count passes most, it stops and returns a
// count above most (a caller asking whether they fit needs no more).
// It also returns the lowest free-queue position (Head's) of the free
// blocks it counted (math.MaxInt64: none): until Renumbers changes, none
// of them is evicted while Head is below it.
//
// Note: a run at a time, as AcquireAll; Ref block by block finds each
// block's run from its start (runStart), a scan of its run's bits per
// block: 219 million instructions more of the autoscaled Mooncake
// replay, whose build counts free hits while the cache is full, at
// every step a request waits for room.
func (c *Cache) FreeAmong(blocks []int32, most int64) (n, first int64) {
	first = math.MaxInt64
	for len(blocks) > 0 && n <= most {
		lo := c.runStart(blocks[0])
		_, m := c.follow(blocks, lo)
		if r := &c.recs[lo]; r.ref == 0 {
			n += int64(m)
			first = min(first, c.queuePos(r.span))
		}
		blocks = blocks[m:]
	}
	return n, first
}

// queuePos returns the free-queue position of span x: its own entry's,
// or, promoted into an anonymous run's tail, the run's.
func (c *Cache) queuePos(x int32) int64 {
	s := &c.spans[x]
	if s.owner < 0 {
		return s.at
	}
	return c.runs[s.owner].at
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
