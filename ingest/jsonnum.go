package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// quoteNonFinite returns b with the bare tokens NaN, Infinity and -Infinity
// that Python's json.dumps writes (outside strings) turned into the JSON
// strings "NaN", "Infinity" and "-Infinity", which encoding/json accepts and
// jnum and trace.Rate decode. It adds no newlines, so line numbers computed
// on the result are the input's. It returns b itself when there is nothing
// to rewrite.
func quoteNonFinite(b []byte) []byte {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
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
		switch {
		case c == '"':
			inString = true
		case bytes.HasPrefix(b[i:], []byte("NaN")):
			out = append(out, `"NaN"`...)
			i += len("NaN") - 1
			continue
		case bytes.HasPrefix(b[i:], []byte("Infinity")):
			out = append(out, `"Infinity"`...)
			i += len("Infinity") - 1
			continue
		case bytes.HasPrefix(b[i:], []byte("-Infinity")):
			out = append(out, `"-Infinity"`...)
			i += len("-Infinity") - 1
			continue
		}
		out = append(out, c)
	}
	return out
}

// A jnum is a JSON number that may also be one of the strings Python writes
// for non-finite floats ("NaN", "Infinity", "-Infinity", "inf"), so that a
// NaN in one element of an array is a bad element, not a bad run.
type jnum float64

func (n *jnum) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN", "nan":
			*n = jnum(math.NaN())
		case "Infinity", "inf", "+inf":
			*n = jnum(math.Inf(1))
		case "-Infinity", "-inf":
			*n = jnum(math.Inf(-1))
		default:
			return fmt.Errorf("%q is not a number", s)
		}
		return nil
	}
	// Out of float64's range (1e309) is ±Inf, as Python reads it: the
	// value is then not finite, a bad value of one record.
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%s is not a number", b)
	}
	*n = jnum(f)
	return nil
}

// checkSec checks a duration in seconds: finite and not negative.
func checkSec(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprintf("not finite (%v)", v)
	case v < 0:
		return fmt.Sprintf("negative (%v)", v)
	}
	return ""
}

// checkCount checks a token count: a whole, finite, non-negative number.
func checkCount(v float64) (int64, string) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Sprintf("not finite (%v)", v)
	case v < 0:
		return 0, fmt.Sprintf("negative (%v)", v)
	case v > trace.MaxTokens:
		return 0, fmt.Sprintf("%v tokens is more than the limit of %d", v, int64(trace.MaxTokens))
	case v != math.Trunc(v):
		return 0, fmt.Sprintf("not a whole number (%v)", v)
	}
	return int64(v), ""
}
