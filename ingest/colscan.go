package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Column-major benchmark results (vLLM's and SGLang's per-request arrays)
// hold request i in element i of every array, so a request is known only
// when every array has been reached. Instead of decoding the whole run,
// scanObject records where each top-level value lies in the input, and an
// arrCursor per array then walks all arrays in step, one element at a time:
// memory is the input plus one request, whatever the number of requests.

// A span is the byte range [start, end) of one JSON value.
type span struct{ start, end int }

// A runObject is one top-level JSON object: its keys in input order and
// where each value lies.
type runObject struct {
	b    []byte
	keys []string
	vals map[string]span
	// odd is set when a key repeats or has escapes or control
	// characters: readers that must match encoding/json exactly then
	// decode the object with it.
	odd bool
}

// scanObject scans the object starting at b[i] (which must be '{') and
// returns it and the offset just past it. On a syntax error it returns the
// offset of the error and a message.
func scanObject(b []byte, i int) (runObject, int, string) {
	obj := runObject{b: b, vals: map[string]span{}}
	s := &jscan{b: b, i: i}
	if s.peek() != '{' {
		return obj, s.i, "not a JSON object"
	}
	s.i++
	s.ws()
	if s.peek() == '}' {
		s.i++
		return obj, s.i, ""
	}
	for {
		s.ws()
		raw, ok := s.str()
		if !ok {
			return obj, s.i, "invalid JSON: want a key"
		}
		key := string(raw)
		if oddKey(raw) {
			obj.odd = true
		}
		if bytes.IndexByte(raw, '\\') >= 0 {
			var k string
			if json.Unmarshal(b[s.i-len(raw)-2:s.i], &k) == nil {
				key = k
			}
		}
		s.ws()
		if s.peek() != ':' {
			return obj, s.i, "invalid JSON: want ':'"
		}
		s.i++
		s.ws()
		start := s.i
		if !s.skip(0) {
			return obj, s.i, fmt.Sprintf("%s: invalid JSON value", key)
		}
		if _, dup := obj.vals[key]; !dup {
			obj.keys = append(obj.keys, key)
		} else {
			obj.odd = true
		}
		obj.vals[key] = span{start, s.i}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return obj, s.i, ""
		default:
			return obj, s.i, "invalid JSON: want ',' or '}'"
		}
	}
}

// oddKey reports whether a raw key has an escape or a control character.
func oddKey(raw []byte) bool {
	for _, c := range raw {
		if c < 0x20 || c == '\\' {
			return true
		}
	}
	return false
}

// raw returns the bytes of the value of key, nil when absent.
func (o *runObject) raw(key string) []byte {
	sp, ok := o.vals[key]
	if !ok {
		return nil
	}
	return o.b[sp.start:sp.end]
}

// has reports whether key is present and not null.
func (o *runObject) has(key string) bool {
	v := o.raw(key)
	return v != nil && string(v) != "null"
}

// reported returns the object as compact JSON without the keys in skip,
// with bare NaN/Infinity turned into strings (quoteNonFinite).
func (o *runObject) reported(skip map[string]bool) (json.RawMessage, error) {
	var out bytes.Buffer
	out.WriteByte('{')
	for _, k := range o.keys {
		if skip[k] {
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		if err := json.Compact(&out, quoteNonFinite(o.raw(k))); err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// decode unmarshals the value of key (bare NaN/Infinity quoted) into dst.
func (o *runObject) decode(key string, dst any) error {
	if err := json.Unmarshal(quoteNonFinite(o.raw(key)), dst); err != nil {
		return fmt.Errorf("%s: %v", key, err)
	}
	return nil
}

// An arrCursor walks the elements of one JSON array.
type arrCursor struct {
	name string
	s    jscan
	n    int // number of elements, from count
}

// newArrCursor returns a cursor over the array value sp, with its element
// count; ok is false when the value is not an array.
func newArrCursor(name string, b []byte, sp span) (*arrCursor, bool) {
	c := &arrCursor{name: name, s: jscan{b: b[:sp.end], i: sp.start}}
	if c.s.peek() != '[' {
		return nil, false
	}
	probe := *c
	probe.s.i++
	for probe.next() != nil {
		c.n++
	}
	c.s.i++
	return c, true
}

// next returns the next element's bytes, nil after the last. The array
// was scanned whole by scanObject, so it is well-formed.
func (c *arrCursor) next() []byte {
	c.s.ws()
	if c.s.peek() == ',' {
		c.s.i++
		c.s.ws()
	}
	if c.s.peek() == ']' || c.s.i >= len(c.s.b) {
		return nil
	}
	start := c.s.i
	if !c.s.skip(0) || c.s.i == start {
		// Not well-formed after all (a caller's element that is not
		// an array): stop rather than loop.
		c.s.i = len(c.s.b)
		return nil
	}
	return c.s.b[start:c.s.i]
}

// elemFloat decodes a number element: a JSON number, a bare or quoted
// NaN/Infinity, or null (ok false).
func elemFloat(e []byte) (v float64, ok bool, msg string) {
	switch string(e) {
	case "null":
		return 0, false, ""
	case "NaN", `"NaN"`, `"nan"`:
		return math.NaN(), true, ""
	case "Infinity", `"Infinity"`, `"inf"`:
		return math.Inf(1), true, ""
	case "-Infinity", `"-Infinity"`, `"-inf"`:
		return math.Inf(-1), true, ""
	}
	if v, ok := smallInt(e); ok {
		return float64(v), true, ""
	}
	f, err := strconv.ParseFloat(string(e), 64)
	if err != nil {
		return 0, false, fmt.Sprintf("not a number: %.20q", e)
	}
	return f, true, ""
}

// elemFloats decodes an array of numbers.
func elemFloats(e []byte) ([]float64, string) {
	if len(e) == 0 || e[0] != '[' {
		return nil, fmt.Sprintf("not an array: %.20q", e)
	}
	c := arrCursor{s: jscan{b: e, i: 1}}
	out := []float64{}
	for x := c.next(); x != nil; x = c.next() {
		f, ok, msg := elemFloat(x)
		if msg != "" {
			return nil, fmt.Sprintf("element %d: %s", len(out), msg)
		}
		if !ok {
			return nil, fmt.Sprintf("element %d: null", len(out))
		}
		out = append(out, f)
	}
	return out, ""
}

// elemString decodes a string element; null is "".
func elemString(e []byte) (string, string) {
	if string(e) == "null" {
		return "", ""
	}
	if len(e) == 0 || e[0] != '"' {
		return "", fmt.Sprintf("not a string: %.20q", e)
	}
	if bytes.IndexByte(e, '\\') < 0 {
		return string(e[1 : len(e)-1]), ""
	}
	var s string
	if err := json.Unmarshal(e, &s); err != nil {
		return "", "invalid string: " + err.Error()
	}
	return s, ""
}
