package calibrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/model"
)

// A Point is one prefill measurement: a prompt of Tokens new tokens over
// Context cached ones took Seconds.
type Point struct {
	Tokens, Context int64
	Seconds         float64
}

// A TableError is a bad entry of a measurement table:
// "FILE:LINE: field: what is wrong".
type TableError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *TableError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// ParseTable reads a prefill measurement table: Opal's offline
// measurements JSON, an object {"<prompt_len>": seconds}, or a CSV/TSV
// with columns prompt_tokens, seconds and optionally cached_tokens (a
// header line and '#' comments are allowed). Points come back sorted by
// (Context, Tokens).
func ParseTable(file string, data []byte) ([]Point, error) {
	trim := bytes.TrimSpace(data)
	var pts []Point
	var err error
	if len(trim) > 0 && trim[0] == '{' {
		pts, err = parseOpalJSON(file, data)
	} else {
		pts, err = parseCSV(file, data)
	}
	if err != nil {
		return nil, err
	}
	if len(pts) == 0 {
		return nil, &TableError{File: file, Line: 1, Field: "table", Msg: "no measurements"}
	}
	slices.SortStableFunc(pts, func(a, b Point) int {
		if a.Context != b.Context {
			return int(a.Context - b.Context)
		}
		return int(a.Tokens - b.Tokens)
	})
	return pts, nil
}

func lineOf(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}

func checkPoint(file string, line int, p Point) error {
	switch {
	case p.Tokens <= 0 || p.Tokens > 1<<30:
		return &TableError{file, line, "prompt_tokens", fmt.Sprintf("%d out of range (1..%d)", p.Tokens, 1<<30)}
	case p.Context < 0 || p.Context > 1<<30:
		return &TableError{file, line, "cached_tokens", fmt.Sprintf("%d out of range (0..%d)", p.Context, 1<<30)}
	case !(p.Seconds > 0) || math.IsInf(p.Seconds, 0):
		return &TableError{file, line, "seconds", fmt.Sprintf("%v is not a positive duration", p.Seconds)}
	}
	return nil
}

func parseOpalJSON(file string, data []byte) ([]Point, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	bad := func(field, format string, args ...any) error {
		return &TableError{file, lineOf(data, dec.InputOffset()), field, fmt.Sprintf(format, args...)}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("table", "want a JSON object {\"<prompt_len>\": seconds}")
	}
	var pts []Point
	seen := map[int64]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("table", "%v", err)
		}
		key, _ := tok.(string)
		line := lineOf(data, dec.InputOffset())
		n, err := strconv.ParseInt(strings.TrimSpace(key), 10, 64)
		if err != nil {
			return nil, &TableError{file, line, "prompt_len", fmt.Sprintf("key %q is not an integer", key)}
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, bad(key, "%v", err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, &TableError{file, line, key, fmt.Sprintf("value %v is not a number of seconds", tok)}
		}
		s, err := num.Float64()
		if err != nil {
			return nil, &TableError{file, line, key, err.Error()}
		}
		p := Point{Tokens: n, Seconds: s}
		if err := checkPoint(file, line, p); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, &TableError{file, line, "prompt_len", fmt.Sprintf("%d appears twice", n)}
		}
		seen[n] = true
		pts = append(pts, p)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("table", "%v", err)
	}
	return pts, nil
}

func parseCSV(file string, data []byte) ([]Point, error) {
	var pts []Point
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == '\t' || r == ';' || r == ' ' })
		if len(f) < 2 || len(f) > 3 {
			return nil, &TableError{file, i + 1, "row", fmt.Sprintf("%d columns, want prompt_tokens, seconds[, cached_tokens]", len(f))}
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			if len(pts) == 0 && i == firstDataLine(data) {
				continue // header
			}
			return nil, &TableError{file, i + 1, "prompt_tokens", fmt.Sprintf("%q is not an integer", f[0])}
		}
		s, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, &TableError{file, i + 1, "seconds", fmt.Sprintf("%q is not a number", f[1])}
		}
		p := Point{Tokens: n, Seconds: s}
		if len(f) == 3 {
			if p.Context, err = strconv.ParseInt(f[2], 10, 64); err != nil {
				return nil, &TableError{file, i + 1, "cached_tokens", fmt.Sprintf("%q is not an integer", f[2])}
			}
		}
		if err := checkPoint(file, i+1, p); err != nil {
			return nil, err
		}
		pts = append(pts, p)
	}
	return pts, nil
}

// firstDataLine is the 0-based index of the first non-blank, non-comment
// line: the only place a header may be.
func firstDataLine(data []byte) int {
	for i, raw := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(raw)
		if l != "" && !strings.HasPrefix(l, "#") {
			return i
		}
	}
	return -1
}

// FitTable fits prefill time to a measurement table, as FitServerSide
// fits it to traced requests. Options.Fixed and Options.Priors hold or
// pull its terms, so that a table of as many rows as free coefficients
// can be fitted.
func FitTable(pts []Point, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.constrains(TermInvExpertMFU) && (o.Form == model.FormOpal || !o.Deployment.LLM.IsMoE()) {
		return nil, fmt.Errorf("%s: %s has no routed experts in the %s form", CoefExpertMFU, o.Deployment.LLM.Name, o.Form)
	}
	u, p, y := make([]int64, len(pts)), make([]int64, len(pts)), make([]float64, len(pts))
	for i, pt := range pts {
		u[i], p[i], y[i] = pt.Tokens, pt.Context, pt.Seconds
	}
	f, err := fitLinearConstrained(QPrefill, "s", source(&o, fmt.Sprintf("%d table rows", len(pts))), prefillColumns(&o, u, p), y, o.Fixed, o.Priors)
	if err != nil {
		return nil, err
	}
	return &Result{Form: o.Form, Fits: []*Fit{f}}, nil
}

// TableTerm returns the term of the prefill fit that a coefficient
// constrains, and the term's value for the coefficient's value v: mfu
// attention_mfu and expert_mfu are fitted as their inverses (inv_mfu,
// inv_attention_mfu, inv_expert_mfu); step_overhead_s, opal_a and opal_b,
// or a term's own name, as they are.
func TableTerm(name string, v float64) (string, float64, error) {
	if !(v > 0) || math.IsInf(v, 0) {
		return "", 0, fmt.Errorf("%s = %v: want a positive number", name, v)
	}
	switch name {
	case CoefMFU:
		return TermInvMFU, 1 / v, nil
	case CoefAttentionMFU:
		return TermInvAttnMFU, 1 / v, nil
	case CoefExpertMFU:
		return TermInvExpertMFU, 1 / v, nil
	case TermOverhead, TermInvMFU, TermInvAttnMFU, TermInvExpertMFU, TermOpalA, TermOpalB:
		return name, v, nil
	}
	return "", 0, fmt.Errorf("%s: not a coefficient of the prefill table fit (%s)", name,
		strings.Join([]string{CoefMFU, CoefAttentionMFU, CoefExpertMFU, TermOverhead, TermInvMFU, TermInvAttnMFU, TermInvExpertMFU, TermOpalA, TermOpalB}, ", "))
}
