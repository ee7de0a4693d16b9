package ingest

import (
	"fmt"
	"strconv"
)

// A mooncakeRecord is one decoded Mooncake line.
type mooncakeRecord struct {
	timestamp, input, output          float64
	hasTimestamp, hasInput, hasOutput bool
	hashIDs                           []int64
}

// Note: a hand decoder, not encoding/json: Mooncake traces are large
// (hundreds of MB), the lines are flat, and the decoder must name the field
// of a bad value. Unknown keys are skipped whatever their value.

// A jscan is a cursor over one line of JSON.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

func (s *jscan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// decode fills rec from line; a non-empty message reports a bad line.
func (rec *mooncakeRecord) decode(line []byte) string {
	s := &jscan{b: line}
	s.ws()
	if s.peek() != '{' {
		return "invalid JSON: line is not an object"
	}
	s.i++
	for first := true; ; first = false {
		s.ws()
		if s.peek() == '}' && first {
			s.i++
			break
		}
		key, ok := s.str()
		if !ok {
			return fmt.Sprintf("invalid JSON at column %d: want a key", s.i+1)
		}
		s.ws()
		if s.peek() != ':' {
			return fmt.Sprintf("invalid JSON at column %d: want ':'", s.i+1)
		}
		s.i++
		s.ws()
		var msg string
		switch string(key) {
		case "timestamp":
			rec.timestamp, msg = s.number()
			rec.hasTimestamp = true
		case "input_length":
			rec.input, msg = s.number()
			rec.hasInput = true
		case "output_length":
			rec.output, msg = s.number()
			rec.hasOutput = true
		case "hash_ids":
			rec.hashIDs, msg = s.int64s(rec.hashIDs[:0])
		default:
			if !s.skip(0) {
				msg = fmt.Sprintf("invalid JSON at column %d", s.i+1)
			}
		}
		if msg != "" {
			return string(key) + ": " + msg
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
			continue
		case '}':
			s.i++
		default:
			return fmt.Sprintf("invalid JSON at column %d: want ',' or '}'", s.i+1)
		}
		break
	}
	s.ws()
	if s.i != len(s.b) {
		return fmt.Sprintf("invalid JSON at column %d: data after the object", s.i+1)
	}
	return ""
}

// str scans a string and returns its raw contents (escapes not decoded).
func (s *jscan) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return s.b[start:j], true
		}
	}
	return nil, false
}

// numLen returns the length of the number token at s.i.
func (s *jscan) numLen() int {
	j := s.i
	for j < len(s.b) {
		c := s.b[j]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			j++
			continue
		}
		break
	}
	return j - s.i
}

// number scans a JSON number.
func (s *jscan) number() (float64, string) {
	n := s.numLen()
	if n == 0 {
		return 0, "not a number: " + s.describe()
	}
	tok := s.b[s.i : s.i+n]
	s.i += n
	if v, ok := smallInt(tok); ok {
		return float64(v), ""
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return 0, fmt.Sprintf("not a number (%s)", tok)
	}
	return v, ""
}

// smallInt parses an optionally negative run of at most 18 digits, the
// common case, without allocating.
func smallInt(tok []byte) (int64, bool) {
	neg := len(tok) > 0 && tok[0] == '-'
	if neg {
		tok = tok[1:]
	}
	if len(tok) == 0 || len(tok) > 18 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	var v int64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// int64s scans an array of integers into ids[:0] (a scratch buffer,
// allocated when nil), or null (absent: nil).
func (s *jscan) int64s(ids []int64) ([]int64, string) {
	if s.lit("null") {
		return nil, ""
	}
	if s.peek() != '[' {
		return nil, "not an array: " + s.describe()
	}
	s.i++
	if ids == nil {
		ids = make([]int64, 0, 32)
	}
	ids = ids[:0]
	s.ws()
	if s.peek() == ']' {
		s.i++
		return ids, ""
	}
	for {
		s.ws()
		if v, ok := s.digits(); ok {
			ids = append(ids, v)
		} else {
			n := s.numLen()
			tok := s.b[s.i : s.i+n]
			v, ok := smallInt(tok)
			if !ok {
				var err error
				v, err = strconv.ParseInt(string(tok), 10, 64)
				if err != nil || n == 0 {
					return nil, fmt.Sprintf("element %d is not an integer: %s", len(ids), s.describe())
				}
			}
			s.i += n
			ids = append(ids, v)
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return ids, ""
		default:
			return nil, fmt.Sprintf("invalid JSON at column %d: want ',' or ']'", s.i+1)
		}
	}
}

// digits scans a number token that is 1 to 18 digits without a leading
// zero, the common hash id, in one pass; otherwise it leaves s as it was.
func (s *jscan) digits() (int64, bool) {
	j, v := s.i, int64(0)
	for j < len(s.b) && j-s.i < 18 && s.b[j] >= '0' && s.b[j] <= '9' {
		v = v*10 + int64(s.b[j]-'0')
		j++
	}
	if j == s.i || (s.b[s.i] == '0' && j-s.i > 1) {
		return 0, false
	}
	if j < len(s.b) {
		if c := s.b[j]; (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			return 0, false // a longer token: numLen's
		}
	}
	s.i = j
	return v, true
}

func (s *jscan) lit(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// describe names the value at s.i for an error message.
//
// A whole JSON value is shown as written, with its kind: `"x" (a string)`;
// anything else as the token there, up to the next separator.
func (s *jscan) describe() string {
	c := *s
	c.ws()
	start := c.i
	if start >= len(c.b) {
		return "end of line"
	}
	kind := map[byte]string{'"': "a string", '{': "an object", '[': "an array", 't': "a boolean", 'f': "a boolean", 'n': "null"}[c.b[start]]
	if kind != "" && c.skip(0) {
		return fmt.Sprintf("%s (%s)", clip(c.b[start:c.i], 40), kind)
	}
	end := start
	for end < len(c.b) && !isSpace(c.b[end]) && c.b[end] != ',' && c.b[end] != '}' && c.b[end] != ']' {
		end++
	}
	if end == start {
		end = start + 1
	}
	return strconv.Quote(clip(c.b[start:end], 20))
}

// clip returns b as a string of at most n bytes, "…" marking a cut.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// skip scans any JSON value; depth bounds nesting.
func (s *jscan) skip(depth int) bool {
	if depth > 100 {
		return false
	}
	s.ws()
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		s.ws()
		if s.peek() == end {
			s.i++
			return true
		}
		for {
			if c == '{' {
				s.ws()
				if _, ok := s.str(); !ok {
					return false
				}
				s.ws()
				if s.peek() != ':' {
					return false
				}
				s.i++
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.ws()
			switch s.peek() {
			case ',':
				s.i++
			case end:
				s.i++
				return true
			default:
				return false
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		// Numbers first: they are most values, and trying the literals
		// before them cost a fifth of a column scan.
		if c == '-' && s.lit("-Infinity") {
			return true
		}
		if n := s.numLen(); n > 0 {
			s.i += n
			return true
		}
		return false
	case s.lit("true"), s.lit("false"), s.lit("null"):
		return true
	case s.lit("NaN"), s.lit("Infinity"):
		// Python's json.dumps writes these bare; other readers use
		// skip for unknown keys of such files.
		return true
	default:
		// numLen also takes '+', '.', 'e' and 'E'.
		if n := s.numLen(); n > 0 {
			s.i += n
			return true
		}
		return false
	}
}
