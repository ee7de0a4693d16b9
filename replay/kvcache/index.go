package kvcache

import "math/bits"

// An index maps block hashes to blocks: an open-addressing hash table with
// linear probing and backward-shift deletion.
//
// Note: a Go map degraded badly under the cache's churn (every eviction
// deletes, every commit inserts: millions of each per replay), spending
// most of a replay probing past deleted slots; and with many workers the
// tables outgrow the CPU caches, so each operation costs a memory access.
// Here the table has a fixed power-of-two size of at least four times
// the number of blocks, so it is never more than a quarter full and never
// grows (see slotsPerBlock);
// deletion moves entries back instead of leaving tombstones; and a slot is
// 8 bytes: a 32-bit fingerprint of the hash (its low half, whose low bits
// are also the home slot) and the block id + 1 (0: empty). A fingerprint
// match is confirmed against the block's full hash, which the cache keeps.
// BlockHasher gives the blocks of one trace block consecutive home slots,
// so a prefix's blocks, which are committed together and evicted together,
// share cache lines of the table instead of each missing the cache; with
// random home slots the index's adds and deletes were half of a 4-worker
// Mooncake replay.
//
// Like vLLM's BlockPool, the index may hold several blocks with one hash.
type index struct {
	slots []uint64
	mask  uint64
	// rowBits is log2 of the table's rows of probeStride slots: slot i's
	// place in probe order is its residue class's rows, then its row
	// (del's order).
	rowBits uint
	n       int
}

// probeStride is how far apart consecutive slots of a probe sequence
// are: a probe goes from slot i to i+probeStride, and from a residue
// class's last slot to the next class's first (next), so that the
// sequence visits every slot once, and the table is linear probing over
// the slots in that order (order).
//
// Note: a prefix's blocks have consecutive home slots, slotRun of them
// (BlockHasher). Probing slot after slot, a run whose homes overlap
// another's probed past the other's end for every one of its blocks
// (four probes an add on sglang_cache_aware, with the table a quarter
// full); probing a stride of slotRun apart, each of a run's blocks probes
// its own residue class, where the other run holds one slot, as if the
// homes were random; the run's blocks still share the cache lines of
// their homes.
const probeStride = slotRun

// next returns the slot after i in probe order.
func (x *index) next(i uint64) uint64 {
	if i += probeStride; i > x.mask {
		i = (i + 1) & (probeStride - 1)
	}
	return i
}

// slotsPerBlock is how many slots, at least, the index has per block.
//
// Note: consecutive home slots (BlockHasher) make a prefix's blocks one
// probe run, and runs from several prefixes merge into clusters that
// every add, miss and delete scans to its end (backward-shift deletion
// moves entries back across the rest of the cluster). At two slots a
// block, with the router sending sharers together, the index was some
// 300 million instructions of BenchmarkReplayMooncakeRouters/
// sglang_cache_aware (deletes 75 instructions each, lookups 46); at
// four, 70 million fewer (callgrind, the project's code, GC left out),
// for 8 more bytes a block (1 MiB, not 512 KiB, for an H100's 26,528
// blocks of llama-3.1-8b).
const slotsPerBlock = 4

func newIndex(blocks int64) index {
	size := uint64(16)
	for size < slotsPerBlock*uint64(blocks) {
		size <<= 1
	}
	return index{slots: make([]uint64, size), mask: size - 1, rowBits: uint(bits.TrailingZeros64(size / probeStride))}
}

// fingerprint is the low half of h, which the home slot is taken from.
// BlockHasher makes those bits consecutive along the engine blocks of one
// trace block (see Hash), so that a prefix's blocks, added, found and
// deleted one after the other, share cache lines of the table.
func fingerprint(h uint64) uint32 { return uint32(h) }

func pack(fp uint32, b int32) uint64 { return uint64(fp)<<32 | uint64(uint32(b)+1) }

func unpack(s uint64) (fp uint32, b int32) { return uint32(s >> 32), int32(uint32(s)) - 1 }

func (x *index) home(fp uint32) uint64 { return uint64(fp) & x.mask }

// get returns the block holding hash h; with several, the earliest added.
// hashes holds each block's hash.
func (x *index) get(h uint64, hashes []uint64) (int32, bool) {
	fp := fingerprint(h)
	for i := x.home(fp); x.slots[i] != 0; i = x.next(i) {
		if f, b := unpack(x.slots[i]); f == fp && hashes[b] == h {
			return b, true
		}
	}
	return 0, false
}

// add inserts h → b. Several blocks may hold the same hash (two requests
// computed the same prefix at once); get returns the earliest added that is
// still present, because linear probing with backward-shift deletion keeps
// entries of one home slot in insertion order.
func (x *index) add(h uint64, b int32) {
	fp := fingerprint(h)
	x.slots[freeSlot(x.slots, x.mask, fp)] = pack(fp, b)
	x.n++
}

// freeSlot returns the first empty slot of fingerprint fp's probe
// sequence (index.next) in slots, a table with mask, where add puts it.
//
// Note: the callers that add many entries in a loop (CommitAll,
// Promote) keep the table in locals and count the entries once; through
// add, slots and mask were loaded from the cache at every entry.
func freeSlot(slots []uint64, mask uint64, fp uint32) uint64 {
	i := uint64(fp) & mask
	for slots[i] != 0 {
		if i += probeStride; i > mask {
			i = (i + 1) & (probeStride - 1)
		}
	}
	return i
}

// del removes the entry h → b, which must be present.
func (x *index) del(h uint64, b int32) {
	if i, ok := take(x.slots, x.mask, pack(fingerprint(h), b)); !ok {
		x.shiftInto(i)
	}
	x.n--
}

// take finds entry want in slots, a table with mask, where it must be,
// and empties its slot if no entry after it on its probe run may need
// shifting back into it (the next slot in probe order is empty): it
// returns the slot, and whether it emptied it.
//
// Note: most deletes are that case (1.55 of the 1.76 million on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware), and AllocateNamed
// inlines it, where a call per evicted block made the compiler reload
// the loop's values from the stack after each (a call clobbers every
// register).
func take(slots []uint64, mask, want uint64) (uint64, bool) {
	i := want >> 32 & mask
	for slots[i] != want {
		if i += probeStride; i > mask {
			i = (i + 1) & (probeStride - 1)
		}
	}
	j := i + probeStride
	if j > mask {
		j = (j + 1) & (probeStride - 1)
	}
	if slots[j] != 0 {
		return i, false
	}
	slots[i] = 0
	return i, true
}

// shiftInto fills hole i, an entry's slot being emptied, with the later
// entries of its probe run whose home slot is at or before it
// (cyclically, in probe order), as backward-shift deletion does, and
// empties the slot left last.
//
// Note: the table, its mask and its rows in locals, and the hole's
// place in probe order kept: the table's stores might write the index's
// fields (the compiler cannot tell a slot from the mask, both uint64),
// so it loaded them again at every step of the shift.
func (x *index) shiftInto(i uint64) {
	slots, mask, rowBits := x.slots, x.mask, x.rowBits&63
	next := func(i uint64) uint64 { // x.next
		if i += probeStride; i > mask {
			i = (i + 1) & (probeStride - 1)
		}
		return i
	}
	// A slot's place in probe order: its residue class's rows, then its row.
	order := func(i uint64) uint64 { return (i&(probeStride-1))<<rowBits | i/probeStride }
	oi := order(i)
	for j := next(i); slots[j] != 0; j = next(j) {
		f, _ := unpack(slots[j])
		if oj := order(j); (oj-order(uint64(f)&mask))&mask >= (oj-oi)&mask {
			slots[i] = slots[j]
			i, oi = j, oj
		}
	}
	slots[i] = 0
}
