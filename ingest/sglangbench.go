package ingest

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/opaltrace/opaltrace/trace"
)

// sglangBench reads the JSONL results of SGLang's serving benchmark,
// python -m sglang.bench_serving (trace-formats.md §2): one JSON object per
// run, appended, with bare Infinity/NaN; old (reduced) and new field sets;
// server_info; with --output-details the per-request arrays input_lens,
// output_lens, ttfts, itls, generated_texts, errors and, with
// --cache-report, cached_tokens and cached_tokens_details.
const sglangBenchName = "sglang-bench"

var sglangBench = Format{
	Name:      sglangBenchName,
	Sniff:     sniffSGLangBench,
	NewReader: newSGLangBenchReader,
}

// sniffSGLangBench accepts a JSON object with "backend" and the dataset
// arguments only SGLang echoes ("random_input_len", "sharegpt_output_len").
// They come before server_info, so they are in the head.
func sniffSGLangBench(head []byte) bool {
	head = bytes.TrimSpace(head)
	return len(head) > 0 && head[0] == '{' && bytes.Contains(head, []byte(`"backend"`)) &&
		(bytes.Contains(head, []byte(`"random_input_len"`)) || bytes.Contains(head, []byte(`"sharegpt_output_len"`)))
}

// sglangPerRequest are the per-request arrays; Run.Reported keeps the rest.
var sglangPerRequest = map[string]bool{
	"input_lens": true, "output_lens": true, "ttfts": true, "itls": true,
	"generated_texts": true, "errors": true, "cached_tokens": true, "cached_tokens_details": true,
}

// sglangSyntheticDatasets are the datasets bench_serving generates from its
// arguments alone; the others read prompts from a file we do not have.
var sglangSyntheticDatasets = map[string]bool{"random": true, "random-ids": true, "generated-shared-prefix": true}

// A sglangBenchReader reads one run object at a time and yields its
// requests by walking its arrays in step (see colscan.go).
type sglangBenchReader struct {
	src    io.Reader
	file   string
	prefix string
	maxDoc int64 // Options.MaxDocumentBytes

	data   []byte
	loaded bool
	off    int
	lines  lineCounter
	nrun   int
	runs   []trace.Run
	cur    Record
	err    error
	done   bool

	// The run whose requests are being read.
	active bool
	run    *trace.Run
	line   int // line where the run object starts
	sem    benchSemantics
	cols   map[string]*arrCursor
	i, n   int
}

// benchSemantics are the source-semantics columns of a benchmark run.
type benchSemantics struct{ itl, ttft, e2e, outputs string }

// extra records the semantics in run metadata too, so that a summary-only
// run says how its reported numbers were measured.
func (s benchSemantics) extra(run *trace.Run) {
	for k, v := range map[string]string{"itl_unit": s.itl, "ttft_basis": s.ttft, "e2e_basis": s.e2e, "output_tokens_source": s.outputs} {
		if v != "" {
			setExtra(run, k, v)
		}
	}
}

func setExtra(run *trace.Run, k, v string) {
	if run.Extra == nil {
		run.Extra = map[string]string{}
	}
	run.Extra[k] = v
}

func newSGLangBenchReader(r io.Reader, file, run string, opts Options) Reader {
	return &sglangBenchReader{src: r, file: file, prefix: run, maxDoc: opts.maxDocumentBytes()}
}

func (r *sglangBenchReader) Record() Record    { return r.cur }
func (r *sglangBenchReader) Err() error        { return r.err }
func (r *sglangBenchReader) Runs() []trace.Run { return r.runs }

func (r *sglangBenchReader) Scan() bool {
	if !r.loaded {
		r.loaded = true
		b, err := readInput(r.src, r.file, r.maxDoc)
		if err != nil {
			r.err = err
			r.done = true
		}
		r.data = b
		r.lines = lineCounter{b: b}
	}
	for !r.done {
		if r.active {
			if r.i < r.n {
				r.cur = r.request(r.i)
				r.i++
				return true
			}
			r.active = false
		}
		for r.off < len(r.data) && isSpace(r.data[r.off]) {
			r.off++
		}
		if r.off >= len(r.data) {
			break
		}
		if rec := r.nextRun(); rec != nil {
			r.cur = rec
			return true
		}
	}
	r.done = true
	r.cur = nil
	return false
}

// nextRun scans the run object at r.off. It returns a bad record, or nil
// when the run was good (its requests follow).
func (r *sglangBenchReader) nextRun() Record {
	start := r.off
	r.line = r.lines.at(start)
	r.nrun++
	obj, end, msg := scanObject(r.data, start)
	if msg != "" {
		// Resynchronise at the next object that starts a line.
		if i := bytes.Index(r.data[start+1:], []byte("\n{")); i >= 0 {
			r.off = start + 1 + i + 1
		} else {
			r.off = len(r.data)
		}
		return &SyntaxError{r.file, r.lines.at(end), msg}
	}
	r.off = end
	// json.dumps writes ASCII; invalid UTF-8 cannot be kept in the
	// run's metadata (Parquet key/value strings are UTF-8).
	if !utf8.Valid(r.data[start:end]) {
		return &SyntaxError{r.file, r.line, "run: invalid UTF-8"}
	}
	run := &trace.Run{Name: fmt.Sprintf("%s#%d", r.prefix, r.nrun), Source: sglangBenchName, File: r.file}
	cols, n, bad := r.parseRun(&obj, run)
	if bad != "" {
		return &SyntaxError{r.file, r.line, bad}
	}
	r.runs = append(r.runs, *run)
	r.run = &r.runs[len(r.runs)-1]
	r.cols, r.n, r.i, r.active = cols, n, 0, n > 0
	return nil
}

// parseRun fills run from the summary keys and returns the cursors of the
// per-request arrays and the number of requests; a message reports a bad run.
func (r *sglangBenchReader) parseRun(obj *runObject, run *trace.Run) (map[string]*arrCursor, int, string) {
	rep, err := obj.reported(sglangPerRequest)
	if err != nil {
		return nil, 0, err.Error()
	}
	run.Reported = rep
	str := func(key string, dst *string) error {
		if obj.has(key) {
			return obj.decode(key, dst)
		}
		return nil
	}
	var dataset, rate string
	wl := &trace.Workload{}
	var errs []error
	errs = append(errs, str("backend", &run.Backend), str("dataset_name", &dataset))
	wl.Dataset = dataset
	var tag string
	errs = append(errs, str("tag", &tag))
	if tag != "" {
		setExtra(run, "tag", tag)
	}
	ints := []struct {
		key string
		dst *int
	}{
		{"random_input_len", &wl.InputLen}, {"random_output_len", &wl.OutputLen},
		{"max_concurrency", &wl.Concurrency}, {"num_prompts", &wl.NumPrompts},
	}
	for _, f := range ints {
		if obj.has(f.key) {
			var v jnum
			if err := obj.decode(f.key, &v); err != nil {
				errs = append(errs, err)
				continue
			}
			n, msg := checkCount(float64(v))
			if msg != "" {
				return nil, 0, f.key + ": " + msg
			}
			*f.dst = int(n)
		}
	}
	if !sglangSyntheticDatasets[dataset] {
		// The random_* arguments are echoed whatever the dataset; they
		// describe only random datasets.
		wl.InputLen, wl.OutputLen = 0, 0
		if obj.has("sharegpt_output_len") {
			var v jnum
			errs = append(errs, obj.decode("sharegpt_output_len", &v))
			wl.OutputLen = int(v)
		}
	}
	if obj.has("random_range_ratio") && sglangSyntheticDatasets[dataset] {
		var v jnum
		errs = append(errs, obj.decode("random_range_ratio", &v))
		if msg := checkSec(float64(v)); msg != "" {
			return nil, 0, "random_range_ratio: " + msg
		}
		wl.RangeRatio = float64(v)
	}
	if raw := obj.raw("request_rate"); raw != nil {
		if string(raw) == `"trace"` {
			rate = "trace" // --use-trace-timestamps: arrivals from a Mooncake trace
			setExtra(run, "arrivals", "trace timestamps")
		} else if string(raw) != "null" {
			var v jnum
			if err := obj.decode("request_rate", &v); err != nil {
				errs = append(errs, err)
			} else if math.IsNaN(float64(v)) || float64(v) <= 0 {
				return nil, 0, fmt.Sprintf("request_rate: not positive (%v)", float64(v))
			}
			wl.RequestRate = trace.Rate(v)
		}
	}
	_ = rate
	if obj.has("duration") {
		var d jnum
		errs = append(errs, obj.decode("duration", &d))
		if msg := checkSec(float64(d)); msg != "" {
			return nil, 0, "duration: " + msg
		}
		run.DurationSec = trace.Some(float64(d))
	}
	for _, e := range errs {
		if e != nil {
			return nil, 0, e.Error()
		}
	}
	if msg := sglangServerInfo(obj, run); msg != "" {
		return nil, 0, msg
	}
	if obj.has("accept_length") {
		run.Speculative = true
	}
	if !sglangSyntheticDatasets[dataset] {
		run.Approximate = fmt.Sprintf("dataset %q is not recorded in the result: prompts and lengths can only be approximated", dataset)
	}

	cols := map[string]*arrCursor{}
	for k := range sglangPerRequest {
		if k == "generated_texts" || !obj.has(k) {
			continue
		}
		c, ok := newArrCursor(k, obj.b, obj.vals[k])
		if !ok {
			return nil, 0, k + ": not an array"
		}
		cols[k] = c
	}
	n := 0
	if len(cols) > 0 {
		for _, k := range []string{"input_lens", "output_lens", "ttfts"} {
			if cols[k] == nil {
				return nil, 0, k + ": missing, but the run has per-request arrays"
			}
		}
		n = cols["input_lens"].n
		for _, k := range sortedKeys(cols) {
			if c := cols[k]; c.n != n {
				return nil, 0, fmt.Sprintf("%s: %d entries for %d requests", k, c.n, n)
			}
		}
	}
	// bench_serving does not write num_prompts: with per-request arrays
	// the number of requests is it (failures included); without, the
	// number of completed requests is the best the file says.
	if wl.NumPrompts == 0 {
		if n > 0 {
			wl.NumPrompts = n
			setExtra(run, "num_prompts_from", "per-request arrays")
		} else if obj.has("completed") {
			var c jnum
			if err := obj.decode("completed", &c); err == nil {
				if v, msg := checkCount(float64(c)); msg == "" {
					wl.NumPrompts = int(v)
					setExtra(run, "num_prompts_from", "completed")
				}
			}
		}
	}
	run.Workload = wl
	r.sem = sglangSemantics(run.Backend, obj, cols, wl)
	r.sem.extra(run)
	return cols, n, ""
}

// sglangServerInfo reads what the server said about itself (GET
// /server_info): the engine, model, parallelism, and whether prefill and
// decode run on separate servers (keys "prefill" and "decode", or a
// disaggregation_mode of prefill/decode).
func sglangServerInfo(obj *runObject, run *trace.Run) string {
	if !obj.has("server_info") {
		return ""
	}
	var si map[string]any
	if err := obj.decode("server_info", &si); err != nil {
		return err.Error()
	}
	// Only SGLang serves /server_info: its presence names the engine,
	// whatever API the client used.
	run.Engine = "sglang"
	first := func(v any) map[string]any {
		switch x := v.(type) {
		case map[string]any:
			return x
		case []any:
			if len(x) > 0 {
				m, _ := x[0].(map[string]any)
				return m
			}
		}
		return nil
	}
	args := si
	prefill, decode := first(si["prefill"]), first(si["decode"])
	if prefill != nil && decode != nil {
		run.Disaggregated = true
		args = prefill
		if tp, ok := prefill["tp_size"].(float64); ok {
			setExtra(run, "prefill_tp", strconv.Itoa(int(tp)))
		}
		if tp, ok := decode["tp_size"].(float64); ok {
			setExtra(run, "decode_tp", strconv.Itoa(int(tp)))
		}
	}
	if m, ok := args["disaggregation_mode"].(string); ok && (m == "prefill" || m == "decode") {
		run.Disaggregated = true
	}
	if s, ok := args["model_path"].(string); ok {
		run.Model = s
	}
	if v, ok := args["version"].(string); ok {
		setExtra(run, EngineVersionKey, v)
	}
	if s, ok := args["speculative_algorithm"].(string); ok && s != "" {
		run.Speculative = true
	}
	num := func(k string) int {
		f, _ := args[k].(float64)
		if f < 0 || f > 1<<20 || f != math.Trunc(f) {
			return 0
		}
		return int(f)
	}
	if !run.Disaggregated || run.Extra["prefill_tp"] == run.Extra["decode_tp"] {
		run.TP = num("tp_size")
	}
	run.PP, run.DP = num("pp_size"), num("dp_size")
	return ""
}

// sglangSemantics says how bench_serving measured, by client backend (the
// API it called, trace-formats.md §2.3):
//   - native (sglang, sglang-native: /generate): TTFT at the first
//     non-empty text, E2E at the end of the stream, output tokens from the
//     server's meta_info, and each chunk's gap split evenly over its new
//     tokens, so ITL is per token when every request has output−1 gaps
//     (older clients kept one gap per chunk: then chunk);
//   - OpenAI (sglang-oai*, vllm*, lmdeploy*): TTFT at the first non-empty
//     text, E2E after [DONE], ITL per chunk; output tokens from
//     usage.completion_tokens, else the requested length. The client asks
//     for no usage in the stream (no stream_options), so the count is the
//     requested one unless the file shows otherwise: a random dataset with
//     fixed lengths (range ratio 1) whose output lengths differ from the
//     requested length;
//   - trt: TTFT at the first chunk, E2E at the last, outputs requested.
//
// Other backends leave the columns empty: we do not know.
func sglangSemantics(backend string, obj *runObject, cols map[string]*arrCursor, wl *trace.Workload) benchSemantics {
	switch backend {
	case "sglang", "sglang-native":
		sem := benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstText, e2e: trace.E2EStreamEnd, outputs: trace.OutputServerUsage}
		if perTokenITL(obj, cols) {
			sem.itl = trace.ITLToken
		}
		return sem
	case "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "lmdeploy", "lmdeploy-chat":
		sem := benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstText, e2e: trace.E2EStreamEnd, outputs: trace.OutputRequested}
		if fixed := wl.OutputLen; fixed > 0 && sglangSyntheticDatasets[wl.Dataset] && wl.RangeRatio >= 1 && cols["output_lens"] != nil {
			c := *cols["output_lens"]
			for e := c.next(); e != nil; e = c.next() {
				if v, ok, _ := elemFloat(e); ok && v != 0 && v != float64(fixed) {
					sem.outputs = trace.OutputServerUsage
					break
				}
			}
		}
		return sem
	case "trt":
		return benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstChunk, e2e: trace.E2ELastToken, outputs: trace.OutputRequested}
	}
	return benchSemantics{}
}

// perTokenITL reports whether every successful request with output has
// exactly output_len−1 ITL gaps (and at least one request does).
func perTokenITL(obj *runObject, cols map[string]*arrCursor) bool {
	if cols["itls"] == nil || cols["output_lens"] == nil {
		return false
	}
	itls, outs := *cols["itls"], *cols["output_lens"]
	seen := false
	for {
		g, o := itls.next(), outs.next()
		if g == nil || o == nil {
			return seen
		}
		v, ok, _ := elemFloat(o)
		if !ok || v < 2 || len(g) == 0 || g[0] != '[' {
			continue
		}
		n := 0
		c := arrCursor{s: jscan{b: g, i: 1}}
		for c.next() != nil {
			n++
		}
		if float64(n) != v-1 {
			return false
		}
		seen = true
	}
}

// request converts element i of every array; every cursor advances.
func (r *sglangBenchReader) request(i int) Record {
	el := map[string][]byte{}
	for k, c := range r.cols {
		el[k] = c.next()
	}
	run := r.run
	q := &trace.Request{
		RequestID:          fmt.Sprintf("%s/%d", run.Name, i),
		Run:                run.Name,
		Source:             sglangBenchName,
		Model:              run.Model,
		Status:             trace.StatusOK,
		ITLUnit:            r.sem.itl,
		TTFTBasis:          r.sem.ttft,
		E2EBasis:           r.sem.e2e,
		OutputTokensSource: r.sem.outputs,
	}
	q.SetPos(r.file, i+1)
	bad := func(key, msg string) Record {
		return &SyntaxError{r.file, r.line, fmt.Sprintf("%s[%d]: %s", key, i, msg)}
	}
	if e, ok := el["errors"]; ok {
		s, msg := elemString(e)
		if msg != "" {
			return bad("errors", msg)
		}
		if s != "" {
			q.Status, q.Error = trace.StatusFailed, s
		}
	}
	failed := !q.OK()
	count := func(key string) (trace.Opt[int64], string) {
		e, ok := el[key]
		if !ok {
			return trace.Opt[int64]{}, ""
		}
		v, present, msg := elemFloat(e)
		if msg != "" || !present {
			if msg == "" {
				msg = "null"
			}
			return trace.Opt[int64]{}, msg
		}
		n, msg := checkCount(v)
		if msg != "" {
			return trace.Opt[int64]{}, msg
		}
		// A failed request's 0 is a placeholder, not a value.
		if failed && n == 0 {
			return trace.Opt[int64]{}, ""
		}
		return trace.Some(n), ""
	}
	var msg string
	if q.InputTokens, msg = count("input_lens"); msg != "" {
		return bad("input_lens", msg)
	}
	if q.OutputTokens, msg = count("output_lens"); msg != "" {
		return bad("output_lens", msg)
	}
	if q.CachedTokens, msg = count("cached_tokens"); msg != "" {
		return bad("cached_tokens", msg)
	}
	if e := el["ttfts"]; e != nil {
		v, ok, m := elemFloat(e)
		if m == "" && ok {
			m = checkSec(v)
		}
		if m != "" {
			return bad("ttfts", m)
		}
		if ok && !(failed && v == 0) {
			q.TTFTSec = trace.Some(v)
		}
	}
	if e, ok := el["itls"]; ok && string(e) != "null" {
		gaps, m := elemFloats(e)
		if m != "" {
			return bad("itls", m)
		}
		for j, g := range gaps {
			if m := checkSec(g); m != "" {
				return bad("itls", fmt.Sprintf("gap %d: %s", j, m))
			}
		}
		if !failed || len(gaps) > 0 {
			q.ITLSec = gaps
		}
	}
	if e, ok := el["cached_tokens_details"]; ok && string(e) != "null" {
		if m := sglangTierHits(e, q); m != "" {
			return bad("cached_tokens_details", m)
		}
	}
	if err := q.Validate(); err != nil {
		return bad("request", err.Error())
	}
	return q
}

// sglangTierHits reads a cached_tokens_details object {"device", "host",
// "storage", "storage_backend"} into the tier hit columns.
func sglangTierHits(e []byte, q *trace.Request) string {
	obj, _, msg := scanObject(e, 0)
	if msg != "" {
		return msg
	}
	for _, f := range []struct {
		key string
		dst *trace.Opt[int64]
	}{{"device", &q.DeviceHitTokens}, {"host", &q.HostHitTokens}, {"storage", &q.StorageHitTokens}} {
		raw := obj.raw(f.key)
		if raw == nil || string(raw) == "null" {
			continue
		}
		v, _, m := elemFloat(raw)
		if m != "" {
			return f.key + ": " + m
		}
		n, m := checkCount(v)
		if m != "" {
			return f.key + ": " + m
		}
		*f.dst = trace.Some(n)
	}
	return ""
}
