package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"strconv"
)

// Element decoders of the vllm-bench streaming route. Each accepts exactly
// what encoding/json accepts for the reference route's element type after
// quoteNonFinite, falling back to encoding/json for the rare forms (escaped
// strings) it does not decode itself.

// vllmInMemory is the input size read straight into memory; larger inputs
// go through a temporary file (readWhole).
const vllmInMemory = 4 << 20

// readWhole returns all of src and a function that releases the buffer,
// which then must not be used. owner is the buffer's user (see mapFile).
//
// Note: io.ReadAll grows its buffer by copying, so its peak is about twice
// the input. Past vllmInMemory bytes the input (a file, standard input or
// a gzip stream alike) is copied to a temporary file, removed at once, and
// mapped (mapFile): the peak is the input plus vllmInMemory.
//
// An input over max bytes is ErrDocumentTooLong, read no further than
// max+1 bytes.
func readWhole[T any](src io.Reader, owner *T, max int64) ([]byte, func(), error) {
	head, err := io.ReadAll(io.LimitReader(src, min(vllmInMemory, max)+1))
	if err == nil && int64(len(head)) > max {
		return nil, nil, ErrDocumentTooLong
	}
	if err != nil || len(head) <= vllmInMemory {
		return head, func() {}, err
	}
	f, err := os.CreateTemp("", "opaltrace-vllm-bench-*")
	if err != nil {
		return nil, nil, err
	}
	// Removed at once, the open file stays readable (POSIX); elsewhere
	// it is removed after Close.
	defer os.Remove(f.Name())
	defer f.Close()
	os.Remove(f.Name())
	if _, err := f.Write(head); err != nil {
		return nil, nil, err
	}
	n, err := io.Copy(f, io.LimitReader(src, max+1-int64(len(head))))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(head))+n > max {
		return nil, nil, ErrDocumentTooLong
	}
	return mapFile(f, int64(len(head))+n, owner)
}

// validNumber reports whether e is exactly a JSON number.
func validNumber(e []byte) bool {
	i := 0
	digits := func() int {
		j := i
		for i < len(e) && e[i] >= '0' && e[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(e) && e[i] == '-' {
		i++
	}
	switch {
	case i < len(e) && e[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(e) && e[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(e) && (e[i] == 'e' || e[i] == 'E') {
		i++
		if i < len(e) && (e[i] == '+' || e[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(e)
}

// strictJSON reports whether e, a value that jscan.skip accepted, is valid
// JSON once bare NaN and Infinity are quoted. skip checks the structure;
// only the tokens can still be malformed.
func strictJSON(e []byte) bool {
	switch c := e[0]; {
	case c == '"':
		for _, b := range e[1 : len(e)-1] {
			if b < 0x20 || b == '\\' {
				return json.Valid(e)
			}
		}
		return true
	case c == '-' || (c >= '0' && c <= '9'):
		return validNumber(e) || string(e) == "-Infinity"
	case c == '[':
		cur := arrCursor{s: jscan{b: e, i: 1}}
		for x := cur.next(); x != nil; x = cur.next() {
			if !strictJSON(x) {
				return false
			}
		}
		return true
	case c == '{':
		return json.Valid(quoteNonFinite(e))
	}
	switch string(e) {
	case "true", "false", "null", "NaN", "Infinity":
		return true
	}
	return false
}

// parseJnum decodes a strict element as the reference route's jnum does;
// ok is false where that fails.
func parseJnum(e []byte) (float64, bool) {
	if validNumber(e) {
		// smallInt would turn -0 into 0.
		if e[0] != '-' {
			if v, ok := smallInt(e); ok {
				return float64(v), true
			}
		}
		// A number too large for float64 (1e309) is ±Inf, as Python
		// reads it: a bad value of one request, like NaN, not a bad run.
		f, err := strconv.ParseFloat(string(e), 64)
		return f, err == nil || errors.Is(err, strconv.ErrRange)
	}
	switch string(e) {
	case "NaN", `"NaN"`, `"nan"`:
		return math.NaN(), true
	case "Infinity", `"Infinity"`, `"inf"`, `"+inf"`:
		return math.Inf(1), true
	case "-Infinity", `"-Infinity"`, `"-inf"`:
		return math.Inf(-1), true
	}
	if e[0] == '"' && bytes.IndexByte(e, '\\') >= 0 {
		var j jnum
		if json.Unmarshal(e, &j) == nil {
			return float64(j), true
		}
	}
	return 0, false
}

// parseStr decodes a strict element as a string: null is "", and a bare
// NaN or Infinity is the string quoteNonFinite makes of it.
func parseStr(e []byte) (string, bool) {
	switch string(e) {
	case "null":
		return "", true
	case "NaN", "Infinity", "-Infinity":
		return string(e), true
	}
	if e[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(e, '\\') < 0 {
		return string(e[1 : len(e)-1]), true
	}
	var s string
	err := json.Unmarshal(e, &s)
	return s, err == nil
}

// parseITL appends the gaps of a strict itls element to dst; null is none.
func parseITL(e []byte, dst []jnum) ([]jnum, bool) {
	if string(e) == "null" {
		return nil, true
	}
	if e[0] != '[' {
		return nil, false
	}
	c := arrCursor{s: jscan{b: e, i: 1}}
	for x := c.next(); x != nil; x = c.next() {
		v, ok := parseJnum(x)
		if !ok {
			return nil, false
		}
		dst = append(dst, jnum(v))
	}
	return dst, true
}
