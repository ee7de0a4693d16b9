package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

const (
	aiperfFile = "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export.jsonl"
	// aiperfAggregateFile and llmperfSummaryFile are the two runs'
	// summaries, which also read alone (loneSummary).
	aiperfAggregateFile = "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export_aiperf.json"
	llmperfSummaryFile  = "formats/llmperf/ray-project_llmperf_vllm_Yi-1-5-34B-Chat_550_150_c16_summary.json"
	guideLLMFile        = "formats/guidellm/danielkorat_guidellm-bench_Qwen_Qwen3-4B-Thinking-2507_tp2_quant-fp8_benchmarks.json"
	llmperfFile         = "formats/llmperf/ray-project_llmperf_vllm_Yi-1-5-34B-Chat_550_150_c16_individual_responses.json"
	ipStageFile         = "formats/inference_perf/kubernetes-sigs_inference-perf_kubecon-na-2025_vllm_stage_3_lifecycle_metrics.json"
	azureCodeFile       = "traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv"
	azureConvFile       = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
	opalStage0          = "formats/opal/defaults/stage_0_opal_stats.json"
	opalOneLong         = "formats/opal/micro_one_long/opal_stats.json"
	wekaDir             = "traces/weka_agentic_coding"
)

func readShared(t *testing.T, rel string) ([]*trace.Request, Reader) {
	t.Helper()
	r := openFile(t, shareddata.Path(t, rel), Options{})
	reqs, bad := readAll(t, r)
	if len(bad) != 0 {
		t.Fatalf("bad records: %v", bad)
	}
	return reqs, r
}

// TestAIPerfReal checks every record against the file's own values,
// decoded independently.
func TestAIPerfReal(t *testing.T) {
	reqs, r := readShared(t, aiperfFile)
	raw, err := os.ReadFile(shareddata.Path(t, aiperfFile))
	if err != nil {
		t.Fatal(err)
	}
	type metric struct {
		Value json.RawMessage
		Unit  string
	}
	var want []struct {
		Metadata map[string]any
		Metrics  map[string]metric
		Error    map[string]any
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var w struct {
			Metadata map[string]any
			Metrics  map[string]metric
			Error    map[string]any
		}
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
		want = append(want, w)
	}
	if len(reqs) != 100 || len(want) != 100 {
		t.Fatalf("got %d requests, file has %d", len(reqs), len(want))
	}
	failed := 0
	ms := func(m metric) float64 {
		var v float64
		if err := json.Unmarshal(m.Value, &v); err != nil || m.Unit != "ms" {
			t.Fatalf("metric %s %s", m.Value, m.Unit)
		}
		return v / 1000
	}
	for i, q := range reqs {
		w := want[i]
		if q.RequestID != w.Metadata["x_request_id"] {
			t.Errorf("%d: id %s", i, q.RequestID)
		}
		if w.Error != nil {
			failed++
			if q.Status != trace.StatusFailed || !strings.Contains(q.Error, "RequestCancellationError") || q.TTFTSec.OK {
				t.Errorf("%d: error record read as %s", i, q)
			}
			continue
		}
		if q.TTFTSec != trace.Some(ms(w.Metrics["ttft"])) || q.E2ESec != trace.Some(ms(w.Metrics["request_latency"])) {
			t.Errorf("%d: ttft %v e2e %v; file %s %s", i, q.TTFTSec, q.E2ESec, w.Metrics["ttft"].Value, w.Metrics["request_latency"].Value)
		}
		var osl, reasoning int64
		json.Unmarshal(w.Metrics["output_sequence_length"].Value, &osl)
		json.Unmarshal(w.Metrics["reasoning_token_count"].Value, &reasoning)
		if q.OutputTokens != trace.Some(osl) || q.ReasoningTokens != trace.Some(reasoning) || q.InputTokens != trace.Some(int64(550)) {
			t.Errorf("%d: tokens %s", i, q)
		}
		// Gaps are per chunk and chunks are not tokens (the file has
		// records with osl−2, osl−1 and osl gaps): only the sum is checked.
		if len(q.ITLSec) == 0 || q.ITLUnit != trace.ITLChunk || !q.Arrival.OK {
			t.Errorf("%d: %d gaps for %d tokens", i, len(q.ITLSec), osl)
		}
		// ttft + Σ gaps = latency, as AIPerf defines it (to rounding).
		s := q.TTFTSec.V
		for _, g := range q.ITLSec {
			s += g
		}
		if math.Abs(s-q.E2ESec.V) > 1e-9 {
			t.Errorf("%d: ttft+Σitl = %v, e2e %v", i, s, q.E2ESec.V)
		}
	}
	if failed != 11 {
		t.Errorf("failed = %d, want 11", failed)
	}
	// Trace time 0 is the earliest request; the aggregate's
	// min_request_timestamp is 1.759522419154569e18.
	runs := r.Runs()
	if len(runs) != 1 || float64(runs[0].StartUnixN) != 1.759522419154569e18 || runs[0].Model != "openai/gpt-oss-20b" ||
		runs[0].DurationSec != trace.Some(9.317788951) || !bytes.Contains(runs[0].Reported, []byte(`"error_summary"`)) {
		t.Errorf("run %s: start %d model %s duration %v", runs[0].Name, runs[0].StartUnixN, runs[0].Model, runs[0].DurationSec)
	}
	if w := runs[0].Workload; w == nil || w.Concurrency != 100 || w.NumPrompts != 100 {
		t.Errorf("workload = %+v", w)
	}
}

func TestGuideLLMReal(t *testing.T) {
	reqs, r := readShared(t, guideLLMFile)
	var doc struct {
		Benchmarks []struct {
			Requests struct {
				Successful []struct {
					RequestID    string  `json:"request_id"`
					Start        float64 `json:"request_start_time"`
					Latency      float64 `json:"request_latency"`
					TTFTms       float64 `json:"time_to_first_token_ms"`
					PromptTokens int64   `json:"prompt_tokens"`
					OutputTokens int64   `json:"output_tokens"`
					Info         struct {
						Timings struct {
							LastToken         float64 `json:"last_token_iteration"`
							RequestIterations int64   `json:"request_iterations"`
							TokenIterations   int64   `json:"token_iterations"`
						}
					}
				}
			}
		}
	}
	raw, _ := os.ReadFile(shareddata.Path(t, guideLLMFile))
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	want := doc.Benchmarks[0].Requests.Successful
	if len(reqs) != 30 || len(want) != 30 {
		t.Fatalf("got %d requests", len(reqs))
	}
	runs := r.Runs()
	if len(runs) != 1 || runs[0].Model != "Qwen/Qwen3-4B-Thinking-2507" || runs[0].Workload == nil || runs[0].Workload.Concurrency != 1 {
		t.Fatalf("runs = %+v", runs)
	}
	origin := float64(runs[0].StartUnixN) / 1e9
	for i, q := range reqs {
		w := want[i]
		if q.RequestID != w.RequestID || q.TTFTSec != trace.Some(w.TTFTms/1000) || q.E2ESec != trace.Some(w.Latency) ||
			q.InputTokens != trace.Some(w.PromptTokens) || q.OutputTokens != trace.Some(w.OutputTokens) ||
			q.MaxOutputTokens != trace.Some(int64(1024)) || q.Status != trace.StatusOK ||
			q.LastTokenSec != trace.Some(w.Info.Timings.LastToken-w.Start) ||
			q.StreamEvents != trace.Some(w.Info.Timings.RequestIterations) || q.TokenEvents != trace.Some(w.Info.Timings.TokenIterations) ||
			w.Info.Timings.TokenIterations < 2 {
			t.Errorf("%d: %s", i, q)
		}
		// Arrival is the start relative to the run's origin, to the µs
		// that float64 epoch seconds hold.
		if d := math.Abs(q.Arrival.V.Seconds() - (w.Start - origin)); d > 1e-6 {
			t.Errorf("%d: arrival %v, file %v", i, q.Arrival.V.Seconds(), w.Start-origin)
		}
		if q.IntendedArrival.V > q.Arrival.V {
			t.Errorf("%d: sent before its targeted start? %s", i, q)
		}
	}
	if bytes.Contains(runs[0].Reported, []byte(`"successful":[`)) || !bytes.Contains(runs[0].Reported, []byte(`"scheduler_metrics"`)) {
		t.Errorf("Reported keeps requests or lost metrics")
	}
}

func TestLLMPerfReal(t *testing.T) {
	reqs, r := readShared(t, llmperfFile)
	if len(reqs) != 112 {
		t.Fatalf("got %d requests", len(reqs))
	}
	for _, q := range reqs {
		if q.Arrival.OK || q.ITLSec != nil || !q.TTFTSec.OK || !q.E2ESec.OK || q.InputTokens != trace.Some(int64(550)) {
			t.Fatalf("%s", q)
		}
	}
	if q := reqs[0]; q.TTFTSec.V != 0.5865403649986547 || q.E2ESec.V != 18.712564567998925 || q.OutputTokens.V != 157 {
		t.Errorf("first = %s", q)
	}
	runs := r.Runs()
	if len(runs) != 1 || runs[0].Model != "01-ai/Yi-1.5-34B-Chat" || runs[0].Workload.Concurrency != 16 ||
		!bytes.Contains(runs[0].Reported, []byte(`"results_ttft_s_mean":5.367653323758857`)) {
		t.Errorf("runs = %+v", runs)
	}
}

func TestInferencePerfStageReal(t *testing.T) {
	reqs, r := readShared(t, ipStageFile)
	runs := r.Runs()
	if len(reqs) != 0 || len(runs) != 1 || runs[0].Stage != "stage_3" || runs[0].Workload == nil ||
		runs[0].Workload.RequestRate != 92.19 || runs[0].Workload.NumPrompts != 5531 ||
		!bytes.Contains(runs[0].Reported, []byte(`"achieved_rate":92.22409851829183`)) {
		t.Errorf("runs = %+v", runs)
	}
}

func TestAzureReal(t *testing.T) {
	for _, tc := range []struct {
		rel     string
		n       int
		last    string // last row, as written
		lastIn  int64
		lastOut int64
	}{
		{azureCodeFile, 8819, "2023-11-16 19:14:19.9280160,549,173", 549, 173},
		{azureConvFile, 19366, "", 0, 0},
	} {
		reqs, r := readShared(t, tc.rel)
		if len(reqs) != tc.n {
			t.Errorf("%s: %d requests, want %d", tc.rel, len(reqs), tc.n)
			continue
		}
		runs := r.Runs()
		start := time.Unix(0, runs[0].StartUnixN).UTC()
		for i := 1; i < len(reqs); i++ {
			if reqs[i].Arrival.V < reqs[i-1].Arrival.V {
				t.Fatalf("%s: arrival goes back at %d", tc.rel, i)
			}
		}
		if tc.last != "" {
			q := reqs[len(reqs)-1]
			at := start.Add(time.Duration(q.Arrival.V)).Format("2006-01-02 15:04:05.0000000")
			if got := at + "," + strconv.FormatInt(q.InputTokens.V, 10) + "," + strconv.FormatInt(q.OutputTokens.V, 10); got != tc.last {
				t.Errorf("last row read as %s, want %s", got, tc.last)
			}
		}
	}
}

func TestAgenticReal(t *testing.T) {
	dir := shareddata.Path(t, wekaDir)
	var reqs []*trace.Request
	runs, st, err := Files([]string{dir}, Options{}, func(q *trace.Request) error {
		reqs = append(reqs, q.Clone())
		return nil
	}, func(e *SyntaxError) { t.Errorf("bad: %v", e) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 30 || len(runs) != 30 || len(reqs) != 280 || len(st.Skipped) != 0 {
		t.Fatalf("files %d runs %d requests %d skipped %v", st.Files, len(runs), len(reqs), st.Skipped)
	}
	// Local ids restart at 1 in every session; namespaced, no id is
	// shared by two sessions, and inside a session equal local ids stay
	// equal (request 1 extends request 0's prefix).
	owner := map[int64]string{}
	for _, q := range reqs {
		if q.BlockSize != trace.Some(int64(64)) || q.Session == "" || !q.Turn.OK || !q.Arrival.OK {
			t.Fatalf("%s", q)
		}
		for _, h := range q.HashIDs {
			if s, ok := owner[h]; ok && s != q.Session {
				t.Fatalf("hash %d shared by %s and %s", h, s, q.Session)
			}
			owner[h] = q.Session
		}
	}
	var first, second *trace.Request
	for _, q := range reqs {
		if q.Session == "trace_0012" && q.Turn.V == 0 {
			first = q
		}
		if q.Session == "trace_0012" && q.Turn.V == 1 {
			second = q
		}
	}
	if first == nil || second == nil || len(first.HashIDs) != 236 || first.HashIDs[0] != second.HashIDs[0] ||
		second.Arrival.V.Seconds() != 12 || second.ThinkSec != trace.Some(7.0) || second.E2ESec != trace.Some(4.31) {
		t.Errorf("trace_0012: %v / %v", first, second)
	}
	for _, run := range runs {
		if run.HashScope != "dataset" || run.BlockSize != 64 || run.Source != agenticName {
			t.Errorf("run %+v", run)
		}
	}
}

func TestOpalReal(t *testing.T) {
	reqs, r := readShared(t, opalStage0)
	if len(reqs) != 100 || r.Runs()[0].Stage != "stage_0" || r.Runs()[0].DurationSec != trace.Some(50.17959178733582) {
		t.Fatalf("%d requests, runs %+v", len(reqs), r.Runs())
	}
	for _, q := range reqs {
		if int64(len(q.ITLSec)) != q.OutputTokens.V || !q.TTFTSec.OK || !q.QueueSec.OK || q.Arrival.OK {
			t.Fatalf("%s", q)
		}
	}
	if q := reqs[0]; q.InputTokens.V != 1491 || q.TTFTSec.V != 0.026742626881940373 || q.ITLSec[0] != 0.005026062584242423 {
		t.Errorf("first = %s", q)
	}
	// Opal's micro run: TTFT 0.801065362 s (opal-notes.md §2 Q2).
	reqs, _ = readShared(t, opalOneLong)
	if len(reqs) != 1 || math.Abs(reqs[0].TTFTSec.V-0.801065362) > 1e-9 || reqs[0].InputTokens.V != 20000 || len(reqs[0].ITLSec) != 3 {
		t.Errorf("one_long = %v", reqs)
	}
}

// TestSharedDirectories ingests each whole directory of the shared data
// that holds this formats through Files, as `opaltrace ingest DIR`
// does, and checks row counts; files that are not traces (configs, logs,
// SOURCES.md, summaries read with their per-request file) are skipped.
func TestSharedDirectories(t *testing.T) {
	for _, tc := range []struct {
		dir                  string
		files, runs, n, fail int
		skipped              int
		companions           int
	}{
		{"formats/aiperf", 1, 1, 100, 11, 0, 1},
		{"formats/guidellm", 1, 1, 30, 0, 0, 0},
		{"formats/llmperf", 1, 1, 112, 0, 0, 1},
		{"formats/inference_perf", 1, 1, 0, 0, 0, 0},
		{"formats/opal/defaults", 2, 2, 110, 0, 3, 0},
		{"formats/opal/micro_one_long", 2, 2, 2, 0, 3, 0},
		{"traces/azure_llm_2023", 2, 2, 8819 + 19366, 0, 0, 0},
		{"traces/mooncake", 2, 2, 12031 + 3993, 0, 0, 0},
		{wekaDir, 30, 30, 280, 0, 0, 0},
	} {
		dir := shareddata.Path(t, tc.dir)
		n, fail := 0, 0
		runs, st, err := Files([]string{dir}, Options{}, func(q *trace.Request) error {
			n++
			if !q.OK() {
				fail++
			}
			return nil
		}, func(e *SyntaxError) { t.Errorf("%s: bad record %v", tc.dir, e) })
		if err != nil {
			t.Errorf("%s: %v", tc.dir, err)
			continue
		}
		var skipped []string
		for _, s := range st.Skipped {
			skipped = append(skipped, filepath.Base(s))
		}
		if st.Files != tc.files || len(runs) != tc.runs || n != tc.n || fail != tc.fail || len(skipped) != tc.skipped ||
			len(st.Companions) != tc.companions {
			t.Errorf("%s: files %d runs %d requests %d failed %d skipped %v companions %v; want %d %d %d %d %d skipped %d companions",
				tc.dir, st.Files, len(runs), n, fail, skipped, st.Companions, tc.files, tc.runs, tc.n, tc.fail, tc.skipped, tc.companions)
		}
	}
}
