package ingest

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// opal reads the per-stage statistics of IBM's Opal simulator,
// <out>/sim-<ts>/stage_<i>/opal_stats.json (opal-notes.md §3), also found
// renamed stage_<i>_opal_stats.json. One run per stage file, its Stage
// "stage_<i>" from the path when the path names it. The raw_* lists hold one
// entry per finished request in completion order; request ids and arrival
// times are not stored, so Arrival stays absent.
//
// Per request: raw_ttft_values → TTFT (Opal's TTFT ends at the end of the
// last prefill step, which emits no token, and counts from the request's
// creation: quirk Q3 of opal-notes.md, kept as written); raw_decode_values
// [TTFT, gap1, …] → ITLSec = the gaps, one per output token (unit token:
// Opal's steps each emit one token per request); raw_latency_values
// (decode done − worker arrival) → E2E, server basis; raw_queuing_values
// (GPU start − creation) → QueueSec; raw_kvc_io_time (ready − start of
// processing) → KVFetchSec; input_output_tokens_sz [in, out] → token
// counts, the requested ones. raw_gpu_time has no column and stays in the
// file. The rest (counters, per-second per_unit_* series, stage times)
// is the run's Reported; DurationSec = stage_time_end − stage_time_start.
const opalName = "opal"

var opal = Format{
	Name:      opalName,
	Sniff:     sniffOpal,
	NewReader: newOpalReader,
}

func sniffOpal(head []byte) bool {
	return startsWith(head, '{') && containsAny(head, `"raw_latency_values"`, `"raw_ttft_values"`, `"raw_decode_values"`) &&
		containsAny(head, `"total_latency"`, `"bins"`, `"raw_queuing_values"`)
}

// opalPerRequest are the per-request lists, left out of Reported.
var opalPerRequest = map[string]bool{
	"raw_latency_values": true, "raw_queuing_values": true, "raw_kvc_io_time": true,
	"raw_gpu_time": true, "raw_ttft_values": true, "raw_decode_values": true,
	"input_output_tokens_sz": true,
}

var opalStage = regexp.MustCompile(`(?:^|[/_\\])stage_(\d+)(?:[/_\\]|$)`)

func newOpalReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		recs, runs := parseOpal(b, file, run)
		return recs, runs, nil
	}}
}

func parseOpal(b []byte, file, prefix string) ([]Record, []trace.Run) {
	var top map[string]json.RawMessage
	if bad := unmarshalAt(quoteNonFinite(b), file, &top); bad != nil {
		bad.Msg = "invalid JSON: " + bad.Msg
		return []Record{bad}, nil
	}
	var s struct {
		Latency   []optNum    `json:"raw_latency_values"`
		Queuing   []optNum    `json:"raw_queuing_values"`
		KVCIO     []optNum    `json:"raw_kvc_io_time"`
		TTFT      []optNum    `json:"raw_ttft_values"`
		Decode    [][]optNum  `json:"raw_decode_values"`
		Tokens    [][2]optNum `json:"input_output_tokens_sz"`
		Start     optNum      `json:"stage_time_start"`
		End       optNum      `json:"stage_time_end"`
		Failed    optNum      `json:"failed_requests"`
		Finished  optNum      `json:"finished_requests"`
		QueuedReq optNum      `json:"queued_requests"`
	}
	if bad := unmarshalAt(quoteNonFinite(b), file, &s); bad != nil {
		bad.Msg = "stats: " + bad.Msg
		return []Record{bad}, nil
	}
	run := trace.Run{Name: prefix + "#1", Source: opalName, File: file, Engine: "opal"}
	if m := opalStage.FindStringSubmatch(filepath.ToSlash(file)); m != nil {
		run.Stage = "stage_" + m[1]
	}
	rep := map[string]json.RawMessage{}
	for k, v := range top {
		if !opalPerRequest[k] {
			rep[k] = v
		}
	}
	run.Reported = reportedJSON(rep)
	if s.Start.Set && s.End.Set && checkSec(s.End.V-s.Start.V) == "" {
		run.DurationSec = trace.Some(s.End.V - s.Start.V)
	}
	n := len(s.TTFT)
	for _, l := range []struct {
		name string
		n    int
		ok   bool
	}{
		{"raw_latency_values", len(s.Latency), s.Latency != nil},
		{"raw_queuing_values", len(s.Queuing), s.Queuing != nil},
		{"raw_kvc_io_time", len(s.KVCIO), s.KVCIO != nil},
		{"raw_decode_values", len(s.Decode), s.Decode != nil},
		{"input_output_tokens_sz", len(s.Tokens), s.Tokens != nil},
	} {
		if l.ok && l.n != n {
			return []Record{badAt(file, 1, "%s: %d entries for %d raw_ttft_values", l.name, l.n, n)}, []trace.Run{run}
		}
	}
	recs := make([]Record, 0, n+1)
	ttftOverE2E := 0
	for i := range n {
		req := newRequest(&run, "", i, file, i+1)
		req.ITLUnit = trace.ITLToken
		req.TTFTBasis = trace.TTFTServer
		req.E2EBasis = trace.E2EServer
		req.OutputTokensSource = trace.OutputRequested
		var fe fieldErr
		var msg string
		req.TTFTSec, msg = s.TTFT[i].sec(1)
		fe.set(fmt.Sprintf("raw_ttft_values[%d]", i), msg)
		at := func(name string, l []optNum) trace.Opt[float64] {
			if l == nil {
				return trace.Opt[float64]{}
			}
			v, msg := l[i].sec(1)
			fe.set(fmt.Sprintf("%s[%d]", name, i), msg)
			return v
		}
		req.E2ESec = at("raw_latency_values", s.Latency)
		req.QueueSec = at("raw_queuing_values", s.Queuing)
		req.KVFetchSec = at("raw_kvc_io_time", s.KVCIO)
		if s.Tokens != nil {
			req.InputTokens, msg = s.Tokens[i][0].count()
			fe.set(fmt.Sprintf("input_output_tokens_sz[%d][0]", i), msg)
			req.OutputTokens, msg = s.Tokens[i][1].count()
			fe.set(fmt.Sprintf("input_output_tokens_sz[%d][1]", i), msg)
		}
		if s.Decode != nil {
			d := s.Decode[i]
			if len(d) == 0 {
				fe.set(fmt.Sprintf("raw_decode_values[%d]", i), "empty (no TTFT)")
			} else {
				req.ITLSec = make([]float64, len(d)-1)
				for j, g := range d[1:] {
					v, msg := g.sec(1)
					if msg == "" && !v.OK {
						msg = "null"
					}
					fe.set(fmt.Sprintf("raw_decode_values[%d][%d]", i, j+1), msg)
					req.ITLSec[j] = v.V
				}
			}
		}
		if fe.msg != "" {
			recs = append(recs, badAt(file, 1, "%s", fe.msg))
			continue
		}
		if req.TTFTSec.OK && req.E2ESec.OK && req.TTFTSec.V > req.E2ESec.V {
			ttftOverE2E++
		}
		recs = append(recs, validated(req))
	}
	if ttftOverE2E > 0 {
		recs = append(recs, &Warning{file, 1, fmt.Sprintf("%d of %d requests have a TTFT greater than their E2E, kept as written: "+
			"Opal's TTFT counts from the request's creation and its E2E from the worker's arrival (opal-notes.md, quirk Q3)", ttftOverE2E, n)})
	}
	if s.Failed.Set {
		run.Extra = map[string]string{"failed_requests": strings.TrimSpace(fmt.Sprint(s.Failed.V))}
	}
	return recs, []trace.Run{run}
}
