package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// A File is an output being written. Commit makes it visible; Abort (or a
// Commit that fails) removes it.
type File struct {
	*os.File
	target string
	done   bool
}

// Create starts writing path.
func Create(path string) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &File{File: f, target: path}, nil
}

// Commit syncs, closes and renames the file into place.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("atomicfile: %s already finished", f.target)
	}
	f.done = true
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		os.Remove(f.File.Name())
		return err
	}
	if err := f.File.Close(); err != nil {
		os.Remove(f.File.Name())
		return err
	}
	if err := os.Chmod(f.File.Name(), 0o644); err != nil {
		os.Remove(f.File.Name())
		return err
	}
	if err := os.Rename(f.File.Name(), f.target); err != nil {
		os.Remove(f.File.Name())
		return err
	}
	return nil
}

// Abort discards the file. It is safe to call after Commit (a no-op), so
// `defer f.Abort()` guards every early return.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.File.Name())
}

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}
