package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// A lone summary is a client tool's aggregate export read as an input of
// its own: AIPerf's profile_export_aiperf.json or llmperf's
// *_summary.json without the per-request file it is written beside (the
// user kept only the summary, or named it). It gives one summary-only
// run, no requests, whose Reported is the summary, as an SGLang
// bench_serving line without --output-details does: stats shows what
// the tool reported (analyze.ReportedFields reads its keys) and
// stats --compare compares a replay with it on those statistics.
//
// Note: in a directory, a summary whose per-request file is beside it is
// read with that file (companions), not as a run of its own.
type loneSummary struct {
	source string
	// summaryEnd and mainEnd are the two files' name endings.
	summaryEnd, mainEnd string
	// valid says what is wrong with the parsed document for this tool
	// ("" when nothing is).
	valid func(map[string]json.RawMessage) string
	// summarize sets the run's Reported and what it says of the run
	// (model, workload, duration).
	summarize func(run *trace.Run, b []byte, path string)
	// semantics is how the tool measures what it reports, as its
	// per-request reader records it on each request (benchSemantics).
	semantics benchSemantics
}

// read parses b, the whole summary, into one summary-only run: a
// malformed document is one bad record at the line where it fails, and
// a warning says when the per-request file is beside it.
func (s loneSummary) read(b []byte, file, prefix string) ([]Record, []trace.Run) {
	b = quoteNonFinite(b)
	top, bad := jsonObject(b, file)
	if bad != nil {
		return []Record{bad}, nil
	}
	if msg := s.valid(top); msg != "" {
		return []Record{badAt(file, 1, "%s", msg)}, nil
	}
	run := trace.Run{Name: prefix + "#1", Source: s.source, File: file, Extra: map[string]string{}}
	s.summarize(&run, b, file)
	if len(run.Reported) == 0 {
		return []Record{badAt(file, 1, "not %s's summary: a field of it has another type than the tool writes", s.source)}, nil
	}
	delete(run.Extra, "summary_file") // the input itself
	run.Extra["summary_only"] = "the tool's aggregate summary, read without its per-request file"
	s.semantics.extra(&run)
	var recs []Record
	if base, ok := strings.CutSuffix(strings.TrimSuffix(file, ".gz"), s.summaryEnd); ok {
		main := base + s.mainEnd
		if fi, err := os.Stat(main); err == nil && fi.Mode().IsRegular() {
			recs = append(recs, &Warning{file, 1, "read as a summary-only run; the run's per-request records are in " +
				filepath.Base(main) + " beside it, which reads this summary with them: give that file (or the directory) instead"})
		}
	}
	return recs, []trace.Run{run}
}

// jsonObject parses b, one JSON object and nothing after it, into its
// members. A malformed document is one SyntaxError at the line where
// decoding failed.
func jsonObject(b []byte, file string) (map[string]json.RawMessage, *SyntaxError) {
	dec := json.NewDecoder(bytes.NewReader(b))
	lines := lineCounter{b: b}
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		off := int(dec.InputOffset())
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = int(se.Offset)
		}
		return nil, badAt(file, lines.at(off), "invalid JSON: %v", err)
	}
	if top == nil {
		return nil, badAt(file, 1, "not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badAt(file, lines.at(int(dec.InputOffset())), "data after the JSON object")
	}
	return top, nil
}
