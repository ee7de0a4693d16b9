package kvcache

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
	n     int
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
	return index{slots: make([]uint64, size), mask: size - 1}
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
	for i := x.home(fp); x.slots[i] != 0; i = (i + 1) & x.mask {
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
	i := x.home(fp)
	for x.slots[i] != 0 {
		i = (i + 1) & x.mask
	}
	x.slots[i] = pack(fp, b)
	x.n++
}

// del removes the entry h → b, which must be present.
func (x *index) del(h uint64, b int32) {
	fp := fingerprint(h)
	want := pack(fp, b)
	i := x.home(fp)
	for x.slots[i] != want {
		i = (i + 1) & x.mask
	}
	// Shift later entries of the probe run back into the hole when their
	// home slot is at or before it (cyclically).
	for j := (i + 1) & x.mask; x.slots[j] != 0; j = (j + 1) & x.mask {
		f, _ := unpack(x.slots[j])
		if (j-x.home(f))&x.mask >= (j-i)&x.mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = 0
	x.n--
}
