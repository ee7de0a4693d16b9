package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// opaltrace runs the command line in-process and returns its outputs.
func opaltrace(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), &out, &errb, append([]string{"opaltrace"}, args...))
	return out.String(), errb.String(), err
}

const lambdaLabs = "formats/vllm_bench_serve/LambdaLabsML_vllm-benchmark_Meta-Llama-3-8B-Instruct_tp1_len2048.json"

// statsJSON runs `stats --json` on path and returns the first run's object.
func statsJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	out, stderr, err := opaltrace(t, "stats", "--json", path)
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, stderr)
	}
	var runs []map[string]any
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("stats --json output: %v\n%s", err, out)
	}
	if len(runs) == 0 {
		t.Fatal("stats --json printed no runs")
	}
	return runs[0]
}

// TestStatsEqualsVLLM recomputes the summary of a real vLLM benchmark file
// (v0.5.4, 10 requests) from its per-request arrays and compares every
// value vLLM printed. TTFT and ITL are recomputed and must be equal to the
// last bit (numpy's pairwise mean, population std, linear percentiles).
// That vLLM version never saved per-request E2E latencies, from which it
// computed TPOT, so TPOT and E2E cannot be recomputed: they must be shown
// as reported by the source, with the source's values.
func TestStatsEqualsVLLM(t *testing.T) {
	path := shareddata.Path(t, lambdaLabs)
	var want map[string]any
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	got := statsJSON(t, path)
	recomputed := []string{
		"completed", "total_input_tokens", "total_output_tokens", "duration",
		"request_throughput", "input_throughput", "output_throughput",
		"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
		"mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
	}
	for _, k := range recomputed {
		if got[k] != want[k] {
			t.Errorf("%s = %v, vLLM printed %v", k, got[k], want[k])
		}
	}
	for _, m := range []string{"ttft", "itl"} {
		if got[m+"_basis"] != "per_request" {
			t.Errorf("%s_basis = %v, want per_request", m, got[m+"_basis"])
		}
	}
	for _, m := range []string{"tpot", "e2el"} {
		if got[m+"_basis"] != "reported" {
			t.Errorf("%s_basis = %v, want reported (the file has no per-request latencies)", m, got[m+"_basis"])
		}
	}
	for _, k := range []string{"mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms"} {
		if got[k] != want[k] {
			t.Errorf("%s = %v, the file says %v", k, got[k], want[k])
		}
	}
	if got["mean_e2el_ms"] != want["mean_latency_ms"] {
		t.Errorf("mean_e2el_ms = %v, the file's mean_latency_ms is %v", got["mean_e2el_ms"], want["mean_latency_ms"])
	}
}

// TestStatsFollowsTheData changes one TTFT in the file and sees the
// recomputed summary move: the numbers come from the data, not the
// file's own summary.
func TestStatsFollowsTheData(t *testing.T) {
	path := shareddata.Path(t, lambdaLabs)
	raw, _ := os.ReadFile(path)
	// ttfts[3] is 0.06264837899652775 s; edit the text so the file stays
	// exactly as vLLM laid it out but for that one value.
	const old, slower = "0.06264837899652775", "1.06264837899652775"
	if bytes.Count(raw, []byte(old)) != 1 {
		t.Fatalf("%s does not hold ttfts[3] = %s exactly once", path, old)
	}
	changed := bytes.Replace(raw, []byte(old), []byte(slower), 1)
	mod := filepath.Join(t.TempDir(), "changed.json")
	os.WriteFile(mod, changed, 0o644)

	before := statsJSON(t, path)
	after := statsJSON(t, mod)
	dMean := after["mean_ttft_ms"].(float64) - before["mean_ttft_ms"].(float64)
	if d := dMean - 100; d > 1e-9 || d < -1e-9 { // +1000 ms over 10 requests
		t.Errorf("mean TTFT moved by %v ms, want 100", dMean)
	}
	if after["p99_ttft_ms"] == before["p99_ttft_ms"] {
		t.Errorf("p99 TTFT did not change")
	}
	if after["mean_itl_ms"] != before["mean_itl_ms"] {
		t.Errorf("ITL changed although only a TTFT did")
	}
}

func TestStatsSummaryOnlyIsReported(t *testing.T) {
	path := shareddata.Path(t, "formats/vllm_bench_serve/er0080_vllm-benchmarking_vllm_sweep_v0.25.1_run0.json")
	got := statsJSON(t, path)
	if got["requests"] != float64(0) {
		t.Errorf("requests = %v, want 0 (summary-only file)", got["requests"])
	}
	for _, m := range []string{"ttft", "tpot", "itl", "e2el"} {
		if got[m+"_basis"] != "reported" {
			t.Errorf("%s_basis = %v, want reported", m, got[m+"_basis"])
		}
	}
	if got["p99_e2el_ms"] != 876.8009717071254 {
		t.Errorf("p99_e2el_ms = %v, want the file's 876.8009717071254", got["p99_e2el_ms"])
	}
	// The source's counts are in the JSON as reported_KEY; vLLM's keys
	// stay what the per-request data gives.
	if got["reported_completed"] != float64(8) || got["completed"] != float64(0) {
		t.Errorf("reported_completed = %v, completed = %v; want the file's 8 and 0", got["reported_completed"], got["completed"])
	}
	out, _, err := opaltrace(t, "stats", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "No per-request data: every value below is reported by source.") {
		t.Errorf("text output does not say the values are reported:\n%s", out)
	}
}

func TestIngestDropsBadRecordsAndKeepsGoodOnes(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "trace.jsonl")
	os.WriteFile(in, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}
{"timestamp": 10, "input_length": -3, "output_length": 5, "hash_ids": [2]}
{"timestamp": 20, "input_length": 10, "output_length": 5, "hash_ids": [1]}
`), 0o644)
	out := filepath.Join(dir, "out.parquet")
	_, stderr, err := opaltrace(t, "ingest", "--format", "mooncake", "-o", out, in)
	if err == nil {
		t.Fatal("ingest with a bad record succeeded; want exit 1")
	}
	if !strings.Contains(stderr, in+":2: input_length") {
		t.Errorf("stderr does not name FILE:LINE: field:\n%s", stderr)
	}
	_, reqs, rerr := trace.ReadFile(out)
	if rerr != nil || len(reqs) != 2 {
		t.Fatalf("good records not written: %v, %d requests", rerr, len(reqs))
	}
	out2 := filepath.Join(dir, "out2.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "--format", "mooncake", "--allow-errors", "-o", out2, in); err != nil {
		t.Errorf("--allow-errors still failed: %v\n%s", err, stderr)
	}
	// Past --max-errors nothing is written.
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(strings.Repeat(`{"timestamp": 1, "input_length": -1, "output_length": 1}`+"\n", 5)), 0o644)
	out4 := filepath.Join(dir, "out4.parquet")
	if _, _, err := opaltrace(t, "ingest", "--format", "mooncake", "--max-errors", "2", "-o", out4, bad); err == nil {
		t.Error("5 bad records with --max-errors 2 succeeded")
	}
	assertNoFile(t, out4)
}

func TestIngestUnrecognizedWritesNothing(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "README.txt")
	os.WriteFile(in, []byte("this is not a trace\n"), 0o644)
	out := filepath.Join(dir, "out.parquet")
	_, _, err := opaltrace(t, "ingest", "-o", out, in)
	if err == nil || !strings.Contains(err.Error(), "tried") {
		t.Fatalf("got %v, want an error listing the formats tried", err)
	}
	assertNoFile(t, out)
}

func assertNoFile(t *testing.T, path string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if strings.Contains(e.Name(), filepath.Base(path)) {
			t.Errorf("output %s left behind after a fatal error", e.Name())
		}
	}
}

// TestReplayIsDeterministic replays the same trace twice with the same
// seed: the Parquet files must be byte-identical.
func TestReplayIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	if a, b := replayTwice(t, dir, "sim", "--workers", "2", "--seed", "7", in); !bytes.Equal(a, b) {
		t.Error("two replays with the same inputs and seed wrote different files")
	}
	_, reqs, err := trace.ReadFile(filepath.Join(dir, "sima.parquet"))
	if err != nil || len(reqs) != 300 {
		t.Fatalf("simulated file: %v, %d requests, want 300", err, len(reqs))
	}
}

// TestDemo runs the whole pipeline as `opaltrace demo` does and checks
// the one thing the demo must show: halving the cluster raises p99 TTFT.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	res, err := runDemo(dir, &out, &errb)
	if err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errb.String())
	}
	p4, p8 := res.Simulated[4].TTFT.Percentile(99), res.Simulated[8].TTFT.Percentile(99)
	if !(p4 > p8) {
		t.Errorf("p99 TTFT on 4 workers = %.4f s, on 8 workers = %.4f s; want 4 > 8", p4, p8)
	}
	if n := res.Simulated[4].Completed; n != 1750 {
		t.Errorf("4-worker replay completed %d requests, want 1750", n)
	}
	st, err := os.Stat(res.Report)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 5<<20 {
		t.Errorf("report is %d bytes, want < 5 MB", st.Size())
	}
	if !strings.Contains(out.String(), "report: "+res.Report) {
		t.Errorf("demo does not say where the report is:\n%s", out.String())
	}
}

// sharedDataRequests is how many requests each directory of ../shared/data
// holds as opaltrace ingests it, by the directory's path under data/ (the
// first two levels). Summary-only runs add none. A directory not listed
// here (new data, or a format not read yet) is ingested and reported, not
// counted: new data never breaks this test, and a format that starts
// reading a directory adds its line here.
var sharedDataRequests = map[string]int{
	"formats/aiperf":                              100,
	"formats/guidellm":                            30,
	"formats/inference_perf":                      0,
	"formats/llmperf":                             112,
	"formats/opal":                                110 + 2,
	"formats/otel":                                2,
	"formats/sglang_bench_serving":                0,
	"formats/vllm_bench_serve":                    10 + 4*200,
	"measurements/llmservingsim_vllm_engine_side": 4 * 300,
	"measurements/llmd_exp0_a100_tp2_llama70b":    12 * 252, // LMBenchmark CSVs: two builds × six rates
	"traces/azure_llm_2023":                       8819 + 19366,
	"traces/mooncake":                             12031 + 3993,
	"traces/weka_agentic_coding":                  280,
}

// TestIngestAllSharedData ingests the whole ../shared/data tree — every
// real file of every format and every production trace — into one Parquet
// file, and checks the requests of each directory against
// sharedDataRequests, by the file each run was read from.
func TestIngestAllSharedData(t *testing.T) {
	root := filepath.Dir(shareddata.Path(t, "formats/SOURCES.md"))
	root = filepath.Dir(root)
	out := filepath.Join(t.TempDir(), "all.parquet")
	_, stderr, err := opaltrace(t, "ingest", "-o", out, root)
	if err != nil {
		t.Fatalf("ingest %s: %v\n%s", root, err, stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	dirOf := map[string]string{} // run name → directory under data/
	for _, r := range runs {
		if names[r.Name] {
			t.Errorf("run name %q used twice", r.Name)
		}
		names[r.Name] = true
		dirOf[r.Name] = sharedDataDir(t, root, r.File)
	}
	got := map[string]int{}
	for _, r := range reqs {
		if !names[r.Run] {
			t.Fatalf("request %s belongs to unknown run %q", r.RequestID, r.Run)
		}
		got[dirOf[r.Run]]++
	}
	for dir, want := range sharedDataRequests {
		if got[dir] != want {
			t.Errorf("%s: %d requests, want %d", dir, got[dir], want)
		}
	}
	for dir, n := range got {
		if _, ok := sharedDataRequests[dir]; !ok {
			t.Logf("%s: %d requests (a directory sharedDataRequests does not count yet)", dir, n)
		}
	}
	if !strings.Contains(stderr, "skipped") || !strings.Contains(stderr, "SOURCES.md") {
		t.Errorf("skipped files are not listed:\n%s", stderr)
	}
}

// sharedDataDir returns the first two levels of file's path under root
// ("formats/aiperf"), as sharedDataRequests names directories.
func sharedDataDir(t *testing.T, root, file string) string {
	t.Helper()
	if !filepath.IsAbs(file) {
		file = filepath.Join(root, file)
	}
	rel, err := filepath.Rel(root, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("run file %q is not under %s", file, root)
	}
	parts := strings.SplitN(filepath.ToSlash(rel), "/", 3)
	if len(parts) < 3 {
		return parts[0]
	}
	return parts[0] + "/" + parts[1]
}

// TestReplayRegeneratesSummaryOnlyRuns replays the DataCrunch SGLang file,
// whose runs recorded only their summary and workload arguments: each
// random-dataset run is regenerated and replayed as a run of its own; the
// ShareGPT runs, whose prompts are not here, are listed as not replayed.
func TestReplayRegeneratesSummaryOnlyRuns(t *testing.T) {
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	out := filepath.Join(t.TempDir(), "dc.parquet")
	_, stderr, err := opaltrace(t, "replay", "--hardware", "h200", "--tp", "4", "--model", "llama-3.3-70b", "-o", out, in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "not replayed (2 runs)") || !strings.Contains(stderr, "sharegpt") {
		t.Errorf("the ShareGPT runs are not reported as passed over:\n%s", stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 {
		t.Fatalf("%d simulated runs, want 5 (rates 1, 2, 4, 8, 16)", len(runs))
	}
	perRun := map[string]int{}
	for _, r := range reqs {
		perRun[r.Run]++
	}
	for i, want := range []int{300, 600, 1200, 2400, 3200} {
		if got := perRun[runs[i].Name]; got != want {
			t.Errorf("run %s: %d requests, want the %d the benchmark sent", runs[i].Name, got, want)
		}
		if runs[i].Extra["workload"] != "regenerated" || runs[i].Extra["replay_of"] == "" {
			t.Errorf("run %s metadata does not say it was regenerated: %v", runs[i].Name, runs[i].Extra)
		}
	}
}

// TestReplaySendsLikeTheBenchmark replays observed benchmark files that
// carry no arrival times (vLLM v0.5.4 recorded none; its run says rate
// "inf") and error records without lengths (AIPerf): the first is sent as
// the benchmark sent it, all at once; the failed records are passed over
// with a message. Neither file records a usable deployment (the vLLM
// file names Meta-Llama-3-8B-Instruct, whose config is not shipped; its
// folder says one H100), so both are given one.
func TestReplaySendsLikeTheBenchmark(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ll.parquet")
	_, stderr, err := opaltrace(t, "replay", "--model", "llama-3.1-8b", "--hardware", "h100", "-o", out, shareddata.Path(t, lambdaLabs))
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "infinite rate, 10 in flight") {
		t.Errorf("stderr does not say how the run was sent:\n%s", stderr)
	}
	if _, reqs, err := trace.ReadFile(out); err != nil || len(reqs) != 10 {
		t.Errorf("simulated %d requests (%v), want 10", len(reqs), err)
	}
	out = filepath.Join(dir, "ai.parquet")
	_, stderr, err = opaltrace(t, "replay", "--model", "gpt-oss-20b", "--hardware", "h100", "-o", out, shareddata.Path(t, "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export.jsonl"))
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "passing over 11 failed requests") {
		t.Errorf("stderr does not name the failed requests passed over:\n%s", stderr)
	}
	if _, reqs, err := trace.ReadFile(out); err != nil || len(reqs) != 89 {
		t.Errorf("simulated %d requests (%v), want the 89 that succeeded", len(reqs), err)
	}
}

// sampleSlice writes the first n requests of the embedded Mooncake sample
// to dir and returns the file's path.
func sampleSlice(t *testing.T, dir string, n int) string {
	t.Helper()
	data, err := os.ReadFile("../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, bytes.Join(lines[:n], nil), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// replayTwice runs `opaltrace replay ARGS -o DIR/PREFIXa.parquet` and the
// same into PREFIXb.parquet, and returns both files' bytes.
func replayTwice(t *testing.T, dir, prefix string, args ...string) (a, b []byte) {
	t.Helper()
	var files [2][]byte
	for i := range files {
		out := filepath.Join(dir, prefix+string(rune('a'+i))+".parquet")
		full := append([]string{"replay", "-o", out}, args...)
		if _, stderr, err := opaltrace(t, full...); err != nil {
			t.Fatalf("replay: %v\n%s", err, stderr)
		}
		var err error
		if files[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	return files[0], files[1]
}
