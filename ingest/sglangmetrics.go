package ingest

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	gojson "github.com/goccy/go-json"

	"github.com/opaltrace/opaltrace/trace"
)

// sglangMetrics reads SGLang's server-side per-request records
// (trace-formats.md §3): the lines of --export-metrics-to-file
// ({"request_parameters": "<JSON string>", **meta_info}) and the
// request.finished events of --log-requests --log-requests-format json
// ({"timestamp", "event", "rid", "obj", "out": {"meta_info"}}), one
// request per line, one run per file. request.received events carry no
// measurement and are skipped.
//
// Epoch timestamps (needs --enable-metrics) become lifecycle times:
// request_received_ts → arrival; forward_entry_time → gpu_start;
// prefill_finished_time → prefill_done; request_finished_ts → decode_done.
// Durations: queue_s = wait_queue_entry − received (tokenizing and
// dispatch; wait_queue_entry = forward_entry − queue_time), schedule_s =
// queue_time (the wait in the scheduler's queue), prefill_s =
// prefill_finished − forward_entry, decode_s = request_finished −
// prefill_finished, ttft_s = prefill_finished − received (server basis),
// e2e_s = e2e_latency (server basis). A difference of epoch times that
// comes out negative (two processes' clocks) is left absent.
// cached_tokens_details {device, host, storage} → tier hit columns.
//
// Note: records are written when requests finish, not when they arrive,
// so the trace's t=0 cannot be the first arrival without reading the file
// twice. It is the first record's arrival rounded down to the hour (the
// exporter rotates files hourly), kept as Run.StartUnixN; a request that
// arrived before it has a negative arrival.
const sglangMetricsName = "sglang-metrics"

var sglangMetrics = Format{
	Name:      sglangMetricsName,
	Sniff:     sniffSGLangMetrics,
	NewReader: newSGLangMetricsReader,
}

func sniffSGLangMetrics(head []byte) bool {
	line := firstLine(head)
	if !startsWith(line, '{') {
		return false
	}
	return bytes.Contains(line, []byte(`"request_parameters"`)) ||
		(bytes.Contains(line, []byte(`"event"`)) && containsAny(line, `"request.received"`, `"request.finished"`))
}

// sglangMetaInfo is SGLang's meta_info, as far as we use it.
type sglangMetaInfo struct {
	ID                  *string             `json:"id"`
	FinishReason        *sglangFinishReason `json:"finish_reason"`
	PromptTokens        *float64            `json:"prompt_tokens"`
	CompletionTokens    *float64            `json:"completion_tokens"`
	ReasoningTokens     *float64            `json:"reasoning_tokens"`
	CachedTokens        *float64            `json:"cached_tokens"`
	CachedTokensDetails *sglangTiers        `json:"cached_tokens_details"`
	NumRetractions      *float64            `json:"num_retractions"`
	E2ELatency          *float64            `json:"e2e_latency"`
	QueueTime           *float64            `json:"queue_time"`
	ForwardEntryTime    *gojson.Number      `json:"forward_entry_time"`
	PrefillFinishedTime *gojson.Number      `json:"prefill_finished_time"`
	RequestReceivedTS   *gojson.Number      `json:"request_received_ts"`
	RequestFinishedTS   *gojson.Number      `json:"request_finished_ts"`
	SpecAcceptLength    *float64            `json:"spec_accept_length"`
}

type sglangFinishReason struct {
	Type string `json:"type"`
}

type sglangTiers struct {
	Device  *float64 `json:"device"`
	Host    *float64 `json:"host"`
	Storage *float64 `json:"storage"`
}

// sglangMetricsLine is one line of either file.
type sglangMetricsLine struct {
	sglangMetaInfo
	RequestParameters *string `json:"request_parameters"`
	// --log-requests-format json
	Event string           `json:"event"`
	RID   string           `json:"rid"`
	Obj   *sglangReqParams `json:"obj"`
	Out   *struct {
		MetaInfo *sglangMetaInfo `json:"meta_info"`
	} `json:"out"`
}

// sglangReqParams is the part of GenerateReqInput we use.
type sglangReqParams struct {
	RID            any `json:"rid"`
	SamplingParams *struct {
		MaxNewTokens *float64 `json:"max_new_tokens"`
	} `json:"sampling_params"`
}

type sglangMetricsReader struct {
	lineRun
	origin int64 // run's t=0, epoch ns; 0 until the first timestamp
}

func newSGLangMetricsReader(r io.Reader, file, run string, opts Options) Reader {
	return &sglangMetricsReader{lineRun: newLineRun(r, file, run, sglangMetricsName, "sglang", opts)}
}

func (r *sglangMetricsReader) Scan() bool {
	for {
		line, ok := r.nextNonBlank()
		if !ok {
			return false
		}
		if r.overLong() {
			return true
		}
		var l sglangMetricsLine
		if err := gojson.Unmarshal(line, &l); err != nil {
			r.cur = r.bad("invalid JSON: " + shortJSONErr(err))
			return true
		}
		if l.Event == "request.received" {
			continue
		}
		meta, params := &l.sglangMetaInfo, l.Obj
		if l.Event != "" {
			if l.Event != "request.finished" {
				continue // other events carry no request measurement
			}
			if l.Out == nil || l.Out.MetaInfo == nil {
				r.cur = r.bad("out.meta_info: missing")
				return true
			}
			meta = l.Out.MetaInfo
			if meta.ID == nil && l.RID != "" {
				meta.ID = &l.RID
			}
		} else if l.RequestParameters != nil {
			params = &sglangReqParams{}
			if err := gojson.Unmarshal([]byte(*l.RequestParameters), params); err != nil {
				r.cur = r.bad("request_parameters: invalid JSON: " + shortJSONErr(err))
				return true
			}
		}
		r.setRequest(r.request(meta, params))
		return true
	}
}

// shortJSONErr trims a decoder error to its first line.
func shortJSONErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func (r *sglangMetricsReader) request(m *sglangMetaInfo, p *sglangReqParams) (*trace.Request, string) {
	q := r.startRequest(stringOr(m.ID))
	q.TTFTBasis, q.E2EBasis = trace.TTFTServer, trace.E2EServer
	q.OutputTokensSource = trace.OutputServerUsage
	if m.FinishReason != nil {
		q.FinishReason = m.FinishReason.Type
		if q.FinishReason == "abort" {
			q.Status = trace.StatusAborted
		}
	}
	counts := []countField{
		{"prompt_tokens", m.PromptTokens, &q.InputTokens},
		{"completion_tokens", m.CompletionTokens, &q.OutputTokens},
		{"reasoning_tokens", m.ReasoningTokens, &q.ReasoningTokens},
		{"cached_tokens", m.CachedTokens, &q.CachedTokens},
		{"num_retractions", m.NumRetractions, &q.Preemptions},
	}
	if d := m.CachedTokensDetails; d != nil {
		counts = append(counts,
			countField{"cached_tokens_details.device", d.Device, &q.DeviceHitTokens},
			countField{"cached_tokens_details.host", d.Host, &q.HostHitTokens},
			countField{"cached_tokens_details.storage", d.Storage, &q.StorageHitTokens})
	}
	if p != nil && p.SamplingParams != nil && p.SamplingParams.MaxNewTokens != nil {
		counts = append(counts, countField{"sampling_params.max_new_tokens", p.SamplingParams.MaxNewTokens, &q.MaxOutputTokens})
	}
	for _, c := range counts {
		if c.v == nil {
			continue
		}
		n, msg := checkCount(*c.v)
		if msg != "" {
			return nil, c.name + ": " + msg
		}
		*c.dst = trace.Some(n)
	}
	durs := []struct {
		name string
		v    *float64
		dst  *trace.Opt[float64]
	}{{"e2e_latency", m.E2ELatency, &q.E2ESec}, {"queue_time", m.QueueTime, &q.ScheduleSec}}
	for _, d := range durs {
		if d.v == nil {
			continue
		}
		if msg := checkSec(*d.v); msg != "" {
			return nil, d.name + ": " + msg
		}
		*d.dst = trace.Some(*d.v)
	}
	// Epoch timestamps: finite and after 1970.
	stamps := []struct {
		name string
		v    *gojson.Number
		dst  *trace.Opt[trace.Time]
	}{
		{"request_received_ts", m.RequestReceivedTS, &q.Arrival},
		{"forward_entry_time", m.ForwardEntryTime, &q.GPUStart},
		{"prefill_finished_time", m.PrefillFinishedTime, &q.PrefillDone},
		{"request_finished_ts", m.RequestFinishedTS, &q.DecodeDone},
	}
	for _, s := range stamps {
		if s.v == nil {
			continue
		}
		ns, ok := epochNS(string(*s.v))
		if !ok {
			return nil, fmt.Sprintf("%s: not an epoch time in seconds (%.30s)", s.name, *s.v)
		}
		if r.origin == 0 {
			r.origin = epochOrigin(ns)
			r.run.StartUnixN = r.origin
		}
		t := trace.Time(ns - r.origin)
		if msg := checkTraceTime(t); msg != "" {
			return nil, s.name + ": " + msg
		}
		*s.dst = trace.Some(t)
	}
	diff := func(a, b trace.Opt[trace.Time]) trace.Opt[float64] {
		if !a.OK || !b.OK || a.V < b.V {
			return trace.Opt[float64]{}
		}
		return trace.Some(a.V.Sub(b.V).Seconds())
	}
	q.PrefillSec = diff(q.PrefillDone, q.GPUStart)
	if q.PrefillSec.OK {
		q.PrefillBasis = trace.PrefillScheduled
	}
	q.DecodeSec = diff(q.DecodeDone, q.PrefillDone)
	q.TTFTSec = diff(q.PrefillDone, q.Arrival)
	if q.GPUStart.OK && q.ScheduleSec.OK {
		waitEntry := trace.Some(q.GPUStart.V.Add(-trace.DurationSeconds(q.ScheduleSec.V)))
		q.QueueSec = diff(waitEntry, q.Arrival)
	}
	if m.SpecAcceptLength != nil {
		r.run.Speculative = true
	}
	if err := q.Validate(); err != nil {
		return nil, err.Error()
	}
	return q, ""
}

// A countField is a token count to check and store.
type countField struct {
	name string
	v    *float64
	dst  *trace.Opt[int64]
}

// maxTraceTime bounds trace times: Parquet keeps them as float64 seconds,
// exact to the nanosecond only within ±104 days of the trace start.
const maxTraceTime = trace.Time(100 * 24 * 3600 * 1e9)

// checkTraceTime checks a trace time is within maxTraceTime of t=0.
func checkTraceTime(t trace.Time) string {
	if t > maxTraceTime || t < -maxTraceTime {
		return fmt.Sprintf("%.0f s from the trace start: more than 100 days", t.Seconds())
	}
	return ""
}

// epochNS converts epoch seconds written as a decimal number to
// nanoseconds exactly: float64 keeps only ~0.2 µs of an epoch time, which
// would show in differences of timestamps.
func epochNS(s string) (int64, bool) {
	ip, fp, dot := strings.Cut(s, ".")
	if len(ip) == 0 || len(ip) > 11 || (dot && len(fp) == 0) {
		return epochNSFloat(s)
	}
	sec, ok := smallInt([]byte(ip))
	if !ok || sec <= 0 {
		return epochNSFloat(s)
	}
	var frac int64
	for i := 0; i < 9; i++ {
		frac *= 10
		if i < len(fp) {
			c := fp[i]
			if c < '0' || c > '9' {
				return epochNSFloat(s)
			}
			frac += int64(c - '0')
		}
	}
	for i := 9; i < len(fp); i++ {
		if fp[i] < '0' || fp[i] > '9' {
			return epochNSFloat(s)
		}
	}
	return sec*1e9 + frac, true
}

// epochNSFloat is epochNS for other spellings (exponents).
func epochNSFloat(s string) (int64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v <= 0 || v > 1e11 {
		return 0, false
	}
	return int64(math.Round(v * 1e9)), true
}

// epochOrigin is the trace origin for a file whose first timestamp is ns
// (epoch nanoseconds): that time rounded down to the hour.
func epochOrigin(ns int64) int64 {
	const hour = int64(3600e9)
	return ns - ns%hour
}
