package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// addParquetSeeds seeds f with a good file of the sample requests, its
// first half, and the bare magic.
func addParquetSeeds(f *testing.F) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range sampleRequests() {
		w.Write(r)
	}
	w.SetRuns(sampleRuns())
	w.Close()
	good := buf.Bytes()
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("PAR1"))
}

// FuzzReadParquet feeds corrupted Parquet files to the reader: it must
// return an error, never panic, and whatever it does read must validate.
func FuzzReadParquet(f *testing.F) {
	addParquetSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.parquet")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, reqs, err := ReadFile(path)
		if err != nil {
			return
		}
		for _, r := range reqs {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted an invalid request: %v", err)
			}
		}
	})
}

// TestReadCorruptedParquet flips bytes all over a good file: every result
// is an error or valid requests, never a panic.
func TestReadCorruptedParquet(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	for _, r := range sampleRequests() {
		w.Write(r)
	}
	w.Close()
	good := buf.Bytes()
	dir := t.TempDir()
	for i := 0; i < len(good); i += 61 {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0xff
		path := filepath.Join(dir, "c.parquet")
		os.WriteFile(path, bad, 0o644)
		ReadFile(path) // must not panic
	}
}
