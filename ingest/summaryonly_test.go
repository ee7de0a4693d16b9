package ingest

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The aggregate summaries of the real AIPerf and llmperf runs, read alone:
// one summary-only run each, no request, the summary as Reported. Named
// beside their per-request file, they warn that the file is there; copied
// alone into a directory, they read without a warning.
func TestLoneSummaryReal(t *testing.T) {
	for _, c := range []struct {
		rel, source, model string
		// the workload a replay regenerates the run from: AIPerf's
		// --num-requests 100 --concurrency 100 --osl 250 with its
		// 550-token prompts (std 0); llmperf's 16 clients of 550/150.
		workload trace.Workload
	}{
		{aiperfAggregateFile, aiperfName, "openai/gpt-oss-20b",
			trace.Workload{Concurrency: 100, NumPrompts: 100, InputLen: 550, OutputLen: 250, RequestRate: trace.Rate(math.Inf(1))}},
		{llmperfSummaryFile, llmperfName, "01-ai/Yi-1.5-34B-Chat",
			trace.Workload{Concurrency: 16, InputLen: 550, OutputLen: 150, RequestRate: trace.Rate(math.Inf(1))}},
	} {
		t.Run(c.source, func(t *testing.T) {
			src := shareddata.Path(t, c.rel)
			raw, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			alone := filepath.Join(t.TempDir(), filepath.Base(src))
			if err := os.WriteFile(alone, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{src, alone} {
				var reqs int
				var warns []string
				runs, st, err := Files([]string{path}, Options{},
					func(*trace.Request) error { reqs++; return nil },
					func(e *SyntaxError) { t.Errorf("bad record: %v", e) })
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range st.Warnings {
					warns = append(warns, w.Error())
				}
				if reqs != 0 || len(runs) != 1 {
					t.Fatalf("%s: %d requests, %d runs; want a summary-only run", path, reqs, len(runs))
				}
				run := runs[0]
				if run.Source != c.source || run.Model != c.model || !bytes.Equal(run.Reported, compactJSON(raw)) || run.Extra["summary_only"] == "" {
					t.Errorf("%s: run %+v", path, run)
				}
				if run.Workload == nil || *run.Workload != c.workload {
					t.Errorf("%s: workload %+v, want %+v", path, run.Workload, c.workload)
				}
				wantWarn := path == src
				if got := len(warns) == 1 && strings.Contains(warns[0], "per-request records are in"); got != wantWarn || len(warns) > 1 {
					t.Errorf("%s: warnings %q, want one about the per-request file: %v", path, warns, wantWarn)
				}
			}
		})
	}
}

// A document that is no summary of the tool's is one bad record at its
// line, whatever --format says.
func TestLoneSummaryBad(t *testing.T) {
	for _, c := range []struct {
		format, input, want string
	}{
		{aiperfName, "{\n \"records\": {\"ttft\": {\"tag\": \"ttft\", \"unit\": \"ms\", \"header\": \"x\",\n \"avg\": ,}}}", "fuzz:3: invalid JSON"},
		{aiperfName, `{"records": [], "tag": 1, "unit": 1, "header": 1}`, "fuzz:1: records: missing or not an object"},
		{aiperfName, `{"records": {"ttft": {"tag": "ttft", "unit": "ms", "header": "TTFT", "avg": 1}}} {}`, "fuzz:1: data after the JSON object"},
		{aiperfName, `{"records": {"ttft": {"tag": "ttft", "unit": "ms", "header": "TTFT", "avg": "x"}}}`, "fuzz:1: not aiperf's summary"},
		{llmperfName, `{"num_concurrent_requests": 2}`, "fuzz:1: no results_* key"},
		{llmperfName, `{"num_concurrent_requests": "2", "results_ttft_s_mean": 1}`, "fuzz:1: not llmperf's summary"},
	} {
		r, err := NewReader(strings.NewReader(c.input), "fuzz", Options{Format: c.format})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for r.Scan() {
			switch rec := r.Record().(type) {
			case *SyntaxError:
				got = append(got, rec.Error())
			default:
				t.Errorf("%s %q: record %v", c.format, c.input, rec)
			}
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], c.want) || len(r.Runs()) != 0 {
			t.Errorf("%s %q: %q, %d runs; want one %q", c.format, c.input, got, len(r.Runs()), c.want)
		}
	}
}
