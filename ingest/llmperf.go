package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// llmperf reads ray-project/llmperf's {model}_{in}_{out}_individual_responses.json
// (trace-formats.md §6.4): a JSON array of per-request objects with
// error_code, error_msg, ttft_s, end_to_end_latency_s,
// inter_token_latency_s, number_input_tokens, number_output_tokens. One run
// per file; its *_summary.json beside it becomes the run's Reported.
//
// Note: llmperf records no timestamps, so Arrival stays absent (not 0),
// and its inter_token_latency_s is Σ(all gaps, TTFT included)/output tokens,
// which is neither our ITL nor our TPOT: it is not stored per request (it
// equals E2E/output tokens up to rounding, both of which are kept).
const llmperfName = "llmperf"

var llmperf = Format{
	Name:      llmperfName,
	Sniff:     sniffLLMPerf,
	NewReader: newLLMPerfReader,
}

// sniffLLMPerf accepts a JSON array whose first object has llmperf's keys,
// or llmperf's *_summary.json (an object of results_* keys). The summary
// is read with the responses file it belongs to; alone, it is a
// summary-only run (loneSummary).
func sniffLLMPerf(head []byte) bool {
	return startsWith(head, '[') &&
		containsAll(head, `"end_to_end_latency_s"`, `"ttft_s"`, `"number_input_tokens"`) ||
		sniffLLMPerfSummary(head)
}

func sniffLLMPerfSummary(head []byte) bool {
	return startsWith(head, '{') && containsAll(head, `"num_concurrent_requests"`, `"results_`) &&
		containsAny(head, `"results_ttft_s_mean"`, `"results_end_to_end_latency_s_mean"`, `"results_num_completed_requests"`)
}

// llmperfLone reads a *_summary.json alone.
var llmperfLone = loneSummary{
	source: llmperfName, summaryEnd: "_summary.json", mainEnd: "_individual_responses.json",
	valid: func(top map[string]json.RawMessage) string {
		for k := range top {
			if strings.HasPrefix(k, "results_") {
				return ""
			}
		}
		return "no results_* key: not llmperf's summary"
	},
	summarize: llmperfSummary,
	// No ITL: llmperf's is not one (see above).
	semantics: benchSemantics{ttft: trace.TTFTFirstText, e2e: trace.E2EStreamEnd, outputs: trace.OutputRetokenized},
}

type llmperfRecord struct {
	ErrorCode    optNum  `json:"error_code"`
	ErrorMsg     *string `json:"error_msg"`
	TTFT         optNum  `json:"ttft_s"`
	E2E          optNum  `json:"end_to_end_latency_s"`
	InputTokens  optNum  `json:"number_input_tokens"`
	OutputTokens optNum  `json:"number_output_tokens"`
}

func newLLMPerfReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
			recs, runs := llmperfLone.read(b, file, run)
			return recs, runs, nil
		}
		return parseLLMPerf(b, file, run, opts.maxDocumentBytes())
	}}
}

func parseLLMPerf(b []byte, file, prefix string, maxDoc int64) ([]Record, []trace.Run, error) {
	run := trace.Run{Name: prefix + "#1", Source: llmperfName, File: file,
		Extra: map[string]string{"inter_token_latency_s": "sum of all gaps including TTFT / output tokens; not stored"}}
	s, p, ok, err := siblingFile(file, "_individual_responses.json", "_summary.json", maxDoc)
	if err != nil {
		return nil, nil, err
	}
	var recs []Record
	if ok {
		if bad := llmperfSummary(&run, s, p); bad != nil {
			recs = append(recs, summaryNotKept(bad))
		}
	}
	elems, bad := jsonArray(quoteNonFinite(b), file)
	if bad != nil {
		return append(recs, bad), []trace.Run{run}, nil
	}
	recs = slices.Grow(recs, len(elems))
	for i, e := range elems {
		var rec llmperfRecord
		if err := json.Unmarshal(e.raw, &rec); err != nil {
			recs = append(recs, badAt(file, e.line, "[%d]: %v", i, err))
			continue
		}
		req := newRequest(&run, "", i, file, e.line)
		req.ITLUnit = ""
		req.TTFTBasis = trace.TTFTFirstText // first non-empty delta
		req.E2EBasis = trace.E2EStreamEnd   // after the stream loop
		req.OutputTokensSource = trace.OutputRetokenized
		var fe fieldErr
		var msg string
		if rec.ErrorCode.Set {
			req.Status = trace.StatusFailed
			req.Error = fmt.Sprintf("error %v", rec.ErrorCode.V)
			if rec.ErrorMsg != nil && *rec.ErrorMsg != "" {
				req.Error += ": " + *rec.ErrorMsg
			}
		}
		req.InputTokens, msg = rec.InputTokens.count()
		fe.set("number_input_tokens", msg)
		req.OutputTokens, msg = rec.OutputTokens.count()
		fe.set("number_output_tokens", msg)
		req.TTFTSec, msg = rec.TTFT.sec(1)
		fe.set("ttft_s", msg)
		req.E2ESec, msg = rec.E2E.sec(1)
		fe.set("end_to_end_latency_s", msg)
		if req.Status != trace.StatusOK {
			// llmperf fills a failed request's metrics with 0s it
			// never measured.
			for _, o := range []*trace.Opt[float64]{&req.TTFTSec, &req.E2ESec} {
				if o.OK && o.V == 0 {
					*o = trace.Opt[float64]{}
				}
			}
			if req.OutputTokens.OK && req.OutputTokens.V == 0 {
				req.OutputTokens = trace.Opt[int64]{}
			}
		}
		if fe.msg != "" {
			recs = append(recs, badAt(file, e.line, "[%d].%s", i, fe.msg))
			continue
		}
		recs = append(recs, validated(req))
	}
	return recs, []trace.Run{run}, nil
}

// llmperfSummary keeps the summary as Reported, with its model and
// concurrency.
func llmperfSummary(run *trace.Run, b []byte, path string) *SyntaxError {
	var s struct {
		Model       string `json:"model"`
		Concurrency int    `json:"num_concurrent_requests"`
		InputLen    optNum `json:"mean_input_tokens"`
		OutputLen   optNum `json:"mean_output_tokens"`
	}
	b = quoteNonFinite(b)
	if bad := unmarshalAt(b, path, &s); bad != nil {
		return bad
	}
	run.Reported = compactJSON(b)
	run.Extra["summary_file"] = path
	run.Model = s.Model
	run.Workload = &trace.Workload{Concurrency: s.Concurrency, RequestRate: trace.Rate(math.Inf(1))}
	if s.InputLen.Set && s.InputLen.V >= 0 && s.InputLen.V < 1<<31 {
		run.Workload.InputLen = int(s.InputLen.V)
	}
	if s.OutputLen.Set && s.OutputLen.V >= 0 && s.OutputLen.V < 1<<31 {
		run.Workload.OutputLen = int(s.OutputLen.V)
	}
	return nil
}
