package prefault

import (
	"runtime"
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14), madvHugepage
// MADV_HUGEPAGE (Linux 2.6.38; include/uapi/asm-generic/mman-common.h).
const (
	madvPopulateWrite = 23
	madvHugepage      = 14
)

// pageSize is the system's page size.
var pageSize = uintptr(syscall.Getpagesize())

// populate advises the whole pages inside b: madvise needs a page-aligned
// start, and a page b shares with other memory is mapped anyway once any
// of it was written. The whole huge pages inside b are first marked for
// transparent huge pages (adviseHuge).
func populate(b []byte) syscall.Errno {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	start = (start + pageSize - 1) &^ (pageSize - 1)
	end &^= pageSize - 1
	if start >= end {
		return 0
	}
	adviseHuge(b) // without, the pages are small
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateWrite)
	runtime.KeepAlive(b) // start is a uintptr: b must outlive the call
	return errno
}

// adviseHuge marks the whole huge pages inside b MADV_HUGEPAGE: a page b
// shares with other memory is left as it is.
func adviseHuge(b []byte) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	if hs, he := (start+hugePageSize-1)&^(hugePageSize-1), end&^(hugePageSize-1); hs < he {
		syscall.Syscall(syscall.SYS_MADVISE, hs, he-hs, madvHugepage)
	}
	runtime.KeepAlive(b)
}
