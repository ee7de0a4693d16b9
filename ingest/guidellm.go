package ingest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// guidellm reads GuideLLM's benchmarks.json (trace-formats.md §6.3), one
// run per element of "benchmarks", in two layouts:
//
//   - 0.5: per request request_start_time/request_end_time (epoch s),
//     request_latency (s), time_to_first_token_ms, prompt_tokens,
//     output_tokens, info.timings.targeted_start, info.error, and
//     request_args (the HTTP body as a JSON string, for max_tokens),
//     info.timings.request_iterations and token_iterations (StreamEvents,
//     TokenEvents);
//   - 0.2–0.3: per request start_time, end_time, first_token_time,
//     last_token_time (epoch s), scheduler_info.targeted_start_time and,
//     for errored requests, error.
//
// requests.successful are ok, requests.errored failed and
// requests.incomplete (cancelled when the benchmark ended) aborted; all are
// kept. Arrival is request start − the run's earliest start or targeted
// start; IntendedArrival the targeted start; TTFT the file's
// time_to_first_token_ms (first iteration with tokens); E2E its
// request_latency (to the end of the response). GuideLLM's per-request
// "inter_token_latency_ms" is (last − first token)/(output − 1): its last
// token time (info.timings.last_token_iteration or last_token_time) minus
// the request start is LastTokenSec, from which analyze rebuilds it;
// GuideLLM has no per-chunk gaps. The benchmark without its
// requests is the run's Reported.
const guideLLMName = "guidellm"

// GuideLLMOriginKey is the Run.Extra key holding a GuideLLM run's time
// origin as the exact epoch seconds float of the file (shortest decimal that reads back exactly).
const GuideLLMOriginKey = "time_origin_unix_s"

var guideLLM = Format{
	Name:      guideLLMName,
	Sniff:     sniffGuideLLM,
	NewReader: newGuideLLMReader,
}

func sniffGuideLLM(head []byte) bool {
	return startsWith(head, '{') && containsAll(head, `"benchmarks"`) &&
		containsAny(head, `"guidellm_version"`, `"generative_benchmark"`, `"scheduler_metrics"`, `"run_stats"`)
}

type guideLLMRequest struct {
	RequestID string `json:"request_id"`
	// 0.5
	RequestStart optNum `json:"request_start_time"`
	Latency      optNum `json:"request_latency"`
	TTFTms       optNum `json:"time_to_first_token_ms"`
	PromptTokens optNum `json:"prompt_tokens"`
	OutputTokens optNum `json:"output_tokens"`
	RequestArgs  string `json:"request_args"`
	Info         *struct {
		Timings struct {
			TargetedStart optNum `json:"targeted_start"`
			LastToken     optNum `json:"last_token_iteration"`
			// 0.4+: streamed events received / events with output tokens.
			RequestIterations optNum `json:"request_iterations"`
			TokenIterations   optNum `json:"token_iterations"`
		} `json:"timings"`
		Error *string `json:"error"`
	} `json:"info"`
	// 0.2–0.3
	StartTime      optNum `json:"start_time"`
	EndTime        optNum `json:"end_time"`
	FirstTokenTime optNum `json:"first_token_time"`
	LastTokenTime  optNum `json:"last_token_time"`
	SchedulerInfo  *struct {
		TargetedStart optNum `json:"targeted_start_time"`
	} `json:"scheduler_info"`
	Error *string `json:"error"`
}

// start returns the epoch time the request was sent, and its targeted
// start.
func (q *guideLLMRequest) start() (optNum, optNum) {
	s, t := q.RequestStart, optNum{}
	if !s.Set {
		s = q.StartTime
	}
	if q.Info != nil {
		t = q.Info.Timings.TargetedStart
	} else if q.SchedulerInfo != nil {
		t = q.SchedulerInfo.TargetedStart
	}
	return s, t
}

type guideLLMStrategy struct {
	Type           string `json:"type_"`
	Rate           optNum `json:"rate"`
	MaxConcurrency optNum `json:"max_concurrency"`
	Streams        optNum `json:"streams"`
}

func newGuideLLMReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		recs, runs := parseGuideLLM(b, file, run)
		return recs, runs, nil
	}}
}

func parseGuideLLM(b []byte, file, prefix string) ([]Record, []trace.Run) {
	b = quoteNonFinite(b)
	var doc struct {
		Metadata *struct {
			Version string `json:"guidellm_version"`
		} `json:"metadata"`
		Args *struct {
			Model                 string `json:"model"`
			PreferResponseMetrics *bool  `json:"prefer_response_metrics"`
		} `json:"args"`
		Benchmarks []json.RawMessage `json:"benchmarks"`
	}
	if bad := unmarshalAt(b, file, &doc); bad != nil {
		bad.Msg = "invalid JSON: " + bad.Msg
		return []Record{bad}, nil
	}
	var recs []Record
	var runs []trace.Run
	for bi, raw := range doc.Benchmarks {
		run := trace.Run{Name: fmt.Sprintf("%s#%d", prefix, bi+1), Source: guideLLMName, File: file, Backend: "guidellm"}
		if doc.Metadata != nil && doc.Metadata.Version != "" {
			run.Extra = map[string]string{"guidellm_version": doc.Metadata.Version}
		}
		if doc.Args != nil {
			run.Model = doc.Args.Model
		}
		brecs, ok := parseGuideLLMBenchmark(&run, raw, file, bi)
		recs = append(recs, brecs...)
		if ok {
			runs = append(runs, run)
		}
	}
	return recs, runs
}

// parseGuideLLMBenchmark reads one benchmark; ok is false when the whole
// benchmark is malformed (one SyntaxError then).
func parseGuideLLMBenchmark(run *trace.Run, raw json.RawMessage, file string, bi int) ([]Record, bool) {
	var top map[string]json.RawMessage
	var bm struct {
		Config *struct {
			Strategy *guideLLMStrategy `json:"strategy"`
			Backend  *struct {
				Model string `json:"model"`
			} `json:"backend"`
		} `json:"config"`
		Args *struct {
			Strategy *guideLLMStrategy `json:"strategy"`
		} `json:"args"`
		Worker *struct {
			Model string `json:"backend_model"`
		} `json:"worker"`
		Duration optNum `json:"duration"`
		Requests struct {
			Successful []guideLLMRequest `json:"successful"`
			Errored    []guideLLMRequest `json:"errored"`
			Incomplete []guideLLMRequest `json:"incomplete"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return []Record{badAt(file, 1, "benchmarks[%d]: %v", bi, err)}, false
	}
	if err := json.Unmarshal(raw, &bm); err != nil {
		return []Record{badAt(file, 1, "benchmarks[%d]: %v", bi, err)}, false
	}
	delete(top, "requests")
	run.Reported = reportedJSON(top)
	var strat *guideLLMStrategy
	switch {
	case bm.Config != nil:
		strat = bm.Config.Strategy
		if bm.Config.Backend != nil && bm.Config.Backend.Model != "" {
			run.Model = bm.Config.Backend.Model
		}
	case bm.Args != nil:
		strat = bm.Args.Strategy
	}
	if bm.Worker != nil && bm.Worker.Model != "" {
		run.Model = bm.Worker.Model
	}
	if strat != nil {
		w := &trace.Workload{RequestRate: trace.Rate(math.Inf(1))}
		if strat.Rate.Set && strat.Rate.V > 0 {
			w.RequestRate = trace.Rate(strat.Rate.V)
		}
		for _, c := range []optNum{strat.MaxConcurrency, strat.Streams} {
			if c.Set && c.V > 0 && c.V < 1<<31 {
				w.Concurrency = int(c.V)
			}
		}
		if strat.Type == "synchronous" {
			w.Concurrency = 1
		}
		run.Workload = w
		if run.Extra == nil {
			run.Extra = map[string]string{}
		}
		run.Extra["strategy"] = strat.Type
	}
	if d, _ := bm.Duration.sec(1); d.OK {
		run.DurationSec = d
	}

	// The run's time origin: its earliest start or targeted start.
	origin := math.Inf(1)
	groups := []struct {
		name   string
		reqs   []guideLLMRequest
		status trace.Status
	}{
		{"successful", bm.Requests.Successful, trace.StatusOK},
		{"errored", bm.Requests.Errored, trace.StatusFailed},
		{"incomplete", bm.Requests.Incomplete, trace.StatusAborted},
	}
	for _, g := range groups {
		for i := range g.reqs {
			s, t := g.reqs[i].start()
			for _, v := range []optNum{s, t} {
				if v.Set && finite(v.V) == "" && v.V >= 0 && v.V < origin {
					origin = v.V
				}
			}
		}
	}
	if !math.IsInf(origin, 1) {
		run.StartUnixN = int64(math.Round(origin * 1e9))
		// StartUnixN cannot hold the epoch float exactly (float64 has
		// 256 ns steps at 1.7e18 ns); GuideLLM's rate and concurrency
		// statistics are computed on epoch floats, so analyze
		// (--as-source) rebuilds them from the exact origin.
		if run.Extra == nil {
			run.Extra = map[string]string{}
		}
		run.Extra[GuideLLMOriginKey] = strconv.FormatFloat(origin, 'f', -1, 64)
	}
	var recs []Record
	index := 0
	for _, g := range groups {
		for i := range g.reqs {
			q := &g.reqs[i]
			req := newRequest(run, q.RequestID, index, file, index+1)
			index++
			req.Status = g.status
			req.TTFTBasis = trace.TTFTFirstText
			req.E2EBasis = trace.E2EStreamEnd
			req.OutputTokensSource = trace.OutputServerUsage
			errMsg := q.Error
			if q.Info != nil && q.Info.Error != nil {
				errMsg = q.Info.Error
			}
			if errMsg != nil && req.Status != trace.StatusOK {
				req.Error = *errMsg
			}
			if msg := guideLLMFill(req, q, origin); msg != "" {
				recs = append(recs, badAt(file, 1, "benchmarks[%d].requests.%s[%d].%s", bi, g.name, i, msg))
				continue
			}
			recs = append(recs, validated(req))
		}
	}
	return recs, true
}

func guideLLMFill(req *trace.Request, q *guideLLMRequest, origin float64) string {
	var fe fieldErr
	var msg string
	req.InputTokens, msg = q.PromptTokens.count()
	fe.set("prompt_tokens", msg)
	req.OutputTokens, msg = q.OutputTokens.count()
	fe.set("output_tokens", msg)
	s, t := q.start()
	at := func(name string, v optNum) trace.Opt[trace.Time] {
		if !v.Set {
			return trace.Opt[trace.Time]{}
		}
		if msg := finite(v.V); msg != "" {
			fe.set(name, msg)
			return trace.Opt[trace.Time]{}
		}
		d := v.V - origin
		if d < 0 || d > 1e9 {
			fe.set(name, fmt.Sprintf("out of range (%v)", v.V))
			return trace.Opt[trace.Time]{}
		}
		return trace.Some(trace.TimeFromSeconds(d))
	}
	name := "request_start_time"
	if !q.RequestStart.Set {
		name = "start_time"
	}
	req.Arrival = at(name, s)
	req.IntendedArrival = at("targeted_start", t)
	if q.TTFTms.Set {
		req.TTFTSec, msg = q.TTFTms.sec(1e3)
		fe.set("time_to_first_token_ms", msg)
	} else if q.FirstTokenTime.Set && s.Set {
		req.TTFTSec, msg = optNum{q.FirstTokenTime.V - s.V, true}.sec(1)
		fe.set("first_token_time", msg)
	}
	// The last token is measured from the same send time as TTFT and E2E,
	// so that analyze can rebuild GuideLLM's token-weighted TPOT and ITL.
	if q.Info != nil && q.Info.Timings.LastToken.Set && s.Set {
		req.LastTokenSec, msg = optNum{q.Info.Timings.LastToken.V - s.V, true}.sec(1)
		fe.set("info.timings.last_token_iteration", msg)
	} else if q.LastTokenTime.Set && s.Set {
		req.LastTokenSec, msg = optNum{q.LastTokenTime.V - s.V, true}.sec(1)
		fe.set("last_token_time", msg)
	}
	// GuideLLM 0.4+ counts the stream: every event received
	// (request_iterations) and those that carried output tokens
	// (token_iterations, the iterations its token-rate statistics spread
	// a request's output over). 0.2–0.3 files do not write them.
	if q.Info != nil {
		req.StreamEvents, msg = q.Info.Timings.RequestIterations.count()
		fe.set("info.timings.request_iterations", msg)
		req.TokenEvents, msg = q.Info.Timings.TokenIterations.count()
		fe.set("info.timings.token_iterations", msg)
	}
	if q.Latency.Set {
		req.E2ESec, msg = q.Latency.sec(1)
		fe.set("request_latency", msg)
	} else if q.EndTime.Set && s.Set {
		req.E2ESec, msg = optNum{q.EndTime.V - s.V, true}.sec(1)
		fe.set("end_time", msg)
	}
	if q.RequestArgs != "" {
		var args struct {
			Body struct {
				MaxTokens           optNum `json:"max_tokens"`
				MaxCompletionTokens optNum `json:"max_completion_tokens"`
			} `json:"body"`
		}
		if json.Unmarshal([]byte(q.RequestArgs), &args) == nil {
			m := args.Body.MaxTokens
			if !m.Set {
				m = args.Body.MaxCompletionTokens
			}
			req.MaxOutputTokens, msg = m.count()
			fe.set("request_args.body.max_tokens", msg)
		}
	}
	if req.Status != trace.StatusOK {
		// Measurements a failed request never reached are written as 0.
		if req.OutputTokens.OK && req.OutputTokens.V == 0 {
			req.OutputTokens = trace.Opt[int64]{}
		}
	}
	return fe.msg
}
