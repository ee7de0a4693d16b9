package prefault

import (
	"os"
	"unsafe"
)

// Populate maps the pages of b writable, as writing to each would, without
// changing its contents: b may be read and written meanwhile (by other
// goroutines too). Errors are ignored: the pages then fault in when
// written, as without it.
func Populate(b []byte) {
	if len(b) == 0 {
		return
	}
	populate(b)
}

// Slice returns the bytes of s, for Populate.
func Slice[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// Async populates b on a goroutine of its own and returns at once: the
// caller starts writing at b's beginning while the kernel maps the rest
// ahead of it, many times faster than the writes would fault it in.
func Async(b []byte) {
	if len(b) < minAsync {
		return // a few pages: faulting them costs less than a goroutine
	}
	go Populate(b)
}

// minAsync is the smallest b Async populates: 64 pages.
const minAsync = 64 << 12

// MakeHuge returns a slice of n zero values whose memory starts at a huge
// page's boundary when it spans at least one (hugePageSize), so that
// Populate can map all of it as huge pages; a smaller slice is make's.
// The slice may then take up to a huge page more of the heap's address
// space, untouched: the kernel maps none of it.
//
// Note: on a virtual machine the first write to a fresh page costs the
// host a fault too; MADV_HUGEPAGE then MADV_POPULATE_WRITE over a fresh
// 64 MiB mapping took 0.7–2 µs per 4 KiB, against 20–43 µs populated
// page by page and 43–58 µs written page by page (the 2026-12-02
// afternoon, on the shared 2-core VM under load 14; /tmp/cs/thp). Go
// places a large object at a page boundary only, so a huge page fits in
// the object's first 2 MiB only by chance.
func MakeHuge[T any](n int) []T {
	var zero T
	size := uintptr(n) * unsafe.Sizeof(zero)
	if size < hugePageSize || unsafe.Sizeof(zero) == 0 {
		return make([]T, n)
	}
	pad := int((hugePageSize + unsafe.Sizeof(zero) - 1) / unsafe.Sizeof(zero))
	s := make([]T, n+pad)
	at := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	gap := (at+hugePageSize-1)&^(hugePageSize-1) - at
	if gap%unsafe.Sizeof(zero) != 0 {
		return s[:n:n] // no value starts at the boundary
	}
	skip := int(gap / unsafe.Sizeof(zero))
	return s[skip : skip+n : skip+n]
}

// hugePageSize is the size of a transparent huge page: a page table's
// span, 512 pages (2 MiB on x86-64 and on arm64 with 4 KiB pages).
var hugePageSize = 512 * uintptr(os.Getpagesize())

// Regrow returns a copy of s in a new slice of capacity values (at least
// len(s)), whose first mapped values' pages are populated before the copy
// writes them: make leaves memory fresh from the kernel as it is (zero),
// where append and slices.Grow clear the room they add, a page fault per
// fresh page. The caller chooses capacity and what to map: what it will
// write next.
func Regrow[T any](s []T, capacity, mapped int) []T {
	g := make([]T, len(s), capacity)
	Populate(Slice(g[:mapped]))
	copy(g, s)
	return g
}
