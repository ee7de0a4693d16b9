package trace

import (
	"unsafe"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// growBytes returns b with room for n more bytes, at least doubling its
// capacity when it has to grow, the room mapped (prefault.Populate) when
// it is large: the caller is about to write it all. A growth leaves a
// sixteenth of n spare.
//
// Note: without the spare, a list page's body, grown to its levels and
// 4 MiB of values, was a few bytes short for the next page's longer
// levels and grew to 8 MiB, mapping 4 MiB more of fresh memory, and the
// compressed copy likewise: growBytes allocated 38 MB a run of the
// 4-worker Mooncake replay, 31 MB with the spare (go test -memprofile of
// BenchmarkReplayCommand, 3 runs).
//
// Note: the writer's page buffers (a page's body, its compressed bytes, a
// column chunk's pages) are kept across row groups, but the first row
// groups are small (Writer.shift), so each grew a few times, in fresh
// memory: on the 4-worker Mooncake replay, the writer's were some 8,800 of
// the command's 19,000 page faults (perf record -e page-faults). make
// leaves memory fresh from the kernel as it is (append clears the room it
// adds, a fault per page), and one madvise maps the room many times
// faster than writing it page by page does. Mapping it on a goroutine
// instead was slower: the caller's writes overtook it at once.
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		g := prefault.MakeHuge[byte](len(b) + max(n+n/16, cap(b)))[:len(b)]
		if len(b)+n >= populateBytes {
			prefault.Populate(g[:len(b)+n])
		}
		copy(g, b)
		return g
	}
	if n >= populateBytes {
		prefault.Populate(b[len(b) : len(b)+n])
	}
	return b
}

// populateBytes is the least room growBytes maps in one call: below, a
// few page faults cost about as much as the call.
const populateBytes = 64 << 10

// appendRow appends v to a sink's slice, doubling it when full into memory
// mapped by one madvise (prefault.Populate) when of a few pages: a row group's
// sinks regrow as the first row groups double, and append's growth faulted
// in their fresh memory page by page (1,200 of the 4-worker Mooncake
// replay's 13,500 page faults).
func appendRow[T any](s []T, v T) []T {
	if len(s) < cap(s) {
		return append(s, v)
	}
	var zero T
	capacity, mapped := max(2*cap(s), 64), 0
	if capacity*int(unsafe.Sizeof(zero)) >= populateRowBytes {
		mapped = capacity
	}
	return append(prefault.Regrow(s, capacity, mapped), v)
}

// populateRowBytes is the least growth appendRow maps in one call: a sink
// is a few pages, each a fault of 12–21 µs where the call costs about 1.
const populateRowBytes = 16 << 10
