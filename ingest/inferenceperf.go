package ingest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// inferencePerf reads kubernetes-sigs/inference-perf reports
// (trace-formats.md §6.5), in two shapes:
//
//   - per_request_lifecycle_metrics.json, a JSON array of
//     {stage_id, session_id, scheduled_time, start_time, end_time,
//     request_data (or request), response_data, info, error}, times in
//     perf_counter seconds; one run per stage_id (in order of first
//     appearance), trace time 0 the file's earliest scheduled or start time.
//     TTFT = info's output_token_times[0] − start_time and ITL = the gaps of
//     output_token_times (one per client-counted token), as inference-perf
//     computes them; E2E = end_time − start_time (the whole response). The
//     token times live in info.response_metrics in current versions and in
//     info directly in older ones; both are read. Output tokens are the
//     server's usage.completion_tokens when reported, else the client's
//     count; cached tokens come from usage.prompt_tokens_details.
//   - stage_N_lifecycle_metrics.json, one stage's aggregate report: a
//     summary-only run (no requests) whose Reported is the report, with
//     Stage "stage_N" from the file name.
const inferencePerfName = "inference-perf"

var inferencePerf = Format{
	Name:      inferencePerfName,
	Sniff:     sniffInferencePerf,
	NewReader: newInferencePerfReader,
}

func sniffInferencePerf(head []byte) bool {
	if startsWith(head, '{') {
		return containsAll(head, `"load_summary"`, `"successes"`)
	}
	return startsWith(head, '[') && containsAll(head, `"start_time"`, `"end_time"`, `"info"`) &&
		containsAny(head, `"scheduled_time"`, `"request_data"`, `"request"`)
}

type ipTokenTimes struct {
	OutputTokens     optNum   `json:"output_tokens"`
	OutputTokenTimes []optNum `json:"output_token_times"`
	ServerUsage      *struct {
		PromptTokens        optNum `json:"prompt_tokens"`
		CompletionTokens    optNum `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens optNum `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"server_usage"`
}

type ipRequest struct {
	StageID       optNum  `json:"stage_id"`
	SessionID     *string `json:"session_id"`
	ScheduledTime optNum  `json:"scheduled_time"`
	StartTime     optNum  `json:"start_time"`
	EndTime       optNum  `json:"end_time"`
	RequestData   *string `json:"request_data"`
	Request       *string `json:"request"`
	Info          *struct {
		ipTokenTimes
		RequestMetrics *struct {
			Text *struct {
				InputTokens optNum `json:"input_tokens"`
			} `json:"text"`
		} `json:"request_metrics"`
		ResponseMetrics *ipTokenTimes `json:"response_metrics"`
		InputTokens     optNum        `json:"input_tokens"`
		LoRA            *string       `json:"lora_adapter"`
	} `json:"info"`
	Error *struct {
		Type string `json:"error_type"`
		Msg  string `json:"error_msg"`
	} `json:"error"`
}

func newInferencePerfReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		b = quoteNonFinite(b)
		if startsWith(b, '{') {
			recs, runs := parseInferencePerfStage(b, file, run)
			return recs, runs, nil
		}
		recs, runs := parseInferencePerf(b, file, run)
		return recs, runs, nil
	}}
}

func parseInferencePerfStage(b []byte, file, prefix string) ([]Record, []trace.Run) {
	var s struct {
		LoadSummary *struct {
			Count         optNum `json:"count"`
			RequestedRate optNum `json:"requested_rate"`
		} `json:"load_summary"`
	}
	if bad := unmarshalAt(b, file, &s); bad != nil {
		bad.Msg = "invalid JSON: " + bad.Msg
		return []Record{bad}, nil
	}
	run := trace.Run{Name: prefix + "#1", Source: inferencePerfName, File: file, Reported: compactJSON(b)}
	if m := opalStage.FindStringSubmatch(filepath.ToSlash(file)); m != nil {
		run.Stage = "stage_" + m[1]
	}
	if ls := s.LoadSummary; ls != nil && ls.RequestedRate.Set && ls.RequestedRate.V > 0 {
		run.Workload = &trace.Workload{RequestRate: trace.Rate(ls.RequestedRate.V)}
		if ls.Count.Set && ls.Count.V > 0 && ls.Count.V < 1<<31 {
			run.Workload.NumPrompts = int(ls.Count.V)
		}
	}
	return nil, []trace.Run{run}
}

func parseInferencePerf(b []byte, file, prefix string) ([]Record, []trace.Run) {
	elems, bad := jsonArray(b, file)
	var recs []Record
	if bad != nil {
		recs = append(recs, bad)
	}
	reqs := make([]*ipRequest, len(elems))
	origin := math.Inf(1)
	for i, e := range elems {
		var q ipRequest
		if err := json.Unmarshal(e.raw, &q); err != nil {
			continue // reported below, in order
		}
		reqs[i] = &q
		for _, v := range []optNum{q.ScheduledTime, q.StartTime} {
			if v.Set && finite(v.V) == "" && v.V < origin {
				origin = v.V
			}
		}
	}
	var runs []trace.Run
	runOf := map[string]int{}
	index := map[string]int{}
	for i, e := range elems {
		q := reqs[i]
		if q == nil {
			var v ipRequest
			err := json.Unmarshal(e.raw, &v)
			recs = append(recs, badAt(file, e.line, "[%d]: %v", i, err))
			continue
		}
		stage := ""
		if q.StageID.Set {
			stage = "stage_" + strconv.FormatFloat(q.StageID.V, 'g', -1, 64)
		}
		ri, ok := runOf[stage]
		if !ok {
			ri = len(runs)
			runOf[stage] = ri
			runs = append(runs, trace.Run{Name: fmt.Sprintf("%s#%d", prefix, ri+1), Stage: stage,
				Source: inferencePerfName, File: file})
		}
		run := &runs[ri]
		req := newRequest(run, "", index[stage], file, e.line)
		index[stage]++
		if msg := ipFill(req, q, origin); msg != "" {
			recs = append(recs, badAt(file, e.line, "[%d].%s", i, msg))
			continue
		}
		recs = append(recs, validated(req))
	}
	return recs, runs
}

func ipFill(req *trace.Request, q *ipRequest, origin float64) string {
	req.ITLUnit = trace.ITLToken
	req.TTFTBasis = trace.TTFTFirstText
	req.E2EBasis = trace.E2EStreamEnd
	if q.SessionID != nil {
		req.Session = *q.SessionID
	}
	var fe fieldErr
	if !q.StartTime.Set || !q.EndTime.Set {
		return "start_time, end_time: missing"
	}
	at := func(name string, v optNum) trace.Opt[trace.Time] {
		if !v.Set {
			return trace.Opt[trace.Time]{}
		}
		d := v.V - origin
		if msg := finite(v.V); msg != "" {
			fe.set(name, msg)
		} else if d < 0 || d > 1e9 {
			fe.set(name, fmt.Sprintf("out of range (%v)", v.V))
		}
		return trace.Some(trace.TimeFromSeconds(d))
	}
	req.Arrival = at("start_time", q.StartTime)
	req.IntendedArrival = at("scheduled_time", q.ScheduledTime)
	var msg string
	req.E2ESec, msg = optNum{q.EndTime.V - q.StartTime.V, true}.sec(1)
	fe.set("end_time", msg)
	body := q.RequestData
	if body == nil {
		body = q.Request
	}
	if body != nil {
		var p struct {
			Model     string `json:"model"`
			MaxTokens optNum `json:"max_tokens"`
		}
		if json.Unmarshal([]byte(*body), &p) == nil {
			req.Model = p.Model
			req.MaxOutputTokens, _ = p.MaxTokens.count()
		}
	}
	if q.Error != nil {
		req.Status = trace.StatusFailed
		req.Error = q.Error.Type
		if q.Error.Msg != "" {
			req.Error += ": " + q.Error.Msg
		}
	}
	if in := q.Info; in != nil {
		if in.LoRA != nil {
			req.LoRA = *in.LoRA
		}
		input := in.InputTokens
		if in.RequestMetrics != nil && in.RequestMetrics.Text != nil {
			input = in.RequestMetrics.Text.InputTokens
		}
		req.InputTokens, msg = input.count()
		fe.set("info.input_tokens", msg)
		tt, name := &in.ipTokenTimes, "info"
		if in.ResponseMetrics != nil {
			tt, name = in.ResponseMetrics, "info.response_metrics"
		}
		req.OutputTokens, msg = tt.OutputTokens.count()
		fe.set(name+".output_tokens", msg)
		if req.OutputTokens.OK {
			req.OutputTokensSource = trace.OutputRetokenized
		}
		if u := tt.ServerUsage; u != nil {
			if u.CompletionTokens.Set {
				req.OutputTokens, msg = u.CompletionTokens.count()
				fe.set(name+".server_usage.completion_tokens", msg)
				req.OutputTokensSource = trace.OutputServerUsage
			}
			if u.PromptTokensDetails != nil {
				req.CachedTokens, msg = u.PromptTokensDetails.CachedTokens.count()
				fe.set(name+".server_usage.prompt_tokens_details.cached_tokens", msg)
			}
		}
		if n := len(tt.OutputTokenTimes); n > 0 {
			times := make([]float64, n)
			for j, v := range tt.OutputTokenTimes {
				if !v.Set || finite(v.V) != "" || v.V < q.StartTime.V || (j > 0 && v.V < times[j-1]) {
					fe.set(fmt.Sprintf("%s.output_token_times[%d]", name, j), fmt.Sprintf("out of order or not a time (%v)", v.V))
					break
				}
				times[j] = v.V
			}
			req.TTFTSec, msg = optNum{times[0] - q.StartTime.V, true}.sec(1)
			fe.set(name+".output_token_times[0]", msg)
			req.ITLSec = make([]float64, n-1)
			for j := 1; j < n; j++ {
				req.ITLSec[j-1] = times[j] - times[j-1]
			}
		}
	}
	return fe.msg
}
