package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// sampleFile returns the bytes of a file of the sample requests and runs.
func sampleFile(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range sampleRequests() {
		if err := w.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	w.SetRuns(sampleRuns())
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// addParquetSeeds seeds f with a good file of the sample requests, its
// first half, and the bare magic.
func addParquetSeeds(f *testing.F) {
	good := sampleFile(f)
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
		// The column scanner reads what the reader read, row for row.
		i := 0
		err = ScanColumns(path, nil, func(r *Request) error {
			if i >= len(reqs) || r.String() != reqs[i].String() {
				t.Fatalf("ScanColumns row %d differs from ReadFile's %d rows", i, len(reqs))
			}
			i++
			return nil
		})
		if err == nil && i != len(reqs) {
			t.Fatalf("ScanColumns read %d rows, ReadFile %d", i, len(reqs))
		}
	})
}

// TestReadCorruptedParquet flips bytes all over a good file: every result
// is an error or valid requests, never a panic.
func TestReadCorruptedParquet(t *testing.T) {
	good := sampleFile(t)
	dir := t.TempDir()
	for i := 0; i < len(good); i += 61 {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0xff
		path := filepath.Join(dir, "c.parquet")
		os.WriteFile(path, bad, 0o644)
		ReadFile(path) // must not panic
	}
}
