//go:build unix

package ingest

import (
	"os"
	"runtime"
	"sync"
	"syscall"
)

// A fileMap is a read-only private mapping of a file.
type fileMap struct {
	once sync.Once
	b    []byte
}

func (m *fileMap) release() {
	m.once.Do(func() {
		if len(m.b) > 0 {
			syscall.Munmap(m.b)
		}
		m.b = nil
	})
}

// mapFile maps the first size bytes of f read-only. owner's cleanup
// unmaps it if release was never called.
//
// Note: a mapping, not a heap buffer: the garbage collector paces itself
// on the live heap (GOGC), so a heap buffer of the whole input would let
// the per-request garbage grow to as much again before a collection, and
// the peak would be twice the input. Mapped pages are outside the heap,
// and the kernel can drop them under memory pressure.
func mapFile[T any](f *os.File, size int64, owner *T) ([]byte, func(), error) {
	if size == 0 {
		return nil, func() {}, nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	m := &fileMap{b: b}
	runtime.AddCleanup(owner, func(m *fileMap) { m.release() }, m)
	return b, m.release, nil
}
