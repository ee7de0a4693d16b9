//go:build !unix

package ingest

import "os"

// mapFile reads the first size bytes of f into memory: this system has no
// mmap (see the unix version for why a mapping is better).
func mapFile[T any](f *os.File, size int64, owner *T) ([]byte, func(), error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, nil, err
	}
	return b, func() {}, nil
}
