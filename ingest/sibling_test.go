package ingest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A file read beside the main input (a summary, meta.json,
// timeseries.csv) is bounded by --max-document-bytes: a longer one is an
// error naming it and the limit, whatever the main input's size.
func TestSiblingOverLimit(t *testing.T) {
	// copyTo copies from into dir/to; a summary gets trailing blanks, so
	// that it is longer than the main input.
	copyTo := func(t *testing.T, dir, from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(to, "_summary.json") {
			b = append(b, strings.Repeat(" ", 1000)...)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		files [][2]string // from testdata, to the run's directory
		main  string
		max   int64
		over  string
	}{
		{"vllm engine meta.json", [][2]string{{"testdata/vllmengine/requests.jsonl", "requests.jsonl"}, {"testdata/vllmengine/meta.json", "meta.json"}},
			"requests.jsonl", 600, "meta.json"},
		{"vllm engine timeseries.csv", [][2]string{{"testdata/vllmengine/requests.jsonl", "requests.jsonl"}, {"testdata/vllmengine/timeseries.csv", "timeseries.csv"}},
			"requests.jsonl", 100, "timeseries.csv"},
		{"aiperf summary", [][2]string{{"testdata/aiperf/new.jsonl", "x.jsonl"}, {"testdata/llmperf/m_10_5_summary.json", "x_aiperf.json"}},
			"x.jsonl", 300, "x_aiperf.json"},
		{"llmperf summary", [][2]string{{"testdata/llmperf/m_10_5_individual_responses.json", "m_individual_responses.json"}, {"testdata/llmperf/m_10_5_summary.json", "m_summary.json"}},
			"m_individual_responses.json", 700, "m_summary.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				copyTo(t, dir, f[0], f[1])
			}
			want := filepath.Join(dir, c.over) + ": a whole JSON document over the limit of " +
				strconv.FormatInt(c.max, 10) + " bytes (--max-document-bytes)"
			r, cl, err := Open(filepath.Join(dir, c.main), Options{MaxDocumentBytes: c.max})
			if err == nil {
				defer cl.Close()
				for r.Scan() {
				}
				err = r.Err()
			}
			if err == nil || err.Error() != want || !errors.Is(err, ErrDocumentTooLong) {
				t.Errorf("error %v, want %q", err, want)
			}
			// Within the limit the same run reads.
			r, cl, err = Open(filepath.Join(dir, c.main), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for r.Scan() {
			}
			if err := r.Err(); err != nil {
				t.Errorf("without a limit: %v", err)
			}
		})
	}
}
