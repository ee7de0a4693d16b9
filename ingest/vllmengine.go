package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// vllmEngine reads vLLM's engine-side per-request timestamps as
// LLMServingSim's bench runner writes them (requests.jsonl): one JSON
// object a line with request_id, input_toks, output_toks, arrival_time
// (wall-clock epoch seconds) and queued_ts, scheduled_ts, first_token_ts,
// last_token_ts (vLLM's RequestStateStats, on the engine's monotonic
// clock), one run per file.
//
// The two clocks are never subtracted from each other. Arrivals are the
// differences of arrival_time from the first line's; the durations are
// differences on the monotonic clock, named as vLLM's metrics name them:
// queue_s = scheduled − queued (vllm:request_queue_time_seconds),
// prefill_s = first token − scheduled (vllm:request_prefill_time_seconds),
// decode_s = last token − first token, TTFT and E2E from queued (basis
// "server": no HTTP, tokenisation or detokenisation in them). The
// runner asks for exactly output_toks tokens (min_tokens = max_tokens,
// ignore_eos), so output_tokens_source is "requested".
//
// Beside it, meta.json (engine arguments, vLLM version, resolved KV
// cache, device) fills the run's deployment: model, TP, DP, engine
// options (engine_opt.max_num_seqs, ...), hardware; when meta.json has no
// device, the LLMServingSim config.json one folder up names it. The
// per-second timeseries.csv (vLLM's stat logger: running, waiting, KV
// cache usage %) is checked line by line and summarised in the run's
// Extra (timeseries.seconds, timeseries.max_running, ...).
const vllmEngineName = "vllm-engine"

var vllmEngine = Format{
	Name:      vllmEngineName,
	Sniff:     sniffVLLMEngine,
	NewReader: newVLLMEngineReader,
}

// sniffVLLMEngine accepts a first line that is a JSON object with the
// engine timestamps.
func sniffVLLMEngine(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n")
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return len(head) > 0 && head[0] == '{' &&
		bytes.Contains(head, []byte(`"queued_ts"`)) &&
		bytes.Contains(head, []byte(`"first_token_ts"`)) &&
		bytes.Contains(head, []byte(`"input_toks"`))
}

// vllmEngineLine is one line of requests.jsonl.
type vllmEngineLine struct {
	RequestID    *string      `json:"request_id"`
	InputToks    *json.Number `json:"input_toks"`
	OutputToks   *json.Number `json:"output_toks"`
	ArrivalTime  *json.Number `json:"arrival_time"`
	QueuedTS     *float64     `json:"queued_ts"`
	ScheduledTS  *float64     `json:"scheduled_ts"`
	FirstTokenTS *float64     `json:"first_token_ts"`
	LastTokenTS  *float64     `json:"last_token_ts"`
}

type vllmEngineReader struct {
	lr      *lineReader
	file    string
	run     trace.Run
	origin  int64 // epoch ns of the first line's arrival_time
	started bool
	pending []Record // companion-file errors, yielded first
	maxDoc  int64    // Options.MaxDocumentBytes, bounding the companion files
	cur     Record
	err     error
}

func newVLLMEngineReader(r io.Reader, file, run string, opts Options) Reader {
	x := &vllmEngineReader{lr: newLineReader(r, opts.maxLineBytes()), file: file, maxDoc: opts.maxDocumentBytes(), run: trace.Run{
		Name: run + "#1", Source: vllmEngineName, File: file, Engine: "vllm", Extra: map[string]string{},
	}}
	if file != "-" {
		x.err = x.readMeta(filepath.Dir(file))
		x.readTimeseries(filepath.Join(filepath.Dir(file), "timeseries.csv"))
	}
	return x
}

func (r *vllmEngineReader) Record() Record    { return r.cur }
func (r *vllmEngineReader) Err() error        { return r.err }
func (r *vllmEngineReader) Runs() []trace.Run { return []trace.Run{r.run} }

func (r *vllmEngineReader) Scan() bool {
	if r.err != nil {
		return false
	}
	if len(r.pending) > 0 {
		r.cur, r.pending = r.pending[0], r.pending[1:]
		return true
	}
	for {
		line, ok := r.lr.next()
		if !ok {
			break
		}
		if msg := r.lr.overLong(); msg != "" {
			r.cur = &SyntaxError{r.file, r.lr.line, msg}
			return true
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		req, msg := r.parse(line)
		if msg != "" {
			r.cur = &SyntaxError{r.file, r.lr.line, msg}
		} else {
			r.cur = req
		}
		return true
	}
	if r.lr.err != nil {
		r.err = fmt.Errorf("%s:%d: %w", r.file, r.lr.line+1, r.lr.err)
	}
	r.cur = nil
	return false
}

func (r *vllmEngineReader) parse(line []byte) (*trace.Request, string) {
	var l vllmEngineLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&l); err != nil {
		return nil, "not a JSON object: " + err.Error()
	}
	if dec.More() {
		return nil, "more than one JSON value on the line"
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"request_id", l.RequestID != nil}, {"input_toks", l.InputToks != nil}, {"output_toks", l.OutputToks != nil},
		{"arrival_time", l.ArrivalTime != nil}, {"queued_ts", l.QueuedTS != nil}, {"scheduled_ts", l.ScheduledTS != nil},
		{"first_token_ts", l.FirstTokenTS != nil}, {"last_token_ts", l.LastTokenTS != nil},
	} {
		if !f.ok {
			return nil, f.name + ": missing"
		}
	}
	count := func(name string, n json.Number) (int64, string) {
		v, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return 0, name + ": not a number"
		}
		c, msg := checkCount(v)
		if msg != "" {
			return 0, name + ": " + msg
		}
		return c, ""
	}
	in, msg := count("input_toks", *l.InputToks)
	if msg != "" {
		return nil, msg
	}
	out, msg := count("output_toks", *l.OutputToks)
	if msg != "" {
		return nil, msg
	}
	arr, ok := epochNS(string(*l.ArrivalTime))
	if !ok {
		return nil, fmt.Sprintf("arrival_time: %s is not epoch seconds", *l.ArrivalTime)
	}
	if !r.started {
		r.origin, r.started = arr, true
		r.run.StartUnixN = arr
	}
	at := trace.Time(arr - r.origin)
	if msg := checkTraceTime(at); msg != "" {
		return nil, "arrival_time: " + msg
	}
	// The monotonic timestamps, in order.
	ts := []struct {
		name string
		v    float64
	}{{"queued_ts", *l.QueuedTS}, {"scheduled_ts", *l.ScheduledTS}, {"first_token_ts", *l.FirstTokenTS}, {"last_token_ts", *l.LastTokenTS}}
	for i, t := range ts {
		if msg := checkSec(t.v); msg != "" {
			return nil, t.name + ": " + msg
		}
		if i > 0 && t.v < ts[i-1].v {
			return nil, fmt.Sprintf("%s: %v is before %s %v", t.name, t.v, ts[i-1].name, ts[i-1].v)
		}
	}
	if ts[3].v-ts[0].v > maxTraceTime.Seconds() {
		return nil, "last_token_ts: more than 100 days after queued_ts"
	}
	queued, sched, first, last := ts[0].v, ts[1].v, ts[2].v, ts[3].v
	req := &trace.Request{
		RequestID:          *l.RequestID,
		Run:                r.run.Name,
		Source:             vllmEngineName,
		Model:              r.run.Model,
		Status:             trace.StatusOK,
		InputTokens:        trace.Some(in),
		OutputTokens:       trace.Some(out),
		Arrival:            trace.Some(at),
		TTFTSec:            trace.Some(first - queued),
		E2ESec:             trace.Some(last - queued),
		QueueSec:           trace.Some(sched - queued),
		PrefillSec:         trace.Some(first - sched),
		DecodeSec:          trace.Some(last - first),
		TTFTBasis:          trace.TTFTServer,
		E2EBasis:           trace.E2EServer,
		OutputTokensSource: trace.OutputRequested,
		PrefillBasis:       trace.PrefillScheduled,
	}
	req.SetPos(r.file, r.lr.line)
	// Validate holds what every reader's requests keep (latencies under a
	// day among them), which the checks above do not all cover.
	if err := req.Validate(); err != nil {
		return nil, err.Error()
	}
	return req, ""
}

// vllmEngineMeta is the part of meta.json the run records.
type vllmEngineMeta struct {
	Model        string `json:"model"`
	VLLMVersion  string `json:"vllm_version"`
	EngineKwargs struct {
		TP                   int    `json:"tensor_parallel_size"`
		DP                   int    `json:"data_parallel_size"`
		EnableExpertParallel bool   `json:"enable_expert_parallel"`
		MaxNumSeqs           int    `json:"max_num_seqs"`
		MaxNumBatchedTokens  int    `json:"max_num_batched_tokens"`
		MaxModelLen          *int   `json:"max_model_len"`
		DType                string `json:"dtype"`
		KVCacheDType         string `json:"kv_cache_dtype"`
		Seed                 *int   `json:"seed"`
	} `json:"engine_kwargs"`
	KVCache *struct {
		NumGPUBlocks         *int     `json:"num_gpu_blocks"`
		BlockSize            int      `json:"block_size"`
		GPUMemoryUtilization *float64 `json:"gpu_memory_utilization"`
		EnablePrefixCaching  *bool    `json:"enable_prefix_caching"`
	} `json:"kv_cache"`
	Hardware *struct {
		DeviceCount int    `json:"device_count"`
		DeviceName  string `json:"device_name"`
	} `json:"hardware"`
}

// readMeta fills the run from dir/meta.json when there is one; a
// meta.json that does not parse is a fatal error (the run's deployment
// would be silently wrong).
func (r *vllmEngineReader) readMeta(dir string) error {
	b, path, ok, err := readSibling(filepath.Join(dir, "meta.json"), r.maxDoc)
	if !ok {
		return err
	}
	var m vllmEngineMeta
	if bad := unmarshalAt(b, path, &m); bad != nil {
		return bad
	}
	run := &r.run
	run.Extra["meta_file"] = path
	run.Model = m.Model
	k := m.EngineKwargs
	run.TP, run.DP = k.TP, k.DP
	set := func(key string, v string) {
		if v != "" {
			run.Extra[key] = v
		}
	}
	itoa := func(v int) string {
		if v == 0 {
			return ""
		}
		return strconv.Itoa(v)
	}
	set(EngineVersionKey, m.VLLMVersion)
	set(EngineOptPrefix+"max_num_seqs", itoa(k.MaxNumSeqs))
	set(EngineOptPrefix+"max_num_batched_tokens", itoa(k.MaxNumBatchedTokens))
	if k.MaxModelLen != nil {
		set(EngineOptPrefix+"max_model_len", itoa(*k.MaxModelLen))
	}
	set(EngineOptPrefix+"dtype", k.DType)
	set(EngineOptPrefix+"kv_cache_dtype", k.KVCacheDType)
	if k.EnableExpertParallel {
		set(EngineOptPrefix+"enable_expert_parallel", "true")
	}
	if k.Seed != nil {
		set(EngineOptPrefix+"seed", strconv.Itoa(*k.Seed))
	}
	if kv := m.KVCache; kv != nil {
		if kv.BlockSize > 0 {
			set(EngineOptPrefix+"block_size", itoa(kv.BlockSize))
		}
		if kv.GPUMemoryUtilization != nil {
			set(EngineOptPrefix+"gpu_memory_utilization", strconv.FormatFloat(*kv.GPUMemoryUtilization, 'g', -1, 64))
		}
		if kv.EnablePrefixCaching != nil {
			set(EngineOptPrefix+"enable_prefix_caching", strconv.FormatBool(*kv.EnablePrefixCaching))
		}
		if kv.NumGPUBlocks != nil {
			// What vLLM resolved at start-up, not an argument given.
			set("kv_num_gpu_blocks", strconv.Itoa(*kv.NumGPUBlocks))
		}
	}
	if h := m.Hardware; h != nil && h.DeviceName != "" {
		run.Hardware = fmt.Sprintf("%dx%s", max(h.DeviceCount, 1), h.DeviceName)
		return nil
	}
	return r.readClusterConfig(filepath.Join(filepath.Dir(dir), "config.json"))
}

// readClusterConfig names the hardware from LLMServingSim's config.json
// (its instances' hardware and NPU count) when meta.json does not.
func (r *vllmEngineReader) readClusterConfig(path string) error {
	b, path, ok, err := readSibling(path, r.maxDoc)
	if !ok {
		return err
	}
	var c struct {
		Nodes []struct {
			Instances []struct {
				Hardware string `json:"hardware"`
				NumNPUs  int    `json:"num_npus"`
			} `json:"instances"`
		} `json:"nodes"`
	}
	if bad := unmarshalAt(b, path, &c); bad != nil {
		return bad
	}
	// The instances of one run serve the one model (DP ranks are
	// instances of their own), so the run's GPUs are all their NPUs.
	hw, npus := "", 0
	for _, n := range c.Nodes {
		for _, in := range n.Instances {
			if hw == "" {
				hw = in.Hardware
			}
			npus += max(in.NumNPUs, 1)
		}
	}
	if hw != "" {
		r.run.Hardware = fmt.Sprintf("%dx%s", npus, hw)
		r.run.Extra["hardware_from"] = path
	}
	return nil
}

// readTimeseries checks timeseries.csv (header t, prompt_throughput,
// gen_throughput, running, waiting, kv_cache_pct) and keeps its peaks in
// the run; a bad line is reported at its position and left out.
func (r *vllmEngineReader) readTimeseries(path string) {
	b, path, ok, err := readSibling(path, r.maxDoc)
	if err != nil && r.err == nil {
		r.err = err
	}
	if !ok {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\r\n"), "\n")
	want := []string{"t", "prompt_throughput", "gen_throughput", "running", "waiting", "kv_cache_pct"}
	if got := strings.Split(strings.TrimSpace(lines[0]), ","); strings.Join(got, ",") != strings.Join(want, ",") {
		r.pending = append(r.pending, &SyntaxError{path, 1, fmt.Sprintf("header: %q, want %q", lines[0], strings.Join(want, ","))})
		return
	}
	var n int
	var maxRun, maxWait, maxKV float64
	for i, l := range lines[1:] {
		f := strings.Split(strings.TrimSpace(l), ",")
		if len(f) != len(want) {
			r.pending = append(r.pending, &SyntaxError{path, i + 2, fmt.Sprintf("%d fields, want %d", len(f), len(want))})
			continue
		}
		var v [6]float64
		bad := ""
		for j, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				bad = fmt.Sprintf("%s: %q is not a non-negative number", want[j], s)
				break
			}
			v[j] = x
		}
		if bad == "" && v[5] > 100 {
			bad = fmt.Sprintf("kv_cache_pct: %v is above 100", v[5])
		}
		if bad != "" {
			r.pending = append(r.pending, &SyntaxError{path, i + 2, bad})
			continue
		}
		n++
		maxRun, maxWait, maxKV = max(maxRun, v[3]), max(maxWait, v[4]), max(maxKV, v[5])
	}
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	e := r.run.Extra
	e["timeseries_file"] = path
	e["timeseries.seconds"] = strconv.Itoa(n)
	e["timeseries.max_running"] = g(maxRun)
	e["timeseries.max_waiting"] = g(maxWait)
	e["timeseries.max_kv_cache_pct"] = g(maxKV)
}
