package main

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// TestScanColumnsReadsReplayFiles reads a file written by the real replay
// (3,000 sampled requests of the Mooncake sample: 1.1·10⁶ ITL gaps in
// two row groups) with trace.ScanColumns, which the low-memory summaries use, and
// with trace.Reader: row by row, every projection they use reads the same.
func TestScanColumnsReadsReplayFiles(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	out := filepath.Join(dir, "sim.parquet")
	if _, stderr, err := opaltrace(t, "replay", "-o", out, "--sample", "3000", "--sample-rate", "10", "--workers", "4", in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	for _, names := range [][]string{nil, summaryColumns, append([]string{"run"}, summaryColumns...)} {
		r, err := trace.OpenFileColumns(out, names...)
		if err != nil {
			t.Fatal(err)
		}
		var want []*trace.Request
		for r.Scan() {
			want = append(want, r.Request())
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		i, gaps := 0, 0
		err = trace.ScanColumns(out, names, func(q *trace.Request) error {
			if i < len(want) && !reflect.DeepEqual(q.Clone(), want[i]) {
				t.Fatalf("%v: row %d:\nscan   %s\nreader %s", names, i, q, want[i])
			}
			i++
			gaps += len(q.ITLSec)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i != len(want) || i != 3000 {
			t.Errorf("%v: ScanColumns read %d rows, Reader %d, want 3000", names, i, len(want))
		}
		if gaps == 0 {
			t.Errorf("%v: no ITL gaps read", names)
		}
	}
}
