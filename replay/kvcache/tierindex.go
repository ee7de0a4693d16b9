package kvcache

import (
	"math/bits"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// A tierIndex maps a Tier's block hashes to its slots: a hash table of
// buckets of eight entries, one 64-byte cache line each, probed bucket by
// bucket, with a count per bucket of the entries that had to probe past it
// (F14's outbound overflow count) instead of tombstones or moving entries
// back on deletion.
//
// Note: why not index (Cache's table, linear probing over single slots).
// A tier's keys come in groups: TierKey gives the blocks of one group
// (GroupBlocks consecutive blocks of a prefix) the same low bits but for
// the block's place in the group, so that the blocks a prefix stores,
// finds and evicts one after the other fall in one bucket, one cache line.
// Under linear probing such groups merge into long runs of occupied slots
// that every miss and every deletion scans to the end (most of a HiCache
// replay with an NVMe tier went there, its index a few MiB a worker, far
// from the CPU's caches); here a group fills its own bucket, and a lookup
// that misses stops at the first bucket no entry has probed past. A bucket
// keeps a tag byte per entry (0: empty; else 0x80 | 7 bits of the hash's
// high half), compared eight at a time in one word; a tag match is
// confirmed against the full hash the tier keeps in the slot, with the
// rest of the slot the caller reads next.
//
// The table grows with its entries, keeping at least four times as many
// places as entries (as a table sized for a full tier of indexed blocks
// has): most of a tier's blocks are held as runs (tierrun.go), which are
// not indexed, so a table sized for the capacity was mostly empty, its
// few entries spread over a MiB a worker for a 1 TiB NVMe tier, each
// lookup a miss of every cache.
type tierIndex struct {
	buckets []tierBucket
	mask    uint64 // len(buckets) - 1
	n       int    // entries
}

type tierBucket struct {
	tags  uint64             // byte i: entry i's tag
	slots [GroupBlocks]int32 // entry i's slot
	over  uint32             // entries stored beyond this bucket
	_     [5]uint32          // to a cache line
}

// GroupBlocks is the number of tier blocks of a key group (TierKey): a
// bucket's entries.
const GroupBlocks = 8

const (
	lowBytes  = 0x0101010101010101
	highBytes = 0x8080808080808080
)

// newTierIndex returns an empty index for up to blocks entries: a power
// of two of buckets, at least four times as many places as entries
// (so that groups seldom share a bucket), for the first few entries
// (initialEntries); add grows it.
func newTierIndex(blocks int64) tierIndex {
	n := uint64(2)
	for n*GroupBlocks < 4*uint64(min(blocks, initialEntries)) {
		n <<= 1
	}
	return tierIndex{buckets: make([]tierBucket, n), mask: n - 1}
}

// initialEntries is the number of entries a new index has room for.
const initialEntries = 256

// home returns h's bucket, its tag and its place in the bucket if that is
// free: a group's blocks, whose low bits differ in the last three only,
// share a bucket.
func (x *tierIndex) home(h uint64) (b uint64, tag uint64, j uint) {
	return (h >> 3) & x.mask, 0x80 | (h>>32)&0x7f, uint(h & (GroupBlocks - 1))
}

// match returns a mask of the high bits of the bytes of tags equal to
// tag (some bytes above an equal one may be set too; callers confirm).
func match(tags, tag uint64) uint64 {
	v := tags ^ tag*lowBytes
	return (v - lowBytes) &^ v & highBytes
}

// get returns the slot holding hash h; slots are the tier's, each with
// its hash.
func (x *tierIndex) get(h uint64, slots []tierSlot) (int32, bool) {
	b, tag, _ := x.home(h)
	for {
		bk := &x.buckets[b]
		for m := match(bk.tags, tag); m != 0; m &= m - 1 {
			if s := bk.slots[bits.TrailingZeros64(m)>>3]; slots[s].hash == h {
				return s, true
			}
		}
		if bk.over == 0 {
			return 0, false
		}
		b = (b + 1) & x.mask
	}
}

// add stores h → s, which the index must not hold; slots are the
// tier's, each indexed one with its hash (for growing).
func (x *tierIndex) add(h uint64, s int32, slots []tierSlot) {
	if (x.n+1)*4 > len(x.buckets)*GroupBlocks {
		x.grow(slots)
	}
	x.n++
	x.put(h, s)
}

// grow doubles the buckets and puts every entry back.
//
// Note: the new buckets are mapped writable in one call before the
// entries go back (prefault.Populate, on huge pages where it can): put
// reads a bucket's tags before it writes them, so that each fresh page
// faulted twice, mapped to the zero page at the read and copied at the
// write, that second fault flushing the other CPUs' TLBs. An SGLang
// HiCache replay at page_size 1 (a tier entry per token) spent 16 % of
// its CPU time there (perf record -g: tierIndex.grow → put →
// exc_page_fault → do_wp_page → flush_tlb_mm_range).
func (x *tierIndex) grow(slots []tierSlot) {
	old := x.buckets
	x.buckets = prefault.MakeHuge[tierBucket](2 * len(old))
	prefault.Populate(prefault.Slice(x.buckets))
	x.mask = uint64(len(x.buckets) - 1)
	for i := range old {
		bk := &old[i]
		for j := range GroupBlocks {
			if bk.tags>>(8*j)&0x80 != 0 {
				s := bk.slots[j]
				x.put(slots[s].hash, s)
			}
		}
	}
}

// put places h → s in the buckets.
func (x *tierIndex) put(h uint64, s int32) {
	b, tag, j := x.home(h)
	for {
		bk := &x.buckets[b]
		if free := match(bk.tags, 0); free != 0 {
			// Occupied tags have their high bit set, so free is exact.
			i := uint(bits.TrailingZeros64(free) >> 3)
			if free&(0x80<<(8*j)) != 0 {
				i = j
			}
			bk.tags |= tag << (8 * i)
			bk.slots[i] = s
			return
		}
		bk.over++
		b = (b + 1) & x.mask
	}
}

// del removes h → s, which the index must hold.
func (x *tierIndex) del(h uint64, s int32) {
	b, tag, _ := x.home(h)
	for {
		bk := &x.buckets[b]
		for m := match(bk.tags, tag); m != 0; m &= m - 1 {
			if i := bits.TrailingZeros64(m) >> 3; bk.slots[i] == s && bk.tags>>(8*i)&0xff == tag {
				bk.tags &^= 0xff << (8 * i)
				x.n--
				return
			}
		}
		bk.over--
		b = (b + 1) & x.mask
	}
}
