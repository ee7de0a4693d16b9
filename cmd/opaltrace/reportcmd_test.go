package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/report"
)

// TestReportByPassesEqualsInMemory: the HTML report of a file summarized
// by passes (as files of more than lowMemoryRequests requests are) is the
// in-memory report, byte for byte, for a file of one run and of several.
func TestReportByPassesEqualsInMemory(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.parquet")
	in := sampleSlice(t, dir, 300)
	if _, stderr, err := opaltrace(t, "replay", "-o", one, "--sample", "2500", "--sample-rate", "8", "--workers", "4", in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	two := filepath.Join(dir, "two.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", two, sampleSlice(t, dir, 200), writeTiny(t, dir)); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	for _, path := range []string{one, two} {
		mem, err := loadDataset("x="+path, ingest.Options{}, false, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		passes, err := reportByPasses("x", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		var a, b bytes.Buffer
		if err := report.WriteHTML(&a, []report.Dataset{{Name: mem.Name, Runs: mem.Runs, Requests: mem.Requests}}); err != nil {
			t.Fatal(err)
		}
		if err := report.WriteHTML(&b, []report.Dataset{passes}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: the report by passes differs from the one in memory (%d vs %d bytes)", path, b.Len(), a.Len())
		}
		if passes.Pooled.Passes == 0 {
			t.Errorf("%s: no passes made", path)
		}
	}
}

// --run picks the same runs when the summary is made by passes.
func TestStatsLowMemoryRunSelector(t *testing.T) {
	dir := t.TempDir()
	two := filepath.Join(dir, "two.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", two, sampleSlice(t, dir, 200), writeTiny(t, dir)); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	for _, sel := range []string{"1", "2"} {
		mem, stderr, err := opaltrace(t, "stats", "--run", sel, two)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		low, stderr, err := opaltrace(t, "stats", "--low-memory", "--run", sel, two)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if strings.Count(low, "Serving Benchmark Result") != 1 || !strings.Contains(low, "Exact summary in") {
			t.Fatalf("--run %s by passes:\n%s", sel, low)
		}
		// The same block; the sections that need memory are not printed.
		block := strings.SplitAfter(mem, strings.Repeat("=", 50)+"\n")[0]
		lowBlock := strings.SplitAfter(low, strings.Repeat("=", 50)+"\n")[0]
		var kept []string
		for _, l := range strings.SplitAfter(lowBlock, "\n") {
			if !strings.HasPrefix(l, "Exact summary in") {
				kept = append(kept, l)
			}
		}
		if strings.Join(kept, "") != block {
			t.Errorf("--run %s: by passes\n%s\nin memory\n%s", sel, lowBlock, block)
		}
	}
}
