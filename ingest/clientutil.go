package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/opaltrace/opaltrace/trace"
)

// Helpers shared by the client-benchmark and production-trace formats
// (aiperf, genai-perf, guidellm, llmperf, inference-perf, azure, burstgpt,
// agentic, opal).

// A batchReader yields records that load prepares all at once. Formats use
// it when a request's values depend on the whole input: the time origin of
// epoch or perf_counter clocks is the earliest start, which a file written
// in completion order holds anywhere; JSON documents are one value.
type batchReader struct {
	load   func() ([]Record, []trace.Run, error)
	recs   []Record
	runs   []trace.Run
	cur    Record
	err    error
	loaded bool
}

func (r *batchReader) Scan() bool {
	if !r.loaded {
		r.loaded = true
		r.recs, r.runs, r.err = r.load()
	}
	if len(r.recs) == 0 {
		r.cur = nil
		return false
	}
	r.cur = r.recs[0]
	r.recs[0] = nil // let the request go once the caller is done with it
	r.recs = r.recs[1:]
	return true
}

func (r *batchReader) Record() Record    { return r.cur }
func (r *batchReader) Err() error        { return r.err }
func (r *batchReader) Runs() []trace.Run { return r.runs }

// readInput reads the whole input, of at most max bytes; an I/O error or
// a longer input is fatal and names the file.
func readInput(r io.Reader, file string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if int64(len(b)) > max {
		return nil, documentTooLong(file, max)
	}
	return b, nil
}

// documentTooLong is the error of a whole document over the limit.
func documentTooLong(file string, max int64) error {
	return fmt.Errorf("%s: %w of %d bytes (--max-document-bytes)", file, ErrDocumentTooLong, max)
}

// A lineReader reads lines of up to max bytes, counting them. A longer
// line is read past without being kept: next returns it empty, with over
// set to its length, and overLong says what is wrong with it.
type lineReader struct {
	br   *bufio.Reader
	long []byte
	max  int
	over int // length of the line last returned when longer than max, else 0
	line int // number of the line last returned, 1-based
	done bool
	err  error
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// overLong returns the bad-record message of the line last returned when
// it was longer than the limit, "" otherwise.
func (l *lineReader) overLong() string {
	return overLongMsg(l.over, l.max)
}

func overLongMsg(over, max int) string {
	if over == 0 {
		return ""
	}
	return fmt.Sprintf("line of %d bytes or more, longer than the limit of %d (--max-line-bytes)", over, max)
}

// next returns the next line without its line ending; false at the end of
// the input or on an I/O error (then err is set). The slice is valid until
// the next call.
func (l *lineReader) next() ([]byte, bool) {
	if l.done {
		return nil, false
	}
	l.over = 0
	line, err := l.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		l.long = appendUpTo(l.long[:0], line, l.max+2)
		for err == bufio.ErrBufferFull {
			line, err = l.br.ReadSlice('\n')
			if l.over > 0 || len(l.long)+len(line) > l.max+2 { // +2: the line ending
				l.over = max(l.over, len(l.long)) + len(line)
				l.long = l.long[:0]
				continue
			}
			l.long = appendUpTo(l.long, line, l.max+2)
		}
		line = l.long
		if l.over > 0 {
			if err == nil {
				l.over-- // the '\n'
			}
			line = line[:0]
		}
	}
	if err != nil {
		l.done = true
		if err != io.EOF {
			l.err = err
			return nil, false
		}
		if len(line) == 0 && l.over == 0 {
			return nil, false
		}
	}
	l.line++
	line = bytes.TrimSuffix(line, []byte{'\n'})
	if l.over == 0 && len(bytes.TrimSuffix(line, []byte{'\r'})) > l.max {
		l.over = len(line)
		return line[:0], true
	}
	return bytes.TrimSuffix(line, []byte{'\r'}), true
}

// appendUpTo appends b to buf, growing it by doubling but never past
// limit bytes.
//
// Note: with append's own growth, which overshoots the limit and leaves
// every array it outgrew to the collector, one line over the 64 MiB limit
// took ingest to 260–300 MB of RSS; with capped doubling, 160 MB.
func appendUpTo(buf, b []byte, limit int) []byte {
	if n := len(buf) + len(b); n > cap(buf) {
		grown := make([]byte, len(buf), min(max(2*cap(buf), n), max(limit, n)))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, b...)
}

// firstLine returns head's first non-blank line, trimmed, without a UTF-8
// byte-order mark.
func firstLine(head []byte) []byte {
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	head = bytes.TrimLeft(head, " \t\r\n")
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return bytes.TrimSpace(head)
}

// startsWith reports whether head's first non-space byte is c.
func startsWith(head []byte, c byte) bool {
	head = bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	return len(head) > 0 && head[0] == c
}

// containsAll reports whether head contains every one of keys (quoted JSON
// keys, e.g. `"ttft_s"`).
func containsAll(head []byte, keys ...string) bool {
	for _, k := range keys {
		if !bytes.Contains(head, []byte(k)) {
			return false
		}
	}
	return true
}

// containsAny reports whether head contains one of keys.
func containsAny(head []byte, keys ...string) bool {
	for _, k := range keys {
		if bytes.Contains(head, []byte(k)) {
			return true
		}
	}
	return false
}

// An optNum is an optional JSON number: absent, null, a number, or one of
// Python's non-finite strings (see jnum). Set tells absent/null apart from
// a present value.
type optNum struct {
	V   float64
	Set bool
}

func (n *optNum) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = optNum{}
		return nil
	}
	var j jnum
	if err := j.UnmarshalJSON(b); err != nil {
		return err
	}
	*n = optNum{float64(j), true}
	return nil
}

// sec returns n, in units of 1/perSec seconds (1e3 for ms), as seconds,
// checked; a message names what is wrong. Dividing (not multiplying by
// 1e-3) gives the correctly rounded value, equal to the source's ms/1000.
func (n optNum) sec(perSec float64) (trace.Opt[float64], string) {
	if !n.Set {
		return trace.Opt[float64]{}, ""
	}
	v := n.V / perSec
	if msg := checkSec(v); msg != "" {
		return trace.Opt[float64]{}, msg
	}
	return trace.Some(v), ""
}

// count returns n as a token count, checked.
func (n optNum) count() (trace.Opt[int64], string) {
	if !n.Set {
		return trace.Opt[int64]{}, ""
	}
	v, msg := checkCount(n.V)
	if msg != "" {
		return trace.Opt[int64]{}, msg
	}
	return trace.Some(v), ""
}

// finite returns a message when v is NaN or infinite.
func finite(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprintf("not finite (%v)", v)
	}
	return ""
}

// A fieldErr collects the first problem of a record: "field: what".
type fieldErr struct{ msg string }

func (e *fieldErr) set(field, msg string) {
	if e.msg == "" && msg != "" {
		e.msg = field + ": " + msg
	}
}

// compactJSON returns v compacted, or nil when it is not valid JSON.
// Invalid UTF-8 inside strings becomes U+FFFD, as encoding/json does when
// it decodes a string, so that run metadata stays valid UTF-8 (Parquet
// key/value metadata requires it).
func compactJSON(v []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil
	}
	return validUTF8(b.Bytes())
}

// reportedJSON marshals a source's summary object (a map, so keys come out
// sorted) for Run.Reported; nil if it cannot be marshalled.
func reportedJSON(m map[string]json.RawMessage) json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return validUTF8(b)
}

func validUTF8(b []byte) json.RawMessage {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// siblingFile returns the contents of the file next to file whose name is
// file's with suffix cut replaced by add (e.g. "_individual_responses.json"
// → "_summary.json"), compressed or not. ok is false when file does not end
// in cut or the sibling cannot be read: pairing is best effort, and a run
// without its summary is still a run. A sibling over max bytes is an error
// (see readSibling).
func siblingFile(file, cut, add string, max int64) ([]byte, string, bool, error) {
	base := strings.TrimSuffix(file, ".gz")
	if file == "-" || !strings.HasSuffix(base, cut) {
		return nil, "", false, nil
	}
	return readSibling(strings.TrimSuffix(base, cut)+add, max)
}

// readSibling reads a file beside the main input (a summary, meta.json,
// timeseries.csv), and says whether there is one; an unreadable one counts
// as absent. It is read whole, so it is bounded as a whole document is
// (--max-document-bytes): a longer one is an error naming it and the
// limit, not a silent run without it nor an unbounded read.
func readSibling(path string, max int64) ([]byte, string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", false, nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, "", false, nil
	}
	if int64(len(b)) > max {
		return nil, "", false, documentTooLong(path, max)
	}
	return b, path, true, nil
}

// sortedKeys returns m's keys in order, so that no map order reaches an
// output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// badAt returns a SyntaxError at file:line.
func badAt(file string, line int, format string, args ...any) *SyntaxError {
	return &SyntaxError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// newRequest returns a request with the identity fields every reader sets.
func newRequest(run *trace.Run, id string, index int, file string, line int) *trace.Request {
	if id == "" {
		id = fmt.Sprintf("%s/%d", run.Name, index)
	}
	r := &trace.Request{
		RequestID: id,
		Run:       run.Name,
		Stage:     run.Stage,
		Source:    run.Source,
		Model:     run.Model,
		Status:    trace.StatusOK,
	}
	r.SetPos(file, line)
	return r
}

// validated returns r, or a SyntaxError at r's position when r breaks an
// invariant of trace.Request.
func validated(r *trace.Request) Record {
	if err := r.Validate(); err != nil {
		file, line := r.Pos()
		return badAt(file, line, "request %s: %v", r.RequestID, err)
	}
	return r
}

// A jsonElem is one element of a top-level JSON array, with the line it
// starts on.
type jsonElem struct {
	raw  json.RawMessage
	line int
}

// jsonArray splits b, a JSON array, into its elements. A malformed
// document is one SyntaxError at the line where decoding failed.
func jsonArray(b []byte, file string) ([]jsonElem, *SyntaxError) {
	dec := json.NewDecoder(bytes.NewReader(b))
	lines := lineCounter{b: b}
	fail := func(err error) *SyntaxError {
		off := int(dec.InputOffset())
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = int(se.Offset)
		}
		return badAt(file, lines.at(off), "invalid JSON: %v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, badAt(file, 1, "not a JSON array")
	}
	var elems []jsonElem
	for dec.More() {
		start := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return elems, fail(err)
		}
		// InputOffset is before the separator and blanks.
		for start < len(b) && (isSpace(b[start]) || b[start] == ',') {
			start++
		}
		elems = append(elems, jsonElem{raw, lines.at(start)})
	}
	if _, err := dec.Token(); err != nil {
		return elems, fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return elems, badAt(file, lines.at(int(dec.InputOffset())), "data after the JSON array")
	}
	return elems, nil
}

// A lineCounter maps growing byte offsets to 1-based line numbers.
type lineCounter struct {
	b    []byte
	off  int
	line int
}

func (c *lineCounter) at(off int) int {
	if c.line == 0 {
		c.line = 1
	}
	off = min(off, len(c.b))
	if off < c.off {
		return c.line
	}
	c.line += bytes.Count(c.b[c.off:off], []byte{'\n'})
	c.off = off
	return c.line
}

// An intNum is an optional JSON integer, such as a nanosecond timestamp,
// which float64 would round (epoch ns need 61 bits).
type intNum struct {
	V   int64
	Set bool
}

func (n *intNum) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = intNum{}
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an integer", b)
	}
	*n = intNum{v, true}
	return nil
}
