package ingest

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// The streaming route of vllm-bench: a run object located by scanObject is
// checked in one pass over its arrays (syntax as strict as encoding/json,
// element types, lengths), then its requests are decoded one at a time by
// a cursor per array. It gives the reference route's records
// (vllmlegacy.go) without decoding the arrays; what it cannot check
// cheaply it hands over to the reference route (ok false).

// The decoded per-request arrays, in the order checkLengths wants them.
const (
	vcInput = iota
	vcOutput
	vcTTFT
	vcITL
	vcErrors
	vcStart
	vcLatency
	vcQueue
	vcN
)

var vllmColNames = [vcN]string{"input_lens", "output_lens", "ttfts", "itls", "errors", "start_times", "latencies", "queue_times"}

// vllmColOf maps an array's name to its column; generated_texts has none.
var vllmColOf = map[string]int{}

func init() {
	for c, name := range vllmColNames {
		vllmColOf[name] = c
	}
}

// A vllmStream yields the requests of one run.
type vllmStream struct {
	p        *vllmRunParser
	run      *trace.Run
	cols     [vcN]*arrCursor // nil when the run lacks the array
	n, i     int
	minStart float64
	sem      vllmSemantics
	lineOf   func(elem []byte) int // the input line elem starts on; 0 if unknown

	elems [vcN][]byte // the current request's element of each array

	// One request's elements, reused.
	one  vllmArrays
	nums [vcN]jnum
	itl  [1][]jnum
	errs [1]string
}

// stream checks the run object obj and returns its run and requests. A bad
// run sets p.err (run and stream are then unused). ok is false when the
// reference route must read the run.
func (p *vllmRunParser) stream(obj *runObject) (run *trace.Run, st *vllmStream, ok bool) {
	run = &trace.Run{Name: p.name, Source: vllmBenchName, File: p.file}
	st = &vllmStream{p: p, run: run}
	var m vllmMeta
	var lens [vcN]vllmColLen
	for c := range lens {
		lens[c].name = vllmColNames[c]
	}
	var reported bytes.Buffer
	reported.WriteByte('{')
	for _, key := range obj.keys {
		raw := obj.raw(key)
		isNull := string(raw) == "null"
		if vllmPerRequest[key] {
			if isNull {
				continue
			}
			c, isCol := vllmColOf[key]
			n, typeOK, strict := checkColumn(key, raw)
			switch {
			case !strict:
				return nil, nil, false
			case !isCol:
				// generated_texts: only its syntax matters.
			case !typeOK:
				// A bad element makes the run bad; encoding/json
				// words the error, as on the reference route.
				err := json.Unmarshal(quoteNonFinite(raw), vllmColType(c))
				if err == nil {
					return nil, nil, false
				}
				p.fail("%s: %v", key, err)
			default:
				lens[c] = vllmColLen{key, n, true}
				st.cols[c] = &arrCursor{name: key, s: jscan{b: raw, i: 1}, n: n}
			}
			continue
		}
		v := quoteNonFinite(raw)
		if reported.Len() > 1 {
			reported.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		reported.Write(kb)
		reported.WriteByte(':')
		if err := json.Compact(&reported, v); err != nil {
			return nil, nil, false
		}
		if !isNull {
			m.set(p, run, key, v)
		}
	}
	reported.WriteByte('}')
	if p.err != nil {
		return nil, nil, true
	}
	st.sem = m.finish(run, obj.keys, reported.Bytes(), lens[vcLatency].ok)
	if st.n, ok = p.checkLengths(lens[:]); !ok {
		return nil, nil, true
	}
	st.minStart = st.origin()
	return run, st, true
}

// vllmColType returns a pointer to what the reference route decodes
// column c into.
func vllmColType(c int) any {
	switch c {
	case vcITL:
		return new([][]jnum)
	case vcErrors:
		return new([]string)
	}
	return new([]jnum)
}

// checkColumn checks the per-request array raw (not null) of key: its
// number of elements, whether every element has the reference route's
// type, and whether its syntax is strict JSON (bare NaN and Infinity
// allowed).
func checkColumn(key string, raw []byte) (n int, typeOK, strict bool) {
	if raw[0] != '[' {
		return 0, false, strictJSON(raw)
	}
	typeOK = true
	c := arrCursor{s: jscan{b: raw, i: 1}}
	for e := c.next(); e != nil; e = c.next() {
		n++
		var ok bool
		switch key {
		case "generated_texts":
			strict, ok = strictJSON(e), true
		case "errors":
			strict = strictJSON(e)
			_, ok = parseStr(e)
		case "itls":
			strict, ok = checkGaps(e)
		default:
			strict, ok = checkNum(e)
		}
		if !strict {
			return n, typeOK, false
		}
		typeOK = typeOK && ok
	}
	return n, typeOK, true
}

// checkNum checks an element that should be a jnum. A plain JSON number is
// one unless it overflows, which needs an exponent or 300 digits: the
// common case is checked without converting it.
func checkNum(e []byte) (strict, ok bool) {
	if validNumber(e) {
		if len(e) < 300 && !bytes.ContainsAny(e, "eE") {
			return true, true
		}
		_, ok = parseJnum(e)
		return true, ok
	}
	if !strictJSON(e) {
		return false, false
	}
	_, ok = parseJnum(e)
	return true, ok
}

// checkGaps checks an itls element: null or an array of jnums.
func checkGaps(e []byte) (strict, ok bool) {
	if e[0] != '[' {
		if !strictJSON(e) {
			return false, false
		}
		return true, string(e) == "null"
	}
	ok = true
	c := arrCursor{s: jscan{b: e, i: 1}}
	for x := c.next(); x != nil; x = c.next() {
		s, k := checkNum(x)
		if !s {
			return false, false
		}
		ok = ok && k
	}
	return true, ok
}

// origin returns the run's trace origin (see startOrigin).
func (st *vllmStream) origin() float64 {
	minStart := math.Inf(1)
	if st.cols[vcStart] == nil {
		return minStart
	}
	sc := *st.cols[vcStart]
	var qc *arrCursor
	if st.cols[vcQueue] != nil {
		q := *st.cols[vcQueue]
		qc = &q
	}
	var q [1]jnum
	for e := sc.next(); e != nil; e = sc.next() {
		s, _ := parseJnum(e)
		qs := q[:0]
		if qc != nil {
			v, _ := parseJnum(qc.next())
			q[0] = jnum(v)
			qs = q[:]
		}
		minStart = min(minStart, startOrigin(jnum(s), qs))
	}
	return minStart
}

// next returns the next request or bad element, nil after the last.
func (st *vllmStream) next() Record {
	if st.i >= st.n {
		return nil
	}
	i := st.i
	st.i++
	a := &st.one
	*a = vllmArrays{}
	for c, cur := range st.cols {
		if cur == nil {
			continue
		}
		e := cur.next()
		st.elems[c] = e
		switch c {
		case vcITL:
			// Checked by checkColumn: null (no gaps) or numbers.
			st.itl[0], _ = parseITL(e, st.itl[0][:0])
			a.itls = st.itl[:]
			continue
		case vcErrors:
			st.errs[0], _ = parseStr(e)
			a.errors = st.errs[:]
			continue
		}
		v, _ := parseJnum(e)
		st.nums[c] = jnum(v)
		one := st.nums[c : c+1 : c+1]
		switch c {
		case vcInput:
			a.inputLens = one
		case vcOutput:
			a.outputLens = one
		case vcTTFT:
			a.ttfts = one
		case vcStart:
			a.startTimes = one
		case vcLatency:
			a.latencies = one
		case vcQueue:
			a.queueTimes = one
		}
	}
	req, bad := st.p.request(st.run, a, 0, i, st.minStart, st.sem)
	if bad != "" {
		line := st.p.line
		if e := st.elems[vllmBadColumn(bad)]; e != nil && st.lineOf != nil {
			if l := st.lineOf(e); l > 0 {
				line = l
			}
		}
		return &SyntaxError{st.p.file, line, bad}
	}
	return req
}

// vllmBadColumn returns the array whose element a bad request's message
// is about: the array it names ("ttfts[3]: …"), or the array a
// trace.Request field comes from ("request …: arrival_s: …"); input_lens
// when neither says.
func vllmBadColumn(msg string) int {
	for c, name := range vllmColNames {
		if strings.HasPrefix(msg, name+"[") {
			return c
		}
	}
	for field, c := range map[string]int{
		": arrival_s:": vcStart, ": intended_arrival_s:": vcQueue, ": ttft_s:": vcTTFT,
		": e2e_s:": vcLatency, ": itl_s:": vcITL, ": output_tokens:": vcOutput, ": client_queue_s:": vcQueue,
	} {
		if strings.Contains(msg, field) {
			return c
		}
	}
	return vcInput
}
