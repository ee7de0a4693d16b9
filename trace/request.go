package trace

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A Status is the outcome of a request.
type Status string

// The outcomes a request can have.
const (
	StatusOK       Status = "ok"
	StatusFailed   Status = "failed"   // the server or client reported an error
	StatusAborted  Status = "aborted"  // cancelled before completion
	StatusRejected Status = "rejected" // never admitted (e.g. cannot fit in KV memory)
	StatusTimeout  Status = "timeout"  // the client gave up
)

// Source semantics: how the source measured a value. Comparisons of two
// datasets must use the same semantics on both sides.
const (
	ITLChunk = "chunk" // one ITL gap per streamed chunk (vLLM, SGLang OpenAI backends)
	ITLToken = "token" // one ITL gap per token

	E2ELastToken = "last_token" // E2E ends at the last content chunk (newest vLLM)
	E2EStreamEnd = "stream_end" // E2E ends after the stream closes (old vLLM, SGLang)
	E2EServer    = "server"     // measured by the server

	TTFTFirstChunk = "first_chunk" // first SSE message with choices (vLLM)
	TTFTFirstText  = "first_text"  // first non-empty text (SGLang, llmperf)
	TTFTServer     = "server"      // measured by the server

	PrefillScheduled  = "scheduled"  // prefill_s = first token − first scheduled (vLLM time_in_model_prefill)
	PrefillDispatched = "dispatched" // prefill_s = first token − dispatch to the scheduler, queueing included (SGLang OTel)

	OutputServerUsage = "server_usage" // server's usage.completion_tokens
	OutputRetokenized = "retokenized"  // client re-tokenized the generated text
	OutputRequested   = "requested"    // the requested length, not a measurement
)

// A Request is one request of a trace, observed or simulated: one row of
// every opaltrace table. Field groups follow the design's record. Times are
// Time (ns since the trace start); measured durations are float64 seconds
// as the source wrote them. Absent values are zero Opts or nil slices.
//
// Note: observed requests are immutable once read. The replay engine keeps
// its working state privately and emits results as Requests, so analyze
// handles observed and simulated requests with one code path.
type Request struct {
	// Identity.
	RequestID string // the source's id, or a generated "run/index"
	Run       string // label of the run inside the dataset
	Stage     string // stage label inside the run, "" when the run has one stage
	Source    string // input format name, or "simulated"
	Model     string
	LoRA      string
	Worker    string // serving instance that handled it, when known
	// PrefillWorker is, disaggregated, the instance that computed its
	// prompt (Worker is the one that decoded it): the one the router
	// chose; "" otherwise.
	PrefillWorker string
	// RouterScore is the score the router gave the chosen worker, in
	// the router's own units (a simulated replay's cache-aware routers;
	// see replay's router files); absent when the router scores nothing.
	RouterScore Opt[float64]
	Session     string     // conversation or agent session, when known
	Turn        Opt[int64] // index of the request within its session (0-based)

	// Outcome.
	Status       Status
	Error        string
	FinishReason string

	// Shape.
	InputTokens      Opt[int64]
	OutputTokens     Opt[int64]
	ReasoningTokens  Opt[int64] // of OutputTokens, reasoning ("thinking") tokens, when reported
	MaxOutputTokens  Opt[int64] // the requested max_tokens, when known
	CachedTokens     Opt[int64]
	BlockSize        Opt[int64] // tokens per HashIDs entry
	HashIDs          []int64    // prefix block hashes: equal ids mean equal prefixes across the dataset
	DeviceHitTokens  Opt[int64] // prompt tokens found in GPU memory
	HostHitTokens    Opt[int64] // ... in CPU DRAM
	StorageHitTokens Opt[int64] // ... in local storage (NVMe)
	RemoteHitTokens  Opt[int64] // ... in remote/distributed storage

	// Client timing.
	IntendedArrival Opt[Time] // when the workload meant to send
	Arrival         Opt[Time] // when it was sent
	TTFTSec         Opt[float64]
	E2ESec          Opt[float64]
	LastTokenSec    Opt[float64] // send to the last content token, when the source records it apart from E2E (GuideLLM)
	ITLSec          []float64    // one gap per streamed chunk (or token, see ITLUnit)
	ChunkTokens     []int32      // tokens in each chunk, when known
	StreamEvents    Opt[int64]   // streamed events the client received, content or not (GuideLLM request_iterations)
	TokenEvents     Opt[int64]   // streamed events that carried output tokens (GuideLLM token_iterations)
	ThinkSec        Opt[float64] // user think time before this request (sessions)
	ClientQueueSec  Opt[float64] // wait in the client before sending (vLLM queue_times)

	// Server timing.
	QueueSec             Opt[float64]
	ScheduleSec          Opt[float64] // wait in queue until the first forward pass
	IdleInQueueSec       Opt[float64] // of the queue wait, time the scheduler was idle or busy with others (SGLang)
	BudgetWaitSec        Opt[float64] // of the queue wait, time blocked by the token/memory budget (SGLang)
	PrefillSec           Opt[float64] // first forward until the first token
	DecodeSec            Opt[float64]
	KVFetchSec           Opt[float64]
	StoragePrefetchIOSec Opt[float64]
	StoragePrefetchSec   Opt[float64] // whole storage prefetch: allocation + I/O + tree update (SGLang L3_pf_*)
	Preemptions          Opt[int64]

	// Lifecycle, in trace time. The simulator fills all of them.
	Created         Opt[Time]
	RouterArrival   Opt[Time]
	WorkerArrival   Opt[Time]
	StartProcessing Opt[Time]
	Ready           Opt[Time]
	GPUStart        Opt[Time]
	PrefillDone     Opt[Time]
	DecodeDone      Opt[Time]
	DoneAtRouter    Opt[Time]

	// Source semantics.
	ITLUnit            string // ITLChunk or ITLToken
	E2EBasis           string // E2ELastToken, E2EStreamEnd or E2EServer
	TTFTBasis          string // TTFTFirstChunk, TTFTFirstText or TTFTServer
	OutputTokensSource string // OutputServerUsage, OutputRetokenized or OutputRequested
	PrefillBasis       string // PrefillScheduled or PrefillDispatched: what PrefillSec measures

	file string
	line int
}

// Pos returns where the request was read from: file and line (for JSON
// arrays, the element index). Line 0 means unknown.
func (r *Request) Pos() (file string, line int) { return r.file, r.line }

// SetPos records where the request was read from.
func (r *Request) SetPos(file string, line int) { r.file, r.line = file, line }

// OK reports whether the request completed successfully.
func (r *Request) OK() bool { return r.Status == StatusOK }

// Clone returns a deep copy of r.
func (r *Request) Clone() *Request {
	c := *r
	c.HashIDs = cloneSlice(r.HashIDs)
	c.ITLSec = cloneSlice(r.ITLSec)
	c.ChunkTokens = cloneSlice(r.ChunkTokens)
	return &c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// Validate checks the invariants every reader and the simulator guarantee.
func (r *Request) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	for _, f := range []struct{ name, v string }{
		{"request_id", r.RequestID}, {"run", r.Run}, {"stage", r.Stage}, {"source", r.Source}, {"model", r.Model},
		{"lora", r.LoRA}, {"worker", r.Worker}, {"prefill_worker", r.PrefillWorker}, {"session", r.Session}, {"error", r.Error}, {"finish_reason", r.FinishReason},
	} {
		if len(f.v) > MaxStringBytes {
			bad(f.name, "%d bytes, more than the limit of %d", len(f.v), MaxStringBytes)
		}
	}
	switch r.Status {
	case StatusOK, StatusFailed, StatusAborted, StatusRejected, StatusTimeout:
	default:
		bad("status", "unknown status %q", r.Status)
	}
	for _, f := range []struct {
		name   string
		v      Opt[int64]
		tokens bool // a token count, bounded by MaxTokens
	}{
		{"input_tokens", r.InputTokens, true}, {"output_tokens", r.OutputTokens, true},
		{"reasoning_tokens", r.ReasoningTokens, true}, {"max_output_tokens", r.MaxOutputTokens, true},
		{"cached_tokens", r.CachedTokens, true}, {"device_hit_tokens", r.DeviceHitTokens, true},
		{"host_hit_tokens", r.HostHitTokens, true}, {"storage_hit_tokens", r.StorageHitTokens, true},
		{"remote_hit_tokens", r.RemoteHitTokens, true},
		{"stream_events", r.StreamEvents, false}, {"token_events", r.TokenEvents, false}, {"turn", r.Turn, false},
		{"preemptions", r.Preemptions, false},
	} {
		switch {
		case !f.v.OK:
		case f.v.V < 0:
			bad(f.name, "negative (%d)", f.v.V)
		case f.tokens && f.v.V > MaxTokens:
			bad(f.name, "%d tokens is more than the limit of %d", f.v.V, MaxTokens)
		}
	}
	if r.BlockSize.OK && r.BlockSize.V <= 0 {
		bad("block_size", "not positive (%d)", r.BlockSize.V)
	}
	if len(r.HashIDs) > 0 && !r.BlockSize.OK {
		bad("hash_ids", "present without block_size")
	}
	for _, f := range []struct {
		name string
		v    Opt[float64]
		max  float64
	}{
		{"ttft_s", r.TTFTSec, MaxLatencySec}, {"e2e_s", r.E2ESec, MaxLatencySec}, {"last_token_s", r.LastTokenSec, MaxLatencySec},
		{"think_s", r.ThinkSec, MaxThinkSec}, {"client_queue_s", r.ClientQueueSec, MaxThinkSec},
		{"idle_in_queue_s", r.IdleInQueueSec, MaxLatencySec}, {"budget_wait_s", r.BudgetWaitSec, MaxLatencySec},
		{"storage_prefetch_s", r.StoragePrefetchSec, MaxLatencySec},
		{"queue_s", r.QueueSec, MaxLatencySec}, {"schedule_s", r.ScheduleSec, MaxLatencySec}, {"prefill_s", r.PrefillSec, MaxLatencySec},
		{"decode_s", r.DecodeSec, MaxLatencySec}, {"kv_fetch_s", r.KVFetchSec, MaxLatencySec},
		{"router_score", r.RouterScore, math.MaxFloat64}, // a score, not seconds: finite and not negative
		{"storage_prefetch_io_s", r.StoragePrefetchIOSec, MaxLatencySec},
	} {
		if !f.v.OK {
			continue
		}
		switch v := f.v.V; {
		case math.IsNaN(v) || math.IsInf(v, 0):
			bad(f.name, "not finite (%v)", v)
		case v < 0:
			bad(f.name, "negative (%v)", v)
		case v >= f.max:
			bad(f.name, "%v s is not under the limit of %v s", v, f.max)
		}
	}
	itlSum := 0.0
	for i, g := range r.ITLSec {
		if math.IsNaN(g) || math.IsInf(g, 0) || g < 0 || g >= MaxLatencySec {
			bad("itl_s", "gap %d is %v (want a finite gap in [0, %v) s)", i, g, MaxLatencySec)
			itlSum = math.NaN()
			break
		}
		itlSum += g
	}
	for _, f := range []struct {
		name string
		v    Opt[Time]
	}{
		{"intended_arrival_s", r.IntendedArrival}, {"arrival_s", r.Arrival},
		{"created_s", r.Created}, {"router_arrival_s", r.RouterArrival}, {"worker_arrival_s", r.WorkerArrival},
		{"start_processing_s", r.StartProcessing}, {"ready_s", r.Ready}, {"gpu_start_s", r.GPUStart},
		{"prefill_done_s", r.PrefillDone}, {"decode_done_s", r.DecodeDone}, {"done_at_router_s", r.DoneAtRouter},
	} {
		if f.v.OK && (f.v.V > MaxTraceTime || f.v.V < -MaxTraceTime) {
			bad(f.name, "%.0f s from the trace start: more than %.0f s (10 years) away", f.v.V.Seconds(), MaxTraceTime.Seconds())
		}
	}
	if msg := r.latencyConsistency(itlSum); msg != "" {
		errs = append(errs, errors.New(msg))
	}
	if r.ChunkTokens != nil && len(r.ChunkTokens) != len(r.ITLSec)+1 && len(r.ChunkTokens) != len(r.ITLSec) {
		bad("chunk_tokens", "%d entries for %d ITL gaps", len(r.ChunkTokens), len(r.ITLSec))
	}
	return errors.Join(errs...)
}

// latencyConsistency checks that the parts of the client latency fit in
// the whole: TTFT ≤ E2E and TTFT + ΣITL ≤ E2E (E2E may end after the last
// token, at the stream's end, so only the overshoot is wrong), within
// ConsistencyTolSec + ConsistencyTolRel·E2E of rounding. itlSum is ΣITL, NaN
// when a gap is bad (already reported). It returns "" when consistent or
// when a value is missing or bad.
//
// Note: when both TTFT and E2E are server-side (TTFTServer and E2EServer)
// the check does not apply: a server may time them from different points
// (Opal's TTFT counts from the request's creation, its E2E from the worker's
// arrival), so TTFT > E2E there is the source's definition, which the
// reader warns of, not a corrupt record.
func (r *Request) latencyConsistency(itlSum float64) string {
	if r.TTFTBasis == TTFTServer && r.E2EBasis == E2EServer {
		return ""
	}
	if !r.E2ESec.OK || !r.TTFTSec.OK || checkLatency(r.E2ESec.V) || checkLatency(r.TTFTSec.V) {
		return ""
	}
	e2e, ttft := r.E2ESec.V, r.TTFTSec.V
	tol := ConsistencyTolSec + ConsistencyTolRel*e2e
	if ttft > e2e+tol {
		return fmt.Sprintf("ttft_s: %v s is more than e2e_s (%v s)", ttft, e2e)
	}
	if len(r.ITLSec) > 0 && !math.IsNaN(itlSum) && ttft+itlSum > e2e+tol {
		return fmt.Sprintf("itl_s: ttft_s + the %d gaps is %v s, more than e2e_s (%v s)", len(r.ITLSec), ttft+itlSum, e2e)
	}
	return ""
}

// checkLatency reports whether v is not a valid latency.
func checkLatency(v float64) bool {
	return math.IsNaN(v) || v < 0 || v >= MaxLatencySec
}

// String returns a canonical one-line dump of r: every present field as
// name=value in schema order. Golden files compare this, never Parquet bytes.
func (r *Request) String() string {
	var b strings.Builder
	kv := func(name, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(v)
	}
	str := func(name, v string) {
		if v != "" {
			kv(name, strconv.Quote(v))
		}
	}
	i64 := func(name string, v Opt[int64]) {
		if v.OK {
			kv(name, strconv.FormatInt(v.V, 10))
		}
	}
	f64 := func(name string, v Opt[float64]) {
		if v.OK {
			kv(name, strconv.FormatFloat(v.V, 'g', -1, 64))
		}
	}
	tm := func(name string, v Opt[Time]) {
		if v.OK {
			kv(name, strconv.FormatFloat(v.V.Seconds(), 'f', 9, 64))
		}
	}
	str("request_id", r.RequestID)
	str("run", r.Run)
	str("stage", r.Stage)
	str("source", r.Source)
	str("model", r.Model)
	str("lora", r.LoRA)
	str("worker", r.Worker)
	str("prefill_worker", r.PrefillWorker)
	str("session", r.Session)
	i64("turn", r.Turn)
	str("status", string(r.Status))
	str("error", r.Error)
	str("finish_reason", r.FinishReason)
	i64("input_tokens", r.InputTokens)
	i64("output_tokens", r.OutputTokens)
	i64("reasoning_tokens", r.ReasoningTokens)
	i64("max_output_tokens", r.MaxOutputTokens)
	i64("cached_tokens", r.CachedTokens)
	i64("block_size", r.BlockSize)
	if r.HashIDs != nil {
		kv("hash_ids", fmt.Sprint(r.HashIDs))
	}
	i64("device_hit_tokens", r.DeviceHitTokens)
	i64("host_hit_tokens", r.HostHitTokens)
	i64("storage_hit_tokens", r.StorageHitTokens)
	i64("remote_hit_tokens", r.RemoteHitTokens)
	tm("intended_arrival_s", r.IntendedArrival)
	tm("arrival_s", r.Arrival)
	f64("ttft_s", r.TTFTSec)
	f64("e2e_s", r.E2ESec)
	f64("last_token_s", r.LastTokenSec)
	if r.ITLSec != nil {
		parts := make([]string, len(r.ITLSec))
		for i, g := range r.ITLSec {
			parts[i] = strconv.FormatFloat(g, 'g', -1, 64)
		}
		kv("itl_s", "["+strings.Join(parts, " ")+"]")
	}
	if r.ChunkTokens != nil {
		kv("chunk_tokens", fmt.Sprint(r.ChunkTokens))
	}
	i64("stream_events", r.StreamEvents)
	i64("token_events", r.TokenEvents)
	f64("think_s", r.ThinkSec)
	f64("client_queue_s", r.ClientQueueSec)
	f64("queue_s", r.QueueSec)
	f64("schedule_s", r.ScheduleSec)
	f64("idle_in_queue_s", r.IdleInQueueSec)
	f64("budget_wait_s", r.BudgetWaitSec)
	f64("prefill_s", r.PrefillSec)
	f64("decode_s", r.DecodeSec)
	f64("kv_fetch_s", r.KVFetchSec)
	f64("storage_prefetch_io_s", r.StoragePrefetchIOSec)
	f64("storage_prefetch_s", r.StoragePrefetchSec)
	i64("preemptions", r.Preemptions)
	tm("created_s", r.Created)
	tm("router_arrival_s", r.RouterArrival)
	tm("worker_arrival_s", r.WorkerArrival)
	tm("start_processing_s", r.StartProcessing)
	tm("ready_s", r.Ready)
	tm("gpu_start_s", r.GPUStart)
	tm("prefill_done_s", r.PrefillDone)
	tm("decode_done_s", r.DecodeDone)
	tm("done_at_router_s", r.DoneAtRouter)
	str("itl_unit", r.ITLUnit)
	str("e2e_basis", r.E2EBasis)
	str("ttft_basis", r.TTFTBasis)
	str("output_tokens_source", r.OutputTokensSource)
	str("prefill_basis", r.PrefillBasis)
	f64("router_score", r.RouterScore)
	return b.String()
}
