package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/opaltrace/opaltrace/trace"
)

// The decoding route of vllm-bench that holds a whole run decoded: the
// input is quoted (quoteNonFinite) and each run object is decoded with
// encoding/json. It is the reference for the streaming route
// (vllmstream.go), which hands a run over to it whenever it cannot vouch
// for giving the same result: a syntax error, invalid UTF-8, a duplicate
// key. A file switches to it for the rest of the input at its first such
// run, so that records after a bad run are the reference's too.

// enterLegacy switches r to the reference route at offset off of r.data.
func (r *vllmBenchReader) enterLegacy(off int) {
	r.legacy = true
	q := quoteNonFinite(r.data)
	r.off = quotedOffset(r.data, off)
	r.data = q
	r.lines = lineCounter{b: q}
}

// legacyNextRun decodes the next run object into r.pending. It returns
// false at the end of the input.
func (r *vllmBenchReader) legacyNextRun() bool {
	for r.off < len(r.data) && isSpace(r.data[r.off]) {
		r.off++
	}
	if r.off >= len(r.data) {
		return false
	}
	start := r.off
	line := r.lines.at(start)
	r.nrun++
	name := fmt.Sprintf("%s#%d", r.run, r.nrun)
	dec := json.NewDecoder(bytes.NewReader(r.data[start:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		errLine := line
		var se *json.SyntaxError
		if errors.As(err, &se) {
			errLine = r.lines.at(start + int(se.Offset))
		}
		r.pending = append(r.pending, &SyntaxError{r.file, errLine, "invalid JSON: " + err.Error()})
		// Resynchronise at the next object that starts a line, as
		// --append-result writes them; else give up on the rest.
		if i := bytes.Index(r.data[start+1:], []byte("\n{")); i >= 0 {
			r.off = start + 1 + i + 1
		} else {
			r.off = len(r.data)
		}
		return true
	}
	r.off = start + int(dec.InputOffset())
	if raw[0] != '{' {
		r.pending = append(r.pending, &SyntaxError{r.file, line, "run: not a JSON object"})
		return true
	}
	// Invalid UTF-8 cannot be kept in the run's metadata (Parquet
	// key/value strings are UTF-8); json.dumps writes ASCII.
	if !utf8.Valid(raw) {
		r.pending = append(r.pending, &SyntaxError{r.file, line, "run: invalid UTF-8"})
		return true
	}
	p := vllmRunParser{file: r.file, line: line, name: name, obj: raw}
	run, recs := p.parse(raw)
	if run != nil {
		r.runs = append(r.runs, *run)
	}
	r.pending = append(r.pending, recs...)
	return true
}

// vllmArrays are the decoded per-request arrays; nil when absent.
type vllmArrays struct {
	inputLens, outputLens, ttfts []jnum
	startTimes, latencies        []jnum
	queueTimes                   []jnum
	itls                         [][]jnum
	errors                       []string
}

// parse returns the run (nil when the run is bad) and its records: good
// requests and bad elements; a bad run yields exactly one SyntaxError.
func (p *vllmRunParser) parse(raw json.RawMessage) (*trace.Run, []Record) {
	run := &trace.Run{Name: p.name, Source: vllmBenchName, File: p.file}
	var a vllmArrays
	var reported bytes.Buffer
	var m vllmMeta
	var keys []string

	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token() // '{', checked by the caller
	reported.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			p.fail("run: %v", err)
			break
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			p.fail("%s: %v", key, err)
			break
		}
		keys = append(keys, key)
		isNull := string(v) == "null"
		if vllmPerRequest[key] {
			if isNull {
				continue
			}
			switch key {
			case "input_lens":
				p.decode(key, v, &a.inputLens)
			case "output_lens":
				p.decode(key, v, &a.outputLens)
			case "ttfts":
				p.decode(key, v, &a.ttfts)
			case "itls":
				p.decode(key, v, &a.itls)
			case "errors":
				p.decode(key, v, &a.errors)
			case "start_times":
				p.decode(key, v, &a.startTimes)
			case "latencies":
				p.decode(key, v, &a.latencies)
			case "queue_times":
				p.decode(key, v, &a.queueTimes)
			}
			continue
		}
		if reported.Len() > 1 {
			reported.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		reported.Write(kb)
		reported.WriteByte(':')
		if err := json.Compact(&reported, v); err != nil {
			p.fail("%s: %v", key, err)
		}
		if !isNull {
			m.set(p, run, key, v)
		}
	}
	reported.WriteByte('}')
	if p.err != nil {
		return nil, []Record{p.err}
	}
	sem := m.finish(run, keys, reported.Bytes(), a.latencies != nil)
	n, ok := p.checkLengths([]vllmColLen{
		{"input_lens", len(a.inputLens), a.inputLens != nil},
		{"output_lens", len(a.outputLens), a.outputLens != nil},
		{"ttfts", len(a.ttfts), a.ttfts != nil},
		{"itls", len(a.itls), a.itls != nil},
		{"errors", len(a.errors), a.errors != nil},
		{"start_times", len(a.startTimes), a.startTimes != nil},
		{"latencies", len(a.latencies), a.latencies != nil},
		{"queue_times", len(a.queueTimes), a.queueTimes != nil},
	})
	if !ok {
		return nil, []Record{p.err}
	}
	return run, p.requests(run, &a, n, sem)
}

// requests converts the arrays to requests; a bad element drops its
// request with a SyntaxError naming the array and index.
func (p *vllmRunParser) requests(run *trace.Run, a *vllmArrays, n int, sem vllmSemantics) []Record {
	recs := make([]Record, 0, n)
	minStart := math.Inf(1)
	for j, s := range a.startTimes {
		var q []jnum
		if a.queueTimes != nil {
			q = a.queueTimes[j : j+1]
		}
		minStart = min(minStart, startOrigin(s, q))
	}
	for i := range n {
		req, bad := p.request(run, a, i, i, minStart, sem)
		if bad != "" {
			recs = append(recs, &SyntaxError{p.file, p.elementLine(vllmBadColumn(bad), i), bad})
			continue
		}
		recs = append(recs, req)
	}
	return recs
}

// quotedOffset returns where offset off of b lies in quoteNonFinite(b):
// each bare NaN, Infinity or -Infinity before it gains two quotes.
func quotedOffset(b []byte, off int) int {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return off
	}
	extra := 0
	inString, escaped := false, false
	for i := 0; i < off && i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		tok := 0
		switch {
		case c == '"':
			inString = true
		case bytes.HasPrefix(b[i:], []byte("NaN")):
			tok = len("NaN")
		case bytes.HasPrefix(b[i:], []byte("Infinity")):
			tok = len("Infinity")
		case bytes.HasPrefix(b[i:], []byte("-Infinity")):
			tok = len("-Infinity")
		}
		if tok > 0 {
			extra += 2
			i += tok - 1
		}
	}
	return off + extra
}

// elementLine returns the input line of element i of column c of the run
// object p.obj (the reference route's copy), as the streaming route
// reports a bad element: where its value is. It is p.line when the object
// or the element cannot be found. The object is scanned on the first call.
func (p *vllmRunParser) elementLine(c, i int) int {
	if p.obj == nil {
		return p.line
	}
	if p.elems == nil {
		p.elems = map[int][]int{}
		if obj, _, msg := scanObject(p.obj, 0); msg == "" {
			for col, name := range vllmColNames {
				sp, ok := obj.vals[name]
				if !ok {
					continue
				}
				cur, ok := newArrCursor(name, p.obj, sp)
				if !ok {
					continue
				}
				var offs []int
				for e := cur.next(); e != nil; e = cur.next() {
					offs = append(offs, cap(p.obj)-cap(e))
				}
				p.elems[col] = offs
			}
		}
		for i, b := range p.obj {
			if b == '\n' {
				p.newlines = append(p.newlines, i)
			}
		}
	}
	offs := p.elems[c]
	if i >= len(offs) {
		return p.line
	}
	n, _ := slices.BinarySearch(p.newlines, offs[i])
	return p.line + n
}
