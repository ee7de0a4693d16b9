package prefault

import "unsafe"

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
