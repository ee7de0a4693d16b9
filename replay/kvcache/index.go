package kvcache

import (
	"encoding/binary"
	"math/bits"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// An index maps block hashes to blocks, a group of up to groupLen hashes
// an entry: an open-addressing hash table with linear probing and
// backward-shift deletion.
//
// Hashes fall into groups by their value alone: the group of h is its
// key, h − j·contStep for j the low five bits of h (keyOf), whose low
// five bits are therefore 0, and h is the group's j-th member. Along a
// run of slotRun continuations a request's hashes start at a member 0
// and step by contStep (Hash), so a run's blocks are the members of one
// group; and a prefix's blocks mostly have consecutive ids, ascending or
// descending (runs.go). An entry holds a group's key and the blocks of
// some of its members whose ids lie on one line, ascending or descending
// with the member (base ± j), with a bit per member it holds: so the
// blocks a request commits, finds or evicts one after the other are one
// entry's, probed for once, and a whole group is compared, written or
// removed at once (nextMembers, CommitAll, lookupAll, unindex).
//
// Note: with an entry per block hash (8 bytes: a fingerprint and the
// block), the index was a third of the cache's instructions on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware (deletes at eviction
// 51 million instructions with their backward shifts 12, lookups 42,
// inserts 39), as the router makes four times round-robin's prefix
// hits, each a probe. An entry per group with the loops still a block
// at a time cost more than that (1,019 million instructions for the
// project's code, against 969): the probes it saved were one slot each,
// at a quarter full, and a block's own bookkeeping in the loops was as
// much; and with the groups' members at random places (the low bits of
// a run's first hash not 0), a run fell into two groups.
//
// Note: a group is 32 hashes (slotRun), a Mooncake trace block's engine
// blocks: with groups of eight, a trace block's four entries took four
// insertions, four probes a lookup and four removals an eviction, and
// where a lookup found a group in a key's second entry (an earlier copy
// partly evicted) every member took a probe of its own. At 32, with the
// members an entry holds from a key's earlier entries ruled out at once
// (lookupAll's own), BenchmarkReplayMooncakeRouters's project code went
// from 604.5 to 578.4 million instructions (round_robin) and from 791.5
// to 736.6 (sglang_cache_aware); the loops over a group's members
// (nextMembers, fillLine, onLine) are four times as long, which costs
// back a part of it.
//
// Like vLLM's BlockPool, the index may hold several blocks with one hash,
// and get returns the earliest added that is still present. Entries of
// one key share a home slot, and linear probing with backward-shift
// deletion keeps the entries of one home slot in the order they were
// added; a block joins an entry only if it is its key's last entry
// (insert), so the first entry of a key that holds member j holds its
// earliest added copy.
//
// The table has a power-of-two size and is kept at most half full: it
// starts small (startSlots) and doubles (grow) once an insertion's new
// entry fills more than half (insert), up to slotsPerBlock slots per
// block, a size it can never fill past half (an entry holds a block at
// least). Deletion moves entries back instead of leaving tombstones.
type index struct {
	slots []islot
	mask  uint64
	n     int // the blocks it holds
	used  int // the slots it fills (entries)
	// limit is the most entries before the table grows: half its
	// slots, or, at its largest size, as many as it has.
	limit int
	most  uint64 // the largest size: slotsPerBlock slots per block
}

// An islot is a slot of the index: a group's key and what its entry
// holds (meta: 0 for an empty slot, else the line of the entry's blocks,
// its base + baseBias in the low 30 bits and descBit, and its members'
// bits from bit memberShift on).
type islot struct {
	key, meta uint64
}

const (
	// groupLen is how many hashes a group has: consecutive
	// continuations (step), as many as Hash steps in a row.
	groupLen = slotRun
	// baseBias keeps a base that is below 0 (a line whose block 0 is
	// not one of its members) positive, and an entry's meta nonzero.
	baseBias    = groupLen
	baseMask    = 1<<30 - 1
	descBit     = 1 << 30
	memberShift = 32
)

// keyOf returns the key of the group hash h is in, and its place there.
//
// Note: h − j·contStep only takes j from h's low half (contStep's is 1,
// and j is at most that half's low bits), so the key's low five bits
// are 0 and key + j·contStep is h again; the groups partition the
// hashes, whatever their values.
func keyOf(h uint64) (key uint64, j uint) {
	j = uint(h) & (groupLen - 1)
	return h - uint64(j)*contStep, j
}

// blockAt returns the block of member j of an entry with meta m.
func blockAt(m uint64, j uint) int32 {
	base := int32(m&baseMask) - baseBias
	if m&descBit != 0 {
		return base - int32(j)
	}
	return base + int32(j)
}

// line returns the meta of an entry holding the n blocks b, b+1, …
// (ascending: not desc) or b, b−1, … (desc) as members j, j+1, …,
// j+n−1 (j+n ≤ groupLen).
func line(b int32, j, n uint, desc bool) uint64 {
	members := (uint64(1)<<n - 1) << j << memberShift
	if desc {
		return uint64(b+int32(j)+baseBias) | descBit | members
	}
	return uint64(b-int32(j)+baseBias) | members
}

// merge returns the meta of an entry that holds the blocks of entries
// with metas m and n, and whether they can be one: their members differ
// and their blocks lie on one line (an entry of one member lies on a
// line either way).
func merge(m, n uint64) (uint64, bool) {
	mm, nm := m>>memberShift, n>>memberShift
	if mm&nm != 0 {
		return m, false
	}
	if nm&(nm-1) == 0 {
		m, n, mm, nm = n, m, nm, mm // m is the one with one member, if any
	}
	jm := uint(bits.TrailingZeros64(mm))
	if mm&(mm-1) != 0 {
		// Both on lines of their own: the same one.
		if m&(baseMask|descBit) != n&(baseMask|descBit) {
			return m, false
		}
		return m | n, true
	}
	if bm := blockAt(m, jm); nm&(nm-1) != 0 {
		// m's block on n's line.
		if blockAt(n, jm) != bm {
			return m, false
		}
		return n | m&^(baseMask|descBit), true
	} else {
		// Two blocks: ascending or descending with their members.
		jn := uint(bits.TrailingZeros64(nm))
		bn, d := blockAt(n, jn), int32(jn)-int32(jm)
		switch {
		case bn == bm+d:
			return uint64(bm-int32(jm)+baseBias) | (mm|nm)<<memberShift, true
		case bn == bm-d:
			return uint64(bm+int32(jm)+baseBias) | descBit | (mm|nm)<<memberShift, true
		}
		return m, false
	}
}

// slotsPerBlock is how many slots, at most, the index has per block: an
// entry holds one block at least, so at that size the table is at most
// half full. It starts at startSlots (an eighth of that size, if less)
// and doubles as its entries come (insert), not as a call's blocks could.
//
// Note: it grew before a call that could add n entries (reserve, n the
// call's blocks: an entry a block at worst), and a prompt of thousands of
// blocks grew it: on BenchmarkReplayMooncakeRouters/sglang_cache_aware
// the 16 workers' tables were of 8,192 and 16,384 slots (128 and
// 256 KiB) for at most 550 to 850 entries, so that a probe's first load
// was a cache miss somewhere in 2 to 4 MiB of slots: the probe lines of
// unindex, insert, lookupAll and Chain.lookup were 13 ms of the 55 ms a
// replay took over round-robin's (pprof, -cpu 1, 60 replays each). Grown
// by entries, the tables are of 1,024 to 2,048 slots, and the cache-aware
// routers' replays took 3 to 8 % less CPU time, round-robin's 3 % less
// and autoscaling's as much (README: what a router, an autoscaler or a
// tier costs the engine), for instructions that rose 0.6 to 6.7 million
// (denser tables, longer probe runs). Kept at most a quarter full, the
// instructions were as before and the CPU time no less.
//
// Note: at its largest size from the start, on 16 workers, 16 MiB of
// slots that a lookup, an insertion and an eviction each reach at a
// random place: on BenchmarkReplayMooncakeRouters/sglang_cache_aware one
// line of unindex, a probe's first load, was a fifth of the CPU time
// (pprof, -cpu 1) for some 4 % of its instructions.
const slotsPerBlock = 2

// startSlots is the size a table starts at: 4 KiB.
const startSlots = 256

func newIndex(blocks int64) index {
	most := uint64(16)
	for most < slotsPerBlock*uint64(blocks) {
		most <<= 1
	}
	x := index{most: most}
	x.resize(max(16, min(startSlots, most/8)))
	return x
}

// resize gives x an empty table of size slots.
func (x *index) resize(size uint64) {
	x.slots, x.mask, x.used = make([]islot, size), size-1, 0
	x.limit = int(size / 2)
	if size == x.most {
		x.limit = int(size) // never reached: see slotsPerBlock
	}
}

// grow doubles the table, its entries moved to their new home slots.
//
// Note: an entry's place among the entries of its key is what get
// relies on (the first that holds a member is the earliest copy), and
// they lie in one probe run from their home slot in the order they were
// added: taken from an empty slot onwards, once around, each key's
// entries come in that order, and each goes to the first empty slot from
// its new home, after the earlier ones.
func (x *index) grow() {
	old, mask := x.slots, x.mask
	start := uint64(0)
	for old[start].meta != 0 { // at most one entry past half full
		start++
	}
	x.resize(2 * uint64(len(old)))
	prefault.Populate(prefault.Slice(x.slots))
	slots, nmask := x.slots, x.mask
	for k := uint64(1); k <= mask+1; k++ {
		e := old[(start+k)&mask]
		if e.meta == 0 {
			continue
		}
		i := home(e.key, nmask)
		for slots[i].meta != 0 {
			i = (i + 1) & nmask
		}
		slots[i] = e
		x.used++
	}
}

// clearBlocks empties the table, keeping its size, given the flags and
// hashes of blocks 0, 1, … among which are all it holds: it removes the
// indexed ones (hashed, not private) one by one when they are few, else
// clears every slot.
func (x *index) clearBlocks(fl []uint8, hs []uint64) {
	if x.n > len(x.slots)/16 {
		clear(x.slots)
		x.n, x.used = 0, 0
		return
	}
	for b := 0; x.n > 0 && b < len(fl); b++ {
		if len(fl)-b >= 8 && binary.LittleEndian.Uint64(fl[b:])&(uint64(fHashed)*ones) == 0 {
			b += 7 // eight blocks none of which is hashed
			continue
		}
		if fl[b]&(fHashed|fPrivate) == fHashed {
			x.del(hs[b], int32(b))
		}
	}
	if x.n != 0 || x.used != 0 {
		panic("kvcache: index entries of no block")
	}
}

// home returns the home slot of key k in a table with mask: the key's
// bits above the five that are 0.
func home(k, mask uint64) uint64 { return k >> 5 & mask }

// get returns the block holding hash h; with several, the earliest added.
func (x *index) get(h uint64) (int32, bool) {
	k, j := keyOf(h)
	bit := uint64(1) << (memberShift + j)
	slots, mask := x.slots, x.mask
	for i := home(k, mask); slots[i].meta != 0; i = (i + 1) & mask {
		if s := slots[i]; s.key == k && s.meta&bit != 0 {
			return blockAt(s.meta, j), true
		}
	}
	return 0, false
}

// add inserts h → b. Several blocks may hold the same hash (two requests
// computed the same prefix at once); get returns the earliest added that
// is still present.
func (x *index) add(h uint64, b int32) {
	k, j := keyOf(h)
	x.insert(k, line(b, j, 1, false))
	x.n++
}

// insert adds the blocks of an entry with meta m, of key k: to the key's
// last entry if they can join it (merge), else as a new entry after it,
// and the table grows once that entry puts it past its limit. (It does
// not count the blocks: n is its callers'.)
//
// Note: only the last, so that a later entry of the key never holds an
// earlier copy of a member (get).
func (x *index) insert(k, m uint64) {
	slots, mask := x.slots, x.mask
	last := ^uint64(0)
	i := home(k, mask)
	for ; slots[i].meta != 0; i = (i + 1) & mask {
		if slots[i].key == k {
			last = i
		}
	}
	if last != ^uint64(0) {
		lm := slots[last].meta
		if lm&m>>memberShift == 0 && (lm^m)&(baseMask|descBit) == 0 {
			slots[last].meta = lm | m // one line (merge's common case)
			return
		}
		if u, ok := merge(lm, m); ok {
			slots[last].meta = u
			return
		}
	}
	slots[i] = islot{key: k, meta: m}
	if x.used++; x.used > x.limit {
		x.grow()
	}
}

// nextMembers reports whether g holds members 1, 2, … of the group whose
// member 0 is h (h + contStep, h + 2·contStep, …).
//
// Note: all compared at once, their differences ORed (zero only if all
// are), as followUp compares blocks: one at a time, a compare and a
// branch each, the loops over a group's blocks cost as much as the
// probes the groups save.
func nextMembers(g *[groupLen - 1]uint64, h uint64) bool { return stepsFrom(g, h, contStep) }

// chainMembers is nextMembers for g, the hashes that follow h in one
// chain (Chain, or BlockHasher.Hash block after block): it compares only
// the last, h + 31·contStep.
//
// Note: a chain's hash whose low five bits are j ≠ 0 is its
// predecessor's step (Hash: a run's first hash has them 0, or is 1 where
// it would be 0), but for a request's first private block, a run start
// of its own stepped to its place (privateStart); so g's last being h's
// 31st member makes g[29] its 30th, and so on down: g holds members 1 …
// 31 unless a private run's start equals h's key, a 59-bit collision,
// the odds every hash here already takes (two contents, one hash). The
// 31 comparisons were 12.9 million instructions of
// BenchmarkReplayMooncakeRouters/llm_d (CommitAll, Promote and lookups
// of a chain's hashes) and 3.6 of round_robin
// (TestChainMembersIsNextMembers checks the two agree on chains).
func chainMembers(g *[groupLen - 1]uint64, h uint64) bool {
	c := contStep // a variable, so that the product wraps
	return g[groupLen-2] == h+(groupLen-1)*c
}

// fillLine sets o to the blocks b+d, b+2d, … (the rest of a group's line
// from b).
//
// Note: the block carried along, an addition and a store each, where
// b + i·d was computed for each (the steps' note).
func fillLine(o *[groupLen - 1]int32, b, d int32) {
	for i := 0; i < groupLen-8; i += 8 {
		b += d
		o[i] = b
		b += d
		o[i+1] = b
		b += d
		o[i+2] = b
		b += d
		o[i+3] = b
		b += d
		o[i+4] = b
		b += d
		o[i+5] = b
		b += d
		o[i+6] = b
		b += d
		o[i+7] = b
	}
	t := (*[7]int32)(o[groupLen-8:])
	b += d
	t[0] = b
	b += d
	t[1] = b
	b += d
	t[2] = b
	b += d
	t[3] = b
	b += d
	t[4] = b
	b += d
	t[5] = b
	b += d
	t[6] = b
}

// onLine reports whether bl holds the blocks b+d, b+2d, …
//
// Note: as stepsFrom compares them. (Two ids a word, as followUp
// compares a table with a run, cost 2.1 million instructions more on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware: 31 blocks are three
// words' loop and seven blocks one by one.)
func onLine(bl *[groupLen - 1]int32, b, d int32) bool { return stepsFrom(bl, b, d) }

// stepsFrom reports whether g holds x+d, x+2d, … (wrapping), eight
// compared at a time, their differences ORed (zero only if all are).
func stepsFrom[T uint64 | int32](g *[groupLen - 1]T, x, d T) bool {
	var diff T
	for i := 0; i < groupLen-8; i += 8 {
		diff |= (g[i] ^ (x + d)) | (g[i+1] ^ (x + 2*d)) | (g[i+2] ^ (x + 3*d)) | (g[i+3] ^ (x + 4*d)) |
			(g[i+4] ^ (x + 5*d)) | (g[i+5] ^ (x + 6*d)) | (g[i+6] ^ (x + 7*d)) | (g[i+7] ^ (x + 8*d))
		x += 8 * d
	}
	t := (*[7]T)(g[groupLen-8:])
	diff |= (t[0] ^ (x + d)) | (t[1] ^ (x + 2*d)) | (t[2] ^ (x + 3*d)) | (t[3] ^ (x + 4*d)) |
		(t[4] ^ (x + 5*d)) | (t[5] ^ (x + 6*d)) | (t[6] ^ (x + 7*d))
	return diff == 0
}

// del removes the entry h → b, which must be present: the entry that
// holds b as h's member (only one can, its line through the member names
// it) loses that member, and goes if it was its last.
//
// Note: one call, the probe inline, as unindex's loop does it for a
// stretch: a find and a drop of their own were three calls, 95
// instructions of the 150 that evicting one block took (evictBlock, a
// decode step's).
func (x *index) del(h uint64, b int32) {
	k, j := keyOf(h)
	bit := uint64(1) << (memberShift + j)
	slots, mask := x.slots, x.mask
	s := home(k, mask)
	for {
		if e := &slots[s]; e.meta&bit != 0 && e.key == k && blockAt(e.meta, j) == b {
			break
		}
		s = (s + 1) & mask
	}
	switch m := slots[s].meta &^ bit; {
	case m>>memberShift != 0:
		slots[s].meta = m
	case slots[(s+1)&mask].meta == 0:
		slots[s] = islot{} // no later entry to shift back
		x.used--
	default:
		x.shiftInto(s)
		x.used--
	}
	x.n--
}

// unindex removes the entries of the indexed blocks among ids from,
// from+1, …, whose flags and hashes are fl and hs (an eviction), and
// returns how many blocks it removed.
//
// Note: ids that are consecutive members of one entry, along its line
// (a prefix's blocks, mostly), are found once and removed together. The
// order of the removals does not matter: get's answers depend on which
// entries hold which blocks and on the order of each home slot's
// entries, which backward shifts keep. The table is at most half full
// and mostly far less: of 230,000 entries that
// BenchmarkReplayMooncakeRouters/sglang_cache_aware's evictions empty,
// 7,000 have a later entry in their probe run, so the slot after is
// tested here and shiftInto called only then (a call each was 21
// instructions an entry).
func (x *index) unindex(fl []uint8, hs []uint64, from int32) int {
	slots, mask := x.slots, x.mask
	hs = hs[:len(fl)]
	removed, emptied := 0, 0
	for i := 0; i < len(fl); {
		if fl[i]&(fHashed|fPrivate) != fHashed {
			i++
			continue
		}
		k, j := keyOf(hs[i])
		// find, inline: a call per entry was a fifth of unindex.
		bit, b := uint64(1)<<(memberShift+j), from+int32(i)
		s := home(k, mask)
		for {
			if e := &slots[s]; e.meta&bit != 0 && e.key == k && blockAt(e.meta, j) == b {
				break
			}
			s = (s + 1) & mask
		}
		m := slots[s].meta
		members := m >> memberShift
		// Ids i, i+1, …, i+n−1 are its members j, j+1, … (an
		// ascending line) or j, j−1, … (descending): the bits set
		// from j on, up or down, within the range.
		var n uint
		var run uint64
		if m&descBit == 0 {
			n = min(uint(bits.TrailingZeros64(^(members >> j))), uint(len(fl)-i))
			run = (1<<n - 1) << j
		} else {
			n = min(uint(bits.LeadingZeros64(^(members << (63 - j)))), uint(len(fl)-i))
			run = (1<<n - 1) << (j + 1 - n)
		}
		switch m &^= run << memberShift; {
		case m>>memberShift != 0:
			slots[s].meta = m
		case slots[(s+1)&mask].meta == 0:
			slots[s] = islot{} // no later entry to shift back
			emptied++
		default:
			x.shiftInto(s)
			emptied++
		}
		removed += int(n)
		i += int(n)
	}
	x.used -= emptied
	return removed
}

// shiftInto fills hole i, an entry's slot being emptied, with the later
// entries of its probe run whose home slot is at or before it
// (cyclically), as backward-shift deletion does, and empties the slot
// left last.
func (x *index) shiftInto(i uint64) {
	slots, mask := x.slots, x.mask
	for j := (i + 1) & mask; slots[j].meta != 0; j = (j + 1) & mask {
		if (j-home(slots[j].key, mask))&mask >= (j-i)&mask {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = islot{}
}
