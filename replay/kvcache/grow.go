package kvcache

import "github.com/opaltrace/opaltrace/internal/prefault"

// Grow returns s with room for n more values, as grow does: a caller that
// knows how long a block table will grow sizes it once.
func Grow[T any](s []T, n int) []T { return grow(s, n) }

// grow returns s with room for n more values, at least doubling its
// capacity when it has to grow; the part the caller writes next (the
// copy and the n values) is mapped by one madvise (prefault.Populate),
// which makes no call when that part holds no whole page.
//
// Note: a request's block table (AllocateNamed) and its chain of hashes
// (Chain.extend) grew by slices.Grow, whose growslice clears the room it
// adds, a page fault per fresh page: on the 4-worker Mooncake replay the
// two were some 3,500 of the command's 12,300 page faults (perf record -e
// page-faults), with this some 750. make leaves memory fresh from the kernel as it is (zero),
// and one madvise maps it many times faster than the writes fault it in:
// a fault cost 12–21 µs, the call some 1 µs and 1.1 per page
// (internal/prefault), so even one whole page is worth the call.
func grow[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	return prefault.Regrow(s, max(len(s)+n, 2*cap(s)), len(s)+n)
}

// populate maps the cache's tables (prefault.Populate), fresh from make,
// when they are of a GPU's size: a replay writes them all as its blocks
// are handed out, hashed, indexed and freed, a page fault per page
// otherwise (on the 4-worker Mooncake replay some 750 of the command's
// page faults, perf record -e page-faults: the index's slots in
// CommitAll, the ring in release, the records in AllocateNamed; on 16
// workers, perf stat -e page-faults, 3,700 fewer with it).
//
// Note: a cache of more than populateTables bytes is left to fault in as
// written: a configured capacity far beyond what a replay fills (a test's
// kv_cache_tokens of millions of blocks) would be memory made resident
// for nothing, some 1 µs a page. An H100's vLLM cache for an 8B model,
// 26,528 blocks, is 1.6 MB of tables.
func (c *Cache) populate() {
	tables := [][]byte{
		prefault.Slice(c.recs), prefault.Slice(c.starts), prefault.Slice(c.flags),
		prefault.Slice(c.hashes), prefault.Slice(c.dropped),
		prefault.Slice(c.ring), prefault.Slice(c.index.slots),
	}
	size := 0
	for _, b := range tables {
		size += len(b)
	}
	if size > populateTables {
		return
	}
	for _, b := range tables {
		prefault.Populate(b)
	}
}

// populateTables is the most table memory populate maps: 8 MiB, 84,000
// to 140,000 blocks (60 to 100 bytes a block, as the ring and index round
// up to powers of two), three to five times the H100's llama-3.1-8b cache.
const populateTables = 8 << 20
