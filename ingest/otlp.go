package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/opaltrace/opaltrace/trace"
)

// otlp reads OpenTelemetry spans in OTLP/JSON as an OpenTelemetry
// Collector's file exporter writes them (one ExportTraceServiceRequest per
// line), decoded with the collector's pdata (trace-formats.md §4.2, §5).
// A request is a vLLM llm_request span or an SGLang root request span
// (module "sglang::request", name "… Req …"); other spans (SGLang's
// slices, thread spans, anything else) are not requests and are skipped.
//
// Both engines use the gen_ai.* attribute names but measure differently:
//   - vLLM: time_to_first_token and e2e from the frontend's arrival;
//     time_in_queue = scheduled − queued; time_in_model_prefill = first
//     token − scheduled → prefill_s; time_in_model_decode → decode_s.
//   - SGLang: time_to_first_token = first token − created, e2e = finished −
//     created, time_in_model_decode = finished − first token → decode_s; its
//     time_in_model_prefill (first token − dispatch) includes the wait in
//     the scheduler's queue and has no time_in_queue beside it: prefill_s
//     with prefill_basis "dispatched" (vLLM's: "scheduled").
//
// TTFT and E2E have server basis; outputs are the server's usage. A
// request's worker is the instance that exported its span, when its
// resource names one (otlpInstanceKeys), so that a fleet's spans gathered
// by one collector keep their placement (stats --by worker, router
// recorded). The span start (arrival, epoch ns) is the arrival; t=0 is the first span's start
// rounded down to the hour (spans are exported when requests finish, so
// the first line need not hold the first arrival). One run per file, with
// the engine the spans name.
const otlpName = "otlp"

var otlp = Format{
	Name:      otlpName,
	Sniff:     sniffOTLP,
	NewReader: newOTLPReader,
}

func sniffOTLP(head []byte) bool {
	line := firstLine(head)
	return startsWith(line, '{') && bytes.Contains(line, []byte(`"resourceSpans"`))
}

type otlpReader struct {
	lineRun
	origin  int64
	pending []Record
}

func newOTLPReader(r io.Reader, file, run string, opts Options) Reader {
	return &otlpReader{lineRun: newLineRun(r, file, run, otlpName, "", opts)}
}

func (r *otlpReader) Scan() bool {
	for len(r.pending) == 0 {
		line, ok := r.nextNonBlank()
		if !ok {
			return false
		}
		if r.overLong() {
			return true
		}
		r.readLine(line)
	}
	r.cur, r.pending = r.pending[0], r.pending[1:]
	return true
}

var otlpUnmarshaler = &ptrace.JSONUnmarshaler{}

func (r *otlpReader) readLine(line []byte) {
	bad := func(format string, args ...any) {
		r.pending = append(r.pending, r.bad(fmt.Sprintf(format, args...)))
	}
	// pdata is lenient about what it does not know; check the line is one
	// JSON object first, so that garbage is reported, not read as empty.
	if !json.Valid(line) || line[0] != '{' {
		bad("invalid JSON: not one JSON object")
		return
	}
	td, err := otlpUnmarshaler.UnmarshalTraces(line)
	if err != nil {
		bad("invalid OTLP/JSON: %s", shortJSONErr(err))
		return
	}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		worker := otlpInstance(rss.At(i).Resource().Attributes())
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				engine := otlpEngine(ss.Scope().Name(), sp)
				if engine == "" {
					continue
				}
				q, msg := r.request(sp, engine)
				if msg != "" {
					bad("span %s: %s", sp.SpanID(), msg)
					continue
				}
				q.Worker = worker
				r.pending = append(r.pending, q)
			}
		}
	}
}

// otlpInstanceKeys are the resource attributes that name the instance
// that exported a span, in the order they are taken: the SDK's
// service.instance.id (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_INSTANCE_ID)
// and the pod the collector's k8sattributes processor names. Not
// host.name: a collector's resourcedetection processor gives the
// collector's own host, the same for every instance behind it.
var otlpInstanceKeys = []string{"service.instance.id", "k8s.pod.name"}

// otlpInstance returns the instance attrs name (otlpInstanceKeys), or "".
func otlpInstance(attrs pcommon.Map) string {
	for _, k := range otlpInstanceKeys {
		if v, ok := attrs.Get(k); ok && v.AsString() != "" {
			return v.AsString()
		}
	}
	return ""
}

// otlpEngine names the engine whose request span sp is, "" when sp is not
// a request span.
func otlpEngine(scope string, sp ptrace.Span) string {
	attrs := sp.Attributes()
	if m, ok := attrs.Get("module"); ok && m.Str() == "sglang::request" {
		return "sglang"
	}
	if sp.Name() == "llm_request" {
		return "vllm"
	}
	if sp.ParentSpanID().IsEmpty() && strings.Contains(sp.Name(), "Req ") {
		if _, ok := attrs.Get("rid"); ok {
			return "sglang"
		}
	}
	return ""
}

func (r *otlpReader) request(sp ptrace.Span, engine string) (*trace.Request, string) {
	switch {
	case r.run.Engine == "":
		r.run.Engine = engine
	case r.run.Engine != engine:
		return nil, fmt.Sprintf("a %s request span in a run of %s spans", engine, r.run.Engine)
	}
	attrs := sp.Attributes()
	str := func(k string) string {
		if v, ok := attrs.Get(k); ok {
			return v.AsString()
		}
		return ""
	}
	id := str("gen_ai.request.id")
	if id == "" {
		id = str("rid")
	}
	q := r.startRequest(id)
	r.row++
	q.TTFTBasis, q.E2EBasis = trace.TTFTServer, trace.E2EServer
	q.OutputTokensSource = trace.OutputServerUsage
	q.Model = str("gen_ai.response.model")
	if fr := str("gen_ai.response.finish_reasons"); fr != "" {
		var list []string
		if json.Unmarshal([]byte(fr), &list) == nil && len(list) > 0 {
			q.FinishReason = list[0]
		} else {
			q.FinishReason = fr
		}
		if q.FinishReason == "abort" {
			q.Status = trace.StatusAborted
		}
	}
	if sp.Status().Code() == ptrace.StatusCodeError {
		q.Status, q.Error = trace.StatusFailed, sp.Status().Message()
		if q.Error == "" {
			q.Error = "span status error"
		}
	}
	num := func(k string) (float64, bool, string) {
		v, ok := attrs.Get(k)
		if !ok {
			return 0, false, ""
		}
		switch v.Type() {
		case pcommon.ValueTypeDouble:
			return v.Double(), true, ""
		case pcommon.ValueTypeInt:
			return float64(v.Int()), true, ""
		}
		return 0, false, fmt.Sprintf("%s: not a number (%s)", k, v.Type())
	}
	for _, c := range []struct {
		k   string
		dst *trace.Opt[int64]
	}{
		{"gen_ai.usage.prompt_tokens", &q.InputTokens}, {"gen_ai.usage.completion_tokens", &q.OutputTokens},
		{"gen_ai.usage.cached_tokens", &q.CachedTokens}, {"gen_ai.request.max_tokens", &q.MaxOutputTokens},
	} {
		v, ok, msg := num(c.k)
		if msg != "" {
			return nil, msg
		}
		if !ok {
			continue
		}
		n, msg := checkCount(v)
		if msg != "" {
			return nil, c.k + ": " + msg
		}
		*c.dst = trace.Some(n)
	}
	durs := []struct {
		k   string
		dst *trace.Opt[float64]
	}{
		{"gen_ai.latency.time_to_first_token", &q.TTFTSec}, {"gen_ai.latency.e2e", &q.E2ESec},
		{"gen_ai.latency.time_in_model_decode", &q.DecodeSec},
	}
	durs = append(durs, struct {
		k   string
		dst *trace.Opt[float64]
	}{"gen_ai.latency.time_in_model_prefill", &q.PrefillSec})
	if engine == "vllm" {
		durs = append(durs, struct {
			k   string
			dst *trace.Opt[float64]
		}{"gen_ai.latency.time_in_queue", &q.QueueSec})
	}
	q.PrefillBasis = trace.PrefillScheduled
	if engine == "sglang" {
		q.PrefillBasis = trace.PrefillDispatched
	}
	for _, d := range durs {
		v, ok, msg := num(d.k)
		if msg != "" {
			return nil, msg
		}
		if !ok {
			continue
		}
		if msg := checkSec(v); msg != "" {
			return nil, d.k + ": " + msg
		}
		*d.dst = trace.Some(v)
	}
	if st := int64(sp.StartTimestamp()); st > 0 {
		if r.origin == 0 {
			r.origin = epochOrigin(st)
			r.run.StartUnixN = r.origin
		}
		t := trace.Time(st - r.origin)
		if msg := checkTraceTime(t); msg != "" {
			return nil, "startTimeUnixNano: " + msg
		}
		q.Arrival = trace.Some(t)
	}
	if err := q.Validate(); err != nil {
		return nil, err.Error()
	}
	return q, ""
}
