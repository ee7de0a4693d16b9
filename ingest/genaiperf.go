package ingest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// genAIPerf reads genai-perf's (perf_analyzer's) raw profile_export.json
// (trace-formats.md §6.2; documented from genai-perf's
// llm_profile_data_parser.py, no real file found): {"experiments":
// [{"experiment": {"mode", "value"}, "requests": [{"timestamp",
// "request_inputs", "response_timestamps", "response_outputs"}]}],
// "service_kind", "endpoint"}, times in ns of perf_analyzer's clock. One
// run per experiment; trace time 0 is its earliest request timestamp.
//
// Per request: TTFT = first response − timestamp, E2E = last response −
// timestamp, ITLSec = the gaps between responses (unit chunk). Responses
// that are the SSE terminator "data: [DONE]" are dropped first, as
// genai-perf does; genai-perf also drops responses whose text is empty,
// which needs the OpenAI payload: a response whose payload parses and has
// no text in choices[0].delta.content / .text / .message.content is
// dropped, any other is kept. Token counts need a tokenizer (genai-perf
// re-tokenizes the text) and stay absent. A request without responses is
// failed.
const genAIPerfName = "genai-perf"

var genAIPerf = Format{
	Name:      genAIPerfName,
	Sniff:     sniffGenAIPerf,
	NewReader: newGenAIPerfReader,
}

func sniffGenAIPerf(head []byte) bool {
	return startsWith(head, '{') && containsAll(head, `"experiments"`) &&
		containsAny(head, `"request_inputs"`, `"response_timestamps"`, `"experiment"`)
}

type genAIPerfRequest struct {
	Timestamp          intNum   `json:"timestamp"`
	ResponseTimestamps []intNum `json:"response_timestamps"`
	ResponseOutputs    []struct {
		Response string `json:"response"`
	} `json:"response_outputs"`
}

func newGenAIPerfReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		recs, runs := parseGenAIPerf(b, file, run)
		return recs, runs, nil
	}}
}

func parseGenAIPerf(b []byte, file, prefix string) ([]Record, []trace.Run) {
	var doc struct {
		Experiments []struct {
			Experiment *struct {
				Mode  string `json:"mode"`
				Value optNum `json:"value"`
			} `json:"experiment"`
			Requests []genAIPerfRequest `json:"requests"`
		} `json:"experiments"`
		ServiceKind string `json:"service_kind"`
		Endpoint    string `json:"endpoint"`
		Version     string `json:"version"`
	}
	if bad := unmarshalAt(quoteNonFinite(b), file, &doc); bad != nil {
		bad.Msg = "invalid JSON: " + bad.Msg
		return []Record{bad}, nil
	}
	var recs []Record
	var runs []trace.Run
	for ei, ex := range doc.Experiments {
		run := trace.Run{Name: fmt.Sprintf("%s#%d", prefix, ei+1), Source: genAIPerfName, File: file,
			Backend: doc.ServiceKind, Extra: map[string]string{}}
		if doc.Endpoint != "" {
			run.Extra["endpoint"] = doc.Endpoint
		}
		if doc.Version != "" {
			run.Extra["version"] = doc.Version
		}
		if e := ex.Experiment; e != nil {
			run.Extra["mode"] = e.Mode
			if e.Value.Set && e.Value.V > 0 && e.Value.V < 1<<31 {
				switch e.Mode {
				case "concurrency":
					run.Workload = &trace.Workload{Concurrency: int(e.Value.V), RequestRate: trace.Rate(math.Inf(1))}
				case "request_rate":
					run.Workload = &trace.Workload{RequestRate: trace.Rate(e.Value.V)}
				}
			}
		}
		origin := int64(math.MaxInt64)
		for _, q := range ex.Requests {
			if q.Timestamp.Set && q.Timestamp.V >= 0 && q.Timestamp.V < origin {
				origin = q.Timestamp.V
			}
		}
		for i := range ex.Requests {
			req := newRequest(&run, "", i, file, i+1)
			if msg := genAIPerfFill(req, &ex.Requests[i], origin); msg != "" {
				recs = append(recs, badAt(file, 1, "experiments[%d].requests[%d].%s", ei, i, msg))
				continue
			}
			recs = append(recs, validated(req))
		}
		runs = append(runs, run)
	}
	return recs, runs
}

// genAIPerfEmpty reports whether a response is one genai-perf ignores: the
// [DONE] terminator, or an OpenAI payload without text.
func genAIPerfEmpty(resp string) bool {
	s := strings.TrimSpace(resp)
	s = strings.TrimSpace(strings.TrimPrefix(s, "data:"))
	if s == "[DONE]" {
		return true
	}
	var p struct {
		Choices []struct {
			Text  *string `json:"text"`
			Delta *struct {
				Content *string `json:"content"`
			} `json:"delta"`
			Message *struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(s), &p) != nil {
		return false
	}
	text := ""
	for _, c := range p.Choices {
		switch {
		case c.Text != nil:
			text += *c.Text
		case c.Delta != nil && c.Delta.Content != nil:
			text += *c.Delta.Content
		case c.Message != nil && c.Message.Content != nil:
			text += *c.Message.Content
		}
	}
	return text == ""
}

func genAIPerfFill(req *trace.Request, q *genAIPerfRequest, origin int64) string {
	req.ITLUnit = trace.ITLChunk
	req.TTFTBasis = trace.TTFTFirstText
	req.E2EBasis = trace.E2ELastToken
	if !q.Timestamp.Set {
		return "timestamp: missing"
	}
	t := q.Timestamp.V
	if t < 0 {
		return fmt.Sprintf("timestamp: negative (%d)", t)
	}
	req.Arrival = trace.Some(trace.Time(t - origin))
	if q.ResponseOutputs != nil && len(q.ResponseOutputs) != len(q.ResponseTimestamps) {
		return fmt.Sprintf("response_outputs: %d entries for %d response_timestamps", len(q.ResponseOutputs), len(q.ResponseTimestamps))
	}
	var times []int64
	for j, rt := range q.ResponseTimestamps {
		if !rt.Set {
			return fmt.Sprintf("response_timestamps[%d]: null", j)
		}
		if q.ResponseOutputs != nil && genAIPerfEmpty(q.ResponseOutputs[j].Response) {
			continue
		}
		if rt.V < t || (len(times) > 0 && rt.V < times[len(times)-1]) {
			return fmt.Sprintf("response_timestamps[%d]: goes back in time (%v)", j, rt.V)
		}
		times = append(times, rt.V)
	}
	if len(times) == 0 {
		req.Status = trace.StatusFailed
		req.Error = "no responses"
		return ""
	}
	sec := func(d int64) float64 { return float64(d) / 1e9 }
	req.TTFTSec = trace.Some(sec(times[0] - t))
	req.E2ESec = trace.Some(sec(times[len(times)-1] - t))
	req.ITLSec = make([]float64, len(times)-1)
	for j := 1; j < len(times); j++ {
		req.ITLSec[j-1] = sec(times[j] - times[j-1])
	}
	return ""
}
