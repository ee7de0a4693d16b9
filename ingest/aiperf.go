package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// aiperf reads NVIDIA AIPerf's per-request export, profile_export.jsonl
// (trace-formats.md §6.1): one JSON record per line, {"metadata": {...},
// "metrics": {name: {"value", "unit"}}, "error": null | {...}}. Old
// metadata stamps the request with timestamp_ns, newer with
// request_start_ns (and credit_issued_ns, request_end_ns); both are epoch
// nanoseconds. The aggregate profile_export_aiperf.json beside it, when
// present, becomes the run's Reported summary; read alone, the aggregate
// is a summary-only run (loneSummary).
const aiperfName = "aiperf"

var aiperf = Format{
	Name:      aiperfName,
	Sniff:     sniffAIPerf,
	NewReader: newAIPerfReader,
}

// sniffAIPerf accepts a first line with AIPerf's metadata and metrics
// objects and one of its metadata keys, or the aggregate export.
func sniffAIPerf(head []byte) bool {
	line := firstLine(head)
	return startsWith(line, '{') && containsAll(line, `"metadata"`, `"metrics"`) &&
		containsAny(line, `"x_request_id"`, `"timestamp_ns"`, `"request_start_ns"`, `"credit_phase"`, `"benchmark_phase"`) ||
		sniffAIPerfAggregate(head)
}

type aiperfRecord struct {
	Metadata struct {
		XRequestID     string `json:"x_request_id"`
		ConversationID string `json:"conversation_id"`
		TurnIndex      optNum `json:"turn_index"`
		TimestampNs    *int64 `json:"timestamp_ns"`
		RequestStartNs *int64 `json:"request_start_ns"`
		CreditIssuedNs *int64 `json:"credit_issued_ns"`
		WasCancelled   bool   `json:"was_cancelled"`
	} `json:"metadata"`
	Metrics map[string]struct {
		Value json.RawMessage `json:"value"`
		Unit  string          `json:"unit"`
	} `json:"metrics"`
	Error *struct {
		Code    optNum `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// An aiperfRow is a parsed line waiting for the run's time origin.
type aiperfRow struct {
	req             *trace.Request
	start, intended int64 // epoch ns; 0 when absent
}

// sniffAIPerfAggregate accepts AIPerf's aggregate export: an object of
// records, each with its tag, unit and header.
func sniffAIPerfAggregate(head []byte) bool {
	return startsWith(head, '{') && !containsAll(firstLine(head), `"metadata"`) &&
		containsAll(head, `"records"`, `"tag"`, `"unit"`, `"header"`)
}

// aiperfAggregate reads profile_export_aiperf.json alone.
var aiperfAggregate = loneSummary{
	source: aiperfName, summaryEnd: "_aiperf.json", mainEnd: ".jsonl",
	valid: func(top map[string]json.RawMessage) string {
		if r := bytes.TrimSpace(top["records"]); len(r) == 0 || r[0] != '{' {
			return "records: missing or not an object (AIPerf's aggregate export has its metrics there)"
		}
		return ""
	},
	summarize: aiperfSummary,
	semantics: benchSemantics{itl: trace.ITLChunk, ttft: trace.TTFTFirstText, e2e: trace.E2ELastToken},
}

func newAIPerfReader(r io.Reader, file, run string, opts Options) Reader {
	br := bufio.NewReaderSize(r, SniffLen)
	head, _ := br.Peek(SniffLen)
	if sniffAIPerfAggregate(head) {
		return &batchReader{load: func() ([]Record, []trace.Run, error) {
			b, err := readInput(br, file, opts.maxDocumentBytes())
			if err != nil {
				return nil, nil, err
			}
			recs, runs := aiperfAggregate.read(b, file, run)
			return recs, runs, nil
		}}
	}
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		return readAIPerf(br, file, run, opts)
	}}
}

// readAIPerf parses the lines one at a time, keeping parsed requests only.
//
// Note: AIPerf writes records as they complete, so the earliest request
// start, trace time 0, can be on any line; the parsed requests (not the
// text) are held until the end of the input.
func readAIPerf(r io.Reader, file, runPrefix string, opts Options) ([]Record, []trace.Run, error) {
	run := trace.Run{Name: runPrefix + "#1", Source: aiperfName, File: file}
	b, p, ok, err := siblingFile(file, ".jsonl", "_aiperf.json", opts.maxDocumentBytes())
	if err != nil {
		return nil, nil, err
	}
	var recs []Record
	if ok {
		if bad := aiperfSummary(&run, b, p); bad != nil {
			recs = append(recs, summaryNotKept(bad))
		}
	}
	lr := newLineReader(r, opts.maxLineBytes())
	var rows []aiperfRow
	origin := int64(math.MaxInt64)
	index := 0
	for {
		line, ok := lr.next()
		if !ok {
			break
		}
		if msg := lr.overLong(); msg != "" {
			recs = append(recs, badAt(file, lr.line, "%s", msg))
			index++
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		row, msg := parseAIPerf(&run, line, index, file, lr.line)
		index++
		if msg != "" {
			recs = append(recs, badAt(file, lr.line, "%s", msg))
			continue
		}
		for _, t := range []int64{row.start, row.intended} {
			if t > 0 && t < origin {
				origin = t
			}
		}
		rows = append(rows, row)
		recs = append(recs, nil) // placeholder, filled below in file order
	}
	if lr.err != nil {
		return nil, nil, fmt.Errorf("%s:%d: %w", file, lr.line+1, lr.err)
	}
	if origin != math.MaxInt64 {
		run.StartUnixN = origin
	}
	j := 0
	for i, rec := range recs {
		if rec != nil {
			continue
		}
		row := rows[j]
		j++
		if row.start > 0 {
			row.req.Arrival = trace.Some(trace.Time(row.start - origin))
		}
		if row.intended > 0 {
			row.req.IntendedArrival = trace.Some(trace.Time(row.intended - origin))
		}
		recs[i] = validated(row.req)
	}
	return recs, []trace.Run{run}, nil
}

// aiperfSummary keeps the aggregate export as the run's Reported summary
// and takes the model and the benchmark duration from it.
func aiperfSummary(run *trace.Run, b []byte, path string) *SyntaxError {
	var s struct {
		Records map[string]struct {
			Avg  optNum `json:"avg"`
			Std  optNum `json:"std"`
			Unit string `json:"unit"`
		} `json:"records"`
		InputConfig struct {
			Endpoint struct {
				ModelNames []string `json:"model_names"`
			} `json:"endpoint"`
			Input struct {
				Prompt struct {
					OutputTokens struct {
						Mean optNum `json:"mean"`
					} `json:"output_tokens"`
				} `json:"prompt"`
			} `json:"input"`
			Loadgen struct {
				Concurrency  int    `json:"concurrency"`
				RequestRate  optNum `json:"request_rate"`
				RequestCount int    `json:"request_count"`
			} `json:"loadgen"`
		} `json:"input_config"`
	}
	b = quoteNonFinite(b)
	if bad := unmarshalAt(b, path, &s); bad != nil {
		return bad
	}
	run.Reported = compactJSON(b)
	run.Extra = map[string]string{"summary_file": path}
	if len(s.InputConfig.Endpoint.ModelNames) == 1 {
		run.Model = s.InputConfig.Endpoint.ModelNames[0]
	}
	if d, ok := s.Records["benchmark_duration"]; ok && d.Unit == "sec" && d.Avg.Set && checkSec(d.Avg.V) == "" {
		run.DurationSec = trace.Some(d.Avg.V)
	}
	lg := s.InputConfig.Loadgen
	if lg.Concurrency > 0 || lg.RequestCount > 0 || lg.RequestRate.Set {
		run.Workload = &trace.Workload{Concurrency: lg.Concurrency, NumPrompts: lg.RequestCount}
		if lg.RequestRate.Set {
			run.Workload.RequestRate = trace.Rate(lg.RequestRate.V)
		} else {
			run.Workload.RequestRate = trace.Rate(math.Inf(1))
		}
		// The lengths, so that a summary-only run can be regenerated:
		// the prompt length where every prompt had it (AIPerf's
		// synthetic prompts, --isl with no stddev), the output length
		// asked for (--osl).
		if isl, ok := s.Records["input_sequence_length"]; ok && isl.Unit == "tokens" && isl.Std.Set && isl.Std.V == 0 {
			if n, _ := isl.Avg.count(); n.OK && n.V > 0 {
				run.Workload.InputLen = int(n.V)
			}
		}
		if n, _ := s.InputConfig.Input.Prompt.OutputTokens.Mean.count(); n.OK && n.V > 0 {
			run.Workload.OutputLen = int(n.V)
		}
	}
	return nil
}

// aiperfUnit is how many of each AIPerf time unit make a second.
var aiperfUnit = map[string]float64{"ns": 1e9, "us": 1e6, "ms": 1e3, "sec": 1, "s": 1}

func parseAIPerf(run *trace.Run, line []byte, index int, file string, lineNo int) (aiperfRow, string) {
	var rec aiperfRecord
	if err := json.Unmarshal(quoteNonFinite(line), &rec); err != nil {
		return aiperfRow{}, "invalid JSON: " + err.Error()
	}
	if rec.Metrics == nil && rec.Error == nil {
		return aiperfRow{}, "metrics: missing"
	}
	md := &rec.Metadata
	req := newRequest(run, md.XRequestID, index, file, lineNo)
	req.Session = md.ConversationID
	req.ITLUnit = trace.ITLChunk
	// Verified on the real export: ttft + Σ inter_chunk_latency equals
	// request_latency, so E2E ends at the last content response; AIPerf
	// skips responses without content when it takes the first token.
	req.E2EBasis = trace.E2ELastToken
	req.TTFTBasis = trace.TTFTFirstText
	var fe fieldErr
	var msg string
	req.Turn, msg = md.TurnIndex.count()
	fe.set("metadata.turn_index", msg)
	row := aiperfRow{req: req}
	switch {
	case md.RequestStartNs != nil:
		row.start = *md.RequestStartNs
	case md.TimestampNs != nil:
		row.start = *md.TimestampNs
	}
	if md.CreditIssuedNs != nil {
		row.intended = *md.CreditIssuedNs
	}
	if row.start < 0 || row.intended < 0 {
		fe.set("metadata", "negative timestamp")
	}
	if rec.Error != nil {
		req.Status = trace.StatusFailed
		req.Error = strings.TrimPrefix(rec.Error.Type+": "+rec.Error.Message, ": ")
		if rec.Error.Code.Set {
			req.Error = fmt.Sprintf("%s (code %v)", req.Error, rec.Error.Code.V)
		}
	} else if md.WasCancelled {
		req.Status = trace.StatusAborted
	}

	num := func(name string) (optNum, string, bool) {
		m, ok := rec.Metrics[name]
		if !ok {
			return optNum{}, "", false
		}
		var n optNum
		if err := json.Unmarshal(m.Value, &n); err != nil {
			fe.set("metrics."+name, err.Error())
			return optNum{}, "", false
		}
		return n, m.Unit, true
	}
	dur := func(name string) trace.Opt[float64] {
		n, unit, ok := num(name)
		if !ok {
			return trace.Opt[float64]{}
		}
		scale, ok := aiperfUnit[unit]
		if !ok {
			fe.set("metrics."+name, fmt.Sprintf("unknown time unit %q", unit))
			return trace.Opt[float64]{}
		}
		v, msg := n.sec(scale)
		fe.set("metrics."+name, msg)
		return v
	}
	count := func(name string) trace.Opt[int64] {
		n, _, ok := num(name)
		if !ok {
			return trace.Opt[int64]{}
		}
		v, msg := n.count()
		fe.set("metrics."+name, msg)
		return v
	}
	req.TTFTSec = dur("ttft")
	req.E2ESec = dur("request_latency")
	// The client tokenizer's counts are AIPerf's own; the server's usage
	// fills in when AIPerf recorded only that.
	req.InputTokens = count("input_sequence_length")
	if !req.InputTokens.OK {
		req.InputTokens = count("usage_prompt_tokens")
	}
	req.OutputTokens = count("output_sequence_length") // includes reasoning tokens
	req.OutputTokensSource = trace.OutputRetokenized
	if !req.OutputTokens.OK {
		if req.OutputTokens = count("usage_completion_tokens"); req.OutputTokens.OK {
			req.OutputTokensSource = trace.OutputServerUsage
		}
	}
	if !req.OutputTokens.OK {
		req.OutputTokensSource = ""
	}
	req.ReasoningTokens = count("reasoning_token_count")
	req.CachedTokens = count("usage_prompt_cache_read_tokens")
	if m, ok := rec.Metrics["inter_chunk_latency"]; ok {
		scale, ok := aiperfUnit[m.Unit]
		var gaps []optNum
		switch {
		case !ok:
			fe.set("metrics.inter_chunk_latency", fmt.Sprintf("unknown time unit %q", m.Unit))
		case json.Unmarshal(m.Value, &gaps) != nil:
			fe.set("metrics.inter_chunk_latency", "not an array of numbers")
		default:
			req.ITLSec = make([]float64, len(gaps))
			for i, g := range gaps {
				v, msg := g.sec(scale)
				if msg == "" && !v.OK {
					msg = "null"
				}
				fe.set(fmt.Sprintf("metrics.inter_chunk_latency[%d]", i), msg)
				req.ITLSec[i] = v.V
			}
		}
	}
	if fe.msg != "" {
		return aiperfRow{}, fe.msg
	}
	return row, ""
}
