package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/opaltrace/opaltrace/trace"
)

// vllmBench reads the result files of vLLM's serving benchmark:
// benchmarks/benchmark_serving.py --save-result and vllm bench serve
// --save-result [--save-detailed] (trace-formats.md §1). A file holds one
// or more JSON objects, one per run (--append-result writes them
// newline-separated; vllm bench sweep writes them pretty-printed).
const vllmBenchName = "vllm-bench"

var vllmBench = Format{
	Name:      vllmBenchName,
	Sniff:     sniffVLLMBench,
	NewReader: newVLLMBenchReader,
}

// sniffVLLMBench accepts a JSON object with vLLM's "model_id" and "backend"
// keys. SGLang's bench_serving writes "backend" but no "model_id".
func sniffVLLMBench(head []byte) bool {
	head = bytes.TrimSpace(head)
	return len(head) > 0 && head[0] == '{' &&
		bytes.Contains(head, []byte(`"model_id"`)) && bytes.Contains(head, []byte(`"backend"`))
}

// A vllmBenchReader yields the records of one run at a time.
//
// Note: the per-request arrays are column-major, so one pass over the
// input cannot stream a run's requests. The reader holds the input once
// (readWhole: mapped, past 4 MiB) and walks all arrays of a run
// in step with one cursor per array (vllmstream.go), decoding one request
// at a time: memory is the input plus one request, not the decoded run.
// Runs it cannot vouch for go to the reference route (vllmlegacy.go).
type vllmBenchReader struct {
	src  io.Reader
	file string
	run  string
	opts Options

	data     []byte // the whole input (quoted, once legacy)
	release  func() // releases the input buffer
	loaded   bool
	off      int // offset of the next run object in data
	lines    lineCounter
	newlines []int // offsets of the '\n' of data, for lineOf; nil until needed
	nrun     int
	runs     []trace.Run
	legacy   bool        // reading with the reference route
	stream   *vllmStream // the run whose requests are being yielded
	pending  []Record
	cur      Record
	err      error
	finished bool
}

// vllmForceLegacy makes every run take the reference route; tests set it
// to compare the two routes.
var vllmForceLegacy = false

func newVLLMBenchReader(r io.Reader, file, run string, opts Options) Reader {
	return &vllmBenchReader{src: r, file: file, run: run, opts: opts}
}

func (r *vllmBenchReader) Record() Record    { return r.cur }
func (r *vllmBenchReader) Err() error        { return r.err }
func (r *vllmBenchReader) Runs() []trace.Run { return r.runs }

func (r *vllmBenchReader) Scan() bool {
	if !r.loaded {
		r.loaded = true
		b, release, err := readWhole(r.src, r, r.opts.maxDocumentBytes())
		if errors.Is(err, ErrDocumentTooLong) {
			r.err = documentTooLong(r.file, r.opts.maxDocumentBytes())
			r.finished = true
			return false
		}
		if err != nil {
			r.err = fmt.Errorf("%s: %w", r.file, err)
			r.finished = true
			return false
		}
		r.data, r.release = b, release
		r.lines = lineCounter{b: b}
	}
	for {
		if len(r.pending) > 0 {
			r.cur, r.pending = r.pending[0], r.pending[1:]
			return true
		}
		if r.stream != nil {
			if rec := r.stream.next(); rec != nil {
				r.cur = rec
				return true
			}
			r.stream = nil
		}
		if r.finished || !r.nextRun() {
			r.finished = true
			r.cur = nil
			// No record refers to the input: release it.
			r.data, r.lines, r.newlines = nil, lineCounter{}, nil
			if r.release != nil {
				r.release()
				r.release = nil
			}
			return false
		}
	}
}

// nextRun reads the next run object: its requests come from r.stream or
// r.pending. It returns false at the end of the input.
func (r *vllmBenchReader) nextRun() bool {
	if r.legacy {
		return r.legacyNextRun()
	}
	for r.off < len(r.data) && isSpace(r.data[r.off]) {
		r.off++
	}
	if r.off >= len(r.data) {
		return false
	}
	start := r.off
	obj, end, msg := scanObject(r.data, start)
	if vllmForceLegacy || msg != "" || obj.odd || !utf8.Valid(r.data[start:end]) {
		r.enterLegacy(start)
		return r.legacyNextRun()
	}
	p := vllmRunParser{file: r.file, line: r.lines.at(start), name: fmt.Sprintf("%s#%d", r.run, r.nrun+1)}
	run, st, ok := p.stream(&obj)
	if !ok {
		r.enterLegacy(start)
		return r.legacyNextRun()
	}
	r.nrun++
	r.off = end
	if p.err != nil {
		r.pending = append(r.pending, p.err)
		return true
	}
	r.runs = append(r.runs, *run)
	st.lineOf = r.lineOf
	r.stream = st
	return true
}

// lineOf returns the line of the input on which elem, a subslice of
// r.data, starts, so that a bad element of a pretty-printed file is
// reported where it is, not at its run's first line. The index of line
// ends is built on the first call: inputs without bad records never pay
// for it.
func (r *vllmBenchReader) lineOf(elem []byte) int {
	off := cap(r.data) - cap(elem) // elem shares r.data's array
	if off < 0 || off > len(r.data) {
		return 0
	}
	if r.newlines == nil {
		r.newlines = []int{}
		for i, b := range r.data {
			if b == '\n' {
				r.newlines = append(r.newlines, i)
			}
		}
	}
	n, _ := slices.BinarySearch(r.newlines, off)
	return n + 1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// vllmPerRequest are the per-request arrays; Run.Reported keeps the rest.
var vllmPerRequest = map[string]bool{
	"input_lens": true, "output_lens": true, "ttfts": true, "itls": true,
	"generated_texts": true, "errors": true, "start_times": true,
	"latencies": true, "queue_times": true,
}

// A vllmRunParser turns one run object into a Run and its records.
type vllmRunParser struct {
	file string
	line int
	name string
	err  *SyntaxError // first run-level error

	// The reference route's run object, for elementLine, and the
	// offsets in it of each column's elements, found on first use.
	obj      []byte
	elems    map[int][]int
	newlines []int // offsets of the '\n' of obj
}

func (p *vllmRunParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = &SyntaxError{p.file, p.line, fmt.Sprintf(format, args...)}
	}
}

// decode unmarshals v into dst, recording a run-level error named key.
func (p *vllmRunParser) decode(key string, v json.RawMessage, dst any) {
	if err := json.Unmarshal(v, dst); err != nil {
		p.fail("%s: %v", key, err)
	}
}

// vllmMeta gathers a run's summary keys.
type vllmMeta struct {
	wl          trace.Workload
	hasWorkload bool
}

// set decodes the summary value v (quoted, not null) of key into run.
func (m *vllmMeta) set(p *vllmRunParser, run *trace.Run, key string, v json.RawMessage) {
	switch key {
	case "model_id":
		p.decode(key, v, &run.Model)
	case "backend":
		p.decode(key, v, &run.Backend)
	case "duration":
		var d jnum
		p.decode(key, v, &d)
		if msg := checkSec(float64(d)); msg != "" {
			p.fail("duration: %s", msg)
		}
		run.DurationSec = trace.Some(float64(d))
	case "num_prompts":
		m.hasWorkload = true
		p.decode(key, v, &m.wl.NumPrompts)
	case "request_rate":
		m.hasWorkload = true
		p.decode(key, v, &m.wl.RequestRate)
	case "burstiness":
		m.hasWorkload = true
		p.decode(key, v, &m.wl.Burstiness)
	case "max_concurrency":
		m.hasWorkload = true
		p.decode(key, v, &m.wl.Concurrency)
	case "dataset_name", "dataset":
		m.hasWorkload = true
		p.decode(key, v, &m.wl.Dataset)
	default:
		if v[0] == '"' {
			var s string
			p.decode(key, v, &s)
			if run.Extra == nil {
				run.Extra = map[string]string{}
			}
			run.Extra[key] = s
		}
	}
}

type vllmSemantics struct{ outputs, e2e string }

// finish completes a good run from its keys (all of them, in input order),
// its reported summary and whether it has per-request latencies, and
// returns how its requests were measured.
func (m *vllmMeta) finish(run *trace.Run, keys []string, reported []byte, latencies bool) vllmSemantics {
	if m.hasWorkload {
		wl := m.wl
		run.Workload = &wl
	}
	has := map[string]bool{}
	for _, k := range keys {
		has[k] = true
		// vLLM reports speculative decoding in spec_decode_* summary keys.
		if strings.HasPrefix(k, "spec_decode") {
			run.Speculative = true
		}
	}
	run.Reported = json.RawMessage(reported)

	// Layout: vLLM took output lengths from the server's usage and added
	// "failed" and "total_token_throughput" in 2025; before, it
	// re-tokenized the generated text. Only the newest layout records
	// per-request latencies, and those end at the last content chunk.
	sem := vllmSemantics{outputs: trace.OutputRetokenized, e2e: trace.E2EStreamEnd}
	if has["failed"] || has["total_token_throughput"] || has["endpoint_type"] {
		sem.outputs = trace.OutputServerUsage
	}
	if latencies {
		sem.e2e = trace.E2ELastToken
	}
	// Say how the reported summary was measured, also for runs without
	// per-request arrays.
	benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstChunk, e2e: sem.e2e, outputs: sem.outputs}.extra(run)
	return sem
}

// A vllmColLen is the length of one per-request array and whether the run
// has it.
type vllmColLen struct {
	name string
	n    int
	ok   bool
}

// checkLengths returns the number of requests: the length of input_lens,
// which every other present array must match. lens lists input_lens,
// output_lens and ttfts first, then the optional arrays.
func (p *vllmRunParser) checkLengths(lens []vllmColLen) (int, bool) {
	any := false
	for _, l := range lens {
		any = any || l.ok
	}
	if !any {
		return 0, true // a summary-only run
	}
	for _, l := range lens[:3] {
		if !l.ok {
			p.fail("%s: missing, but the run has per-request arrays", l.name)
			return 0, false
		}
	}
	n := lens[0].n
	for _, l := range lens[1:] {
		if l.ok && l.n != n {
			p.fail("%s: %d entries for %d requests", l.name, l.n, n)
			return 0, false
		}
	}
	return n, true
}

// startOrigin returns the time a request counts from for the trace
// origin: its start or, with a queue time q (one element or none), its
// intended arrival; +Inf when not finite.
//
// Arrivals are perf_counter() seconds; trace time 0 is the run's earliest
// start or, with queue_times, its earliest intended arrival, so that no
// time is negative.
func startOrigin(s jnum, q []jnum) float64 {
	f := float64(s)
	if len(q) > 0 && checkSec(float64(q[0])) == "" {
		f -= float64(q[0])
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return math.Inf(1)
	}
	return f
}

// request converts element k of the arrays, request i of the run, to a
// request, or returns a message naming the bad element.
func (p *vllmRunParser) request(run *trace.Run, a *vllmArrays, k, i int, minStart float64, sem vllmSemantics) (*trace.Request, string) {
	r := &trace.Request{
		RequestID:          fmt.Sprintf("%s/%d", run.Name, i),
		Run:                run.Name,
		Source:             vllmBenchName,
		Model:              run.Model,
		Status:             trace.StatusOK,
		ITLUnit:            trace.ITLChunk,
		TTFTBasis:          trace.TTFTFirstChunk,
		E2EBasis:           sem.e2e,
		OutputTokensSource: sem.outputs,
	}
	r.SetPos(p.file, i+1)
	if a.errors != nil && a.errors[k] != "" {
		r.Status = trace.StatusFailed
		r.Error = a.errors[k]
	}
	failed := r.Status != trace.StatusOK
	in, msg := checkCount(float64(a.inputLens[k]))
	if msg != "" {
		return nil, fmt.Sprintf("input_lens[%d]: %s", i, msg)
	}
	r.InputTokens = trace.Some(in)
	out, msg := checkCount(float64(a.outputLens[k]))
	if msg != "" {
		return nil, fmt.Sprintf("output_lens[%d]: %s", i, msg)
	}
	// vLLM writes 0 for what a failed request never measured: a
	// placeholder, not a value.
	if !failed || out != 0 {
		r.OutputTokens = trace.Some(out)
	}
	sec := func(name string, arr []jnum) (trace.Opt[float64], string) {
		if arr == nil {
			return trace.Opt[float64]{}, ""
		}
		v := float64(arr[k])
		if msg := checkSec(v); msg != "" {
			return trace.Opt[float64]{}, fmt.Sprintf("%s[%d]: %s", name, i, msg)
		}
		if failed && v == 0 {
			return trace.Opt[float64]{}, ""
		}
		return trace.Some(v), ""
	}
	if r.TTFTSec, msg = sec("ttfts", a.ttfts); msg != "" {
		return nil, msg
	}
	if r.E2ESec, msg = sec("latencies", a.latencies); msg != "" {
		return nil, msg
	}
	if a.itls != nil && (!failed || len(a.itls[k]) > 0) {
		r.ITLSec = make([]float64, len(a.itls[k]))
		for j, g := range a.itls[k] {
			if msg := checkSec(float64(g)); msg != "" {
				return nil, fmt.Sprintf("itls[%d][%d]: %s", i, j, msg)
			}
			r.ITLSec[j] = float64(g)
		}
	}
	if a.startTimes != nil {
		s := float64(a.startTimes[k])
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, fmt.Sprintf("start_times[%d]: not finite (%v)", i, s)
		}
		r.Arrival = trace.Some(trace.TimeFromSeconds(s - minStart))
		if a.queueTimes != nil {
			q := float64(a.queueTimes[k])
			if msg := checkSec(q); msg != "" {
				return nil, fmt.Sprintf("queue_times[%d]: %s", i, msg)
			}
			// queue_time = start_time - request_arrival_time: the wait
			// for the client's concurrency limit.
			r.IntendedArrival = trace.Some(trace.TimeFromSeconds(s - q - minStart))
		}
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Sprintf("request %d: %v", i, err)
	}
	return r, ""
}
