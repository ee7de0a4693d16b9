package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

// A vllmBenchReader decodes one run object at a time and yields its records.
//
// Note: the per-request arrays are column-major, so a run's requests are
// known only once its whole object is decoded; the reader holds the whole
// file and one decoded run in memory. Files are small (tens of MB with
// generated_texts); a streaming column decoder can replace this later.
type vllmBenchReader struct {
	src  io.Reader
	file string
	run  string
	opts Options

	data     []byte // the whole input, after quoteNonFinite
	loaded   bool
	off      int // offset of the next run object in data
	line     int // line number at lineOff
	lineOff  int
	nrun     int
	runs     []trace.Run
	pending  []Record
	cur      Record
	err      error
	finished bool
}

func newVLLMBenchReader(r io.Reader, file, run string, opts Options) Reader {
	return &vllmBenchReader{src: r, file: file, run: run, opts: opts, line: 1}
}

func (r *vllmBenchReader) Record() Record    { return r.cur }
func (r *vllmBenchReader) Err() error        { return r.err }
func (r *vllmBenchReader) Runs() []trace.Run { return r.runs }

func (r *vllmBenchReader) Scan() bool {
	if !r.loaded {
		r.loaded = true
		b, err := io.ReadAll(r.src)
		if err != nil {
			r.err = fmt.Errorf("%s: %w", r.file, err)
			r.finished = true
			return false
		}
		r.data = quoteNonFinite(b)
	}
	for len(r.pending) == 0 {
		if r.finished || !r.nextRun() {
			r.finished = true
			r.cur = nil
			return false
		}
	}
	r.cur, r.pending = r.pending[0], r.pending[1:]
	return true
}

// lineAt returns the 1-based line of offset off; offsets only grow.
func (r *vllmBenchReader) lineAt(off int) int {
	if off < r.lineOff {
		return r.line
	}
	r.line += bytes.Count(r.data[r.lineOff:off], []byte{'\n'})
	r.lineOff = off
	return r.line
}

// nextRun decodes the next run object into r.pending. It returns false at
// the end of the input.
func (r *vllmBenchReader) nextRun() bool {
	for r.off < len(r.data) && isSpace(r.data[r.off]) {
		r.off++
	}
	if r.off >= len(r.data) {
		return false
	}
	start := r.off
	line := r.lineAt(start)
	r.nrun++
	name := fmt.Sprintf("%s#%d", r.run, r.nrun)
	dec := json.NewDecoder(bytes.NewReader(r.data[start:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		errLine := line
		var se *json.SyntaxError
		if errors.As(err, &se) {
			errLine = r.lineAt(start + int(se.Offset))
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
	p := vllmRunParser{file: r.file, line: line, name: name}
	run, recs := p.parse(raw)
	if run != nil {
		r.runs = append(r.runs, *run)
	}
	r.pending = append(r.pending, recs...)
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// vllmPerRequest are the per-request arrays; Run.Reported keeps the rest.
var vllmPerRequest = map[string]bool{
	"input_lens": true, "output_lens": true, "ttfts": true, "itls": true,
	"generated_texts": true, "errors": true, "start_times": true,
	"latencies": true, "queue_times": true,
}

// vllmArrays are the decoded per-request arrays; nil when absent.
type vllmArrays struct {
	inputLens, outputLens, ttfts []jnum
	startTimes, latencies        []jnum
	queueTimes                   []jnum
	itls                         [][]jnum
	errors                       []string
}

// A vllmRunParser turns one run object into a Run and its records.
type vllmRunParser struct {
	file string
	line int
	name string
	err  *SyntaxError // first run-level error
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

// parse returns the run (nil when the run is bad) and its records: good
// requests and bad elements; a bad run yields exactly one SyntaxError.
func (p *vllmRunParser) parse(raw json.RawMessage) (*trace.Run, []Record) {
	run := &trace.Run{Name: p.name, Source: vllmBenchName, File: p.file}
	var a vllmArrays
	var reported bytes.Buffer
	var wl trace.Workload
	hasWorkload := false
	keys := map[string]bool{}

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
		keys[key] = true
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
		if isNull {
			continue
		}
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
			hasWorkload = true
			p.decode(key, v, &wl.NumPrompts)
		case "request_rate":
			hasWorkload = true
			p.decode(key, v, &wl.RequestRate)
		case "burstiness":
			hasWorkload = true
			p.decode(key, v, &wl.Burstiness)
		case "max_concurrency":
			hasWorkload = true
			p.decode(key, v, &wl.Concurrency)
		case "dataset_name", "dataset":
			hasWorkload = true
			p.decode(key, v, &wl.Dataset)
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
	reported.WriteByte('}')
	if p.err != nil {
		return nil, []Record{p.err}
	}
	if hasWorkload {
		run.Workload = &wl
	}
	// vLLM reports speculative decoding in spec_decode_* summary keys.
	for k := range keys {
		if strings.HasPrefix(k, "spec_decode") {
			run.Speculative = true
		}
	}
	run.Reported = json.RawMessage(reported.Bytes())

	// Layout: vLLM took output lengths from the server's usage and added
	// "failed" and "total_token_throughput" in 2025; before, it
	// re-tokenized the generated text. Only the newest layout records
	// per-request latencies, and those end at the last content chunk.
	sem := vllmSemantics{outputs: trace.OutputRetokenized, e2e: trace.E2EStreamEnd}
	if keys["failed"] || keys["total_token_throughput"] || keys["endpoint_type"] {
		sem.outputs = trace.OutputServerUsage
	}
	if a.latencies != nil {
		sem.e2e = trace.E2ELastToken
	}
	// Say how the reported summary was measured, also for runs without
	// per-request arrays.
	benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstChunk, e2e: sem.e2e, outputs: sem.outputs}.extra(run)
	n, ok := p.checkLengths(&a)
	if !ok {
		return nil, []Record{p.err}
	}
	return run, p.requests(run, &a, n, sem)
}

type vllmSemantics struct{ outputs, e2e string }

// checkLengths returns the number of requests: the length of input_lens,
// which every other present array must match.
func (p *vllmRunParser) checkLengths(a *vllmArrays) (int, bool) {
	lens := []struct {
		name string
		n    int
		ok   bool
	}{
		{"input_lens", len(a.inputLens), a.inputLens != nil},
		{"output_lens", len(a.outputLens), a.outputLens != nil},
		{"ttfts", len(a.ttfts), a.ttfts != nil},
		{"itls", len(a.itls), a.itls != nil},
		{"errors", len(a.errors), a.errors != nil},
		{"start_times", len(a.startTimes), a.startTimes != nil},
		{"latencies", len(a.latencies), a.latencies != nil},
		{"queue_times", len(a.queueTimes), a.queueTimes != nil},
	}
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

// requests converts the arrays to requests; a bad element drops its
// request with a SyntaxError naming the array and index.
func (p *vllmRunParser) requests(run *trace.Run, a *vllmArrays, n int, sem vllmSemantics) []Record {
	recs := make([]Record, 0, n)
	// Arrivals are perf_counter() seconds; trace time 0 is the run's
	// earliest start or, with queue_times, its earliest intended arrival,
	// so that no time is negative.
	minStart := math.Inf(1)
	for j, s := range a.startTimes {
		f := float64(s)
		if a.queueTimes != nil && checkSec(float64(a.queueTimes[j])) == "" {
			f -= float64(a.queueTimes[j])
		}
		if !math.IsNaN(f) && !math.IsInf(f, 0) && f < minStart {
			minStart = f
		}
	}
	for i := range n {
		req, bad := p.request(run, a, i, minStart, sem)
		if bad != "" {
			recs = append(recs, &SyntaxError{p.file, p.line, bad})
			continue
		}
		recs = append(recs, req)
	}
	return recs
}

func (p *vllmRunParser) request(run *trace.Run, a *vllmArrays, i int, minStart float64, sem vllmSemantics) (*trace.Request, string) {
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
	if a.errors != nil && a.errors[i] != "" {
		r.Status = trace.StatusFailed
		r.Error = a.errors[i]
	}
	failed := r.Status != trace.StatusOK
	in, msg := checkCount(float64(a.inputLens[i]))
	if msg != "" {
		return nil, fmt.Sprintf("input_lens[%d]: %s", i, msg)
	}
	r.InputTokens = trace.Some(in)
	out, msg := checkCount(float64(a.outputLens[i]))
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
		v := float64(arr[i])
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
	if a.itls != nil && (!failed || len(a.itls[i]) > 0) {
		r.ITLSec = make([]float64, len(a.itls[i]))
		for j, g := range a.itls[i] {
			if msg := checkSec(float64(g)); msg != "" {
				return nil, fmt.Sprintf("itls[%d][%d]: %s", i, j, msg)
			}
			r.ITLSec[j] = float64(g)
		}
	}
	if a.startTimes != nil {
		s := float64(a.startTimes[i])
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, fmt.Sprintf("start_times[%d]: not finite (%v)", i, s)
		}
		r.Arrival = trace.Some(trace.TimeFromSeconds(s - minStart))
		if a.queueTimes != nil {
			q := float64(a.queueTimes[i])
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
