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
	// (model, workload, duration), or says where the summary is not the
	// tool's.
	summarize func(run *trace.Run, b []byte, path string) *SyntaxError
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
	if bad := s.summarize(&run, b, file); bad != nil {
		bad.Msg = "not " + s.source + "'s summary: " + bad.Msg
		return []Record{bad}, nil
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
		return nil, badAt(file, jsonErrLine(b, err, int(dec.InputOffset())), "invalid JSON: %v", err)
	}
	if top == nil {
		return nil, badAt(file, 1, "not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badAt(file, lines.at(int(dec.InputOffset())), "data after the JSON object")
	}
	return top, nil
}

// unmarshalAt decodes b, the whole of file, into v; a failure is a
// SyntaxError at the line where decoding failed.
func unmarshalAt(b []byte, file string, v any) *SyntaxError {
	if err := json.Unmarshal(b, v); err != nil {
		return &SyntaxError{File: file, Line: jsonErrLine(b, err, 0), Msg: err.Error()}
	}
	return nil
}

// jsonErrLine is the line of b where decoding failed with err: that of
// the offending byte (a syntax or type error's offset counts the bytes
// read, that one included), else that of offset fallback.
func jsonErrLine(b []byte, err error, fallback int) int {
	off := fallback
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = int(se.Offset) - 1
	case errors.As(err, &te):
		off = int(te.Offset) - 1
	}
	lines := lineCounter{b: b}
	return lines.at(max(off, 0))
}

// summaryNotKept is the warning for a summary beside a per-request file
// that does not parse: the requests are read, the run has no Reported.
func summaryNotKept(e *SyntaxError) *Warning {
	return &Warning{File: e.File, Line: e.Line, Msg: "the run's summary, not kept: " + e.Msg}
}
