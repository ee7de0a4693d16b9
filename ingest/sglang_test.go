package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

const (
	sglangDir    = "formats/sglang_bench_serving"
	sglangOnline = sglangDir + "/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl"
	sglangPD     = sglangDir + "/TonyLi15_sglang-benchmark_pd_1p2d_n100_in512_out128_c64.jsonl"
	otelFile     = "formats/otel/anud18_qwen36-vllm-aiperf-benchmark_sample_vllm_spans.jsonl"
)

// dump reads path and renders its records and runs canonically, with the
// run-name prefix replaced by "X" so goldens do not depend on file names.
func dump(t *testing.T, path string, opts Options) string {
	t.Helper()
	r := openFile(t, path, opts)
	reqs, bad := readAll(t, r)
	var b strings.Builder
	for _, q := range reqs {
		fmt.Fprintln(&b, q)
	}
	for _, e := range bad {
		fmt.Fprintln(&b, "bad", e)
	}
	for _, run := range r.Runs() {
		run.File = ""
		run.Reported = nil
		j, err := run.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "run %s\n", j)
	}
	return strings.ReplaceAll(b.String(), filepath.Base(path), "X")
}

// TestSGLangBenchDataCrunch reads the old reduced SGLang layout (MIT, in
// place): seven summary-only runs with their workload arguments.
func TestSGLangBenchDataCrunch(t *testing.T) {
	r := openFile(t, shareddata.Path(t, sglangOnline), Options{})
	reqs, bad := readAll(t, r)
	if len(reqs) != 0 || len(bad) != 0 {
		t.Fatalf("got %d requests, %d bad", len(reqs), len(bad))
	}
	runs := r.Runs()
	var got []string
	for _, run := range runs {
		w := run.Workload
		got = append(got, fmt.Sprintf("%s %v %d/%d n=%d approx=%v engine=%q",
			w.Dataset, float64(w.RequestRate), w.InputLen, w.OutputLen, w.NumPrompts, run.Approximate != "", run.Engine))
		if run.Backend != "sglang" || !run.DurationSec.OK || run.Extra["itl_unit"] != trace.ITLChunk ||
			run.Extra["ttft_basis"] != trace.TTFTFirstText || run.Extra["e2e_basis"] != trace.E2EStreamEnd ||
			run.Extra["output_tokens_source"] != trace.OutputServerUsage {
			t.Errorf("run %s = %+v", run.Name, run)
		}
		if !bytes.Contains(run.Reported, []byte(`"median_ttft_ms"`)) {
			t.Errorf("run %s: Reported lacks the summary: %s", run.Name, run.Reported)
		}
	}
	want := []string{
		`random 1 1024/1024 n=300 approx=false engine=""`,
		`random 2 1024/1024 n=600 approx=false engine=""`,
		`random 4 1024/1024 n=1200 approx=false engine=""`,
		`random 8 1024/1024 n=2400 approx=false engine=""`,
		`random 16 1024/1024 n=3200 approx=false engine=""`,
		`sharegpt 4 0/0 n=1200 approx=true engine=""`,
		`sharegpt 8 0/0 n=2400 approx=true engine=""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("runs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := runs[0].DurationSec.V; d != 298.3675805060193 {
		t.Errorf("duration = %v", d)
	}
}

// TestSGLangBenchPD reads the v0.5 layout with a PD server_info and a bare
// Infinity (no licence: read in place).
func TestSGLangBenchPD(t *testing.T) {
	r := openFile(t, shareddata.Path(t, sglangPD), Options{Hardware: "1xH100"})
	reqs, bad := readAll(t, r)
	if len(reqs) != 0 || len(bad) != 0 {
		t.Fatalf("got %d requests, %d bad", len(reqs), len(bad))
	}
	runs := r.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	run := runs[0]
	if run.Engine != "sglang" || !run.Disaggregated || run.Speculative || run.Model != "Qwen/Qwen2.5-3B-Instruct" ||
		run.TP != 1 || run.Hardware != "1xH100" || run.Extra["tag"] != "pd_1p2d_n100_in512_out128_c64" {
		t.Errorf("run = %+v", run)
	}
	w := run.Workload
	if w == nil || !math.IsInf(float64(w.RequestRate), 1) || w.Concurrency != 64 || w.InputLen != 512 || w.OutputLen != 128 || w.NumPrompts != 100 {
		t.Errorf("workload = %+v", w)
	}
	if !bytes.Contains(run.Reported, []byte(`"request_rate":"Infinity"`)) || !bytes.Contains(run.Reported, []byte(`"mean_ttft_ms":4556.037710709497`)) {
		t.Errorf("Reported = %.300s", run.Reported)
	}
	// A contradicting --engine is an error, not a silent override.
	r = openFile(t, shareddata.Path(t, sglangPD), Options{Engine: "vllm"})
	for r.Scan() {
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), `engine: the file says "sglang", the command line "vllm"`) {
		t.Errorf("conflicting --engine: %v", err)
	}
}

// TestSGLangBenchDir ingests the directory: the .sh.txt files are not
// traces and are listed as skipped.
func TestSGLangBenchDir(t *testing.T) {
	dir := filepath.Join(shareddata.Root(), sglangDir)
	shareddata.Path(t, sglangDir)
	runs, st, err := Files([]string{dir}, Options{}, func(*trace.Request) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 5 || len(st.Skipped) != 3 || len(runs) != 1+7+7+6+1 {
		t.Errorf("files=%d skipped=%v runs=%d", st.Files, st.Skipped, len(runs))
	}
	for _, s := range st.Skipped {
		if !strings.HasSuffix(s, ".sh.txt") {
			t.Errorf("skipped %s", s)
		}
	}
}

// TestSGLangBenchDetails: no real --output-details file exists; the
// fixture follows bench_serving's result_details (serving.py @ 00f9ec47).
func TestSGLangBenchDetails(t *testing.T) {
	path := "testdata/sglangbench/details.jsonl"
	golden.Check(t, path+".string", []byte(dump(t, path, Options{})))
}

// TestSGLangMetrics: no real exporter file exists; the fixtures follow
// trace-formats.md §3.2–3.3 (request_metrics_exporter.py, request_logger.py).
func TestSGLangMetrics(t *testing.T) {
	for _, path := range []string{"testdata/sglangmetrics/export.jsonl", "testdata/sglangmetrics/logrequests.jsonl"} {
		golden.Check(t, path+".string", []byte(dump(t, path, Options{})))
	}
}

// TestSGLangTrace: the line is a proposal (sglang#28047); the fixture
// follows the field list.
func TestSGLangTrace(t *testing.T) {
	path := "testdata/sglangtrace/mixed.log"
	golden.Check(t, path+".string", []byte(dump(t, path, Options{})))
}

// TestOTLPvLLM reads the real vLLM spans in place and compares every
// value with the file's attributes, decoded independently here.
func TestOTLPvLLM(t *testing.T) {
	path := shareddata.Path(t, otelFile)
	r := openFile(t, path, Options{})
	reqs, bad := readAll(t, r)
	if len(bad) != 0 {
		t.Fatalf("bad: %v", bad)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []struct {
					Start      string `json:"startTimeUnixNano"`
					Attributes []struct {
						Key   string
						Value map[string]any
					}
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var want []map[string]any
	var starts []int64
	for _, rs := range doc.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				m := map[string]any{}
				for _, a := range sp.Attributes {
					for _, v := range a.Value {
						m[a.Key] = v
					}
				}
				want = append(want, m)
				n, _ := strconv.ParseInt(sp.Start, 10, 64)
				starts = append(starts, n)
			}
		}
	}
	if len(reqs) != len(want) || len(want) != 2 {
		t.Fatalf("%d requests, file has %d spans", len(reqs), len(want))
	}
	origin := r.Runs()[0].StartUnixN
	if r.Runs()[0].Engine != "vllm" || origin != starts[0]-starts[0]%3600e9 {
		t.Errorf("run = %+v", r.Runs()[0])
	}
	for i, q := range reqs {
		w := want[i]
		cnt := func(k string) trace.Opt[int64] {
			n, _ := strconv.ParseInt(w[k].(string), 10, 64)
			return trace.Some(n)
		}
		if q.TTFTSec != trace.Some(w["gen_ai.latency.time_to_first_token"].(float64)) ||
			q.E2ESec != trace.Some(w["gen_ai.latency.e2e"].(float64)) ||
			q.QueueSec != trace.Some(w["gen_ai.latency.time_in_queue"].(float64)) ||
			q.PrefillSec != trace.Some(w["gen_ai.latency.time_in_model_prefill"].(float64)) ||
			q.DecodeSec != trace.Some(w["gen_ai.latency.time_in_model_decode"].(float64)) ||
			q.InputTokens != cnt("gen_ai.usage.prompt_tokens") || q.OutputTokens != cnt("gen_ai.usage.completion_tokens") ||
			q.MaxOutputTokens != cnt("gen_ai.request.max_tokens") || q.RequestID != w["gen_ai.request.id"] ||
			q.Arrival != trace.Some(trace.Time(starts[i]-origin)) ||
			q.TTFTBasis != trace.TTFTServer || q.E2EBasis != trace.E2EServer || q.PrefillBasis != trace.PrefillScheduled {
			t.Errorf("request %d = %s\nfile: %v", i, q, w)
		}
	}
}

// TestOTLPSGLang: no real SGLang span file exists; the fixture follows
// SGLang's root request span (trace-formats.md §5). The child slice span
// is not a request, and SGLang's prefill (which includes queueing) has
// prefill_basis "dispatched".
func TestOTLPSGLang(t *testing.T) {
	path := "testdata/otlp/sglang.jsonl"
	golden.Check(t, path+".string", []byte(dump(t, path, Options{})))
}

// TestRunMeta: command-line facts fill what a file leaves blank.
func TestRunMeta(t *testing.T) {
	r := openFile(t, "testdata/mooncake/few.jsonl", Options{Model: "m", Hardware: "H100", Engine: "vllm", TP: 2,
		EngineOpts: map[string]string{"disable_radix_cache": "true"}})
	reqs, _ := readAll(t, r)
	run := r.Runs()[0]
	if run.Model != "m" || run.Hardware != "H100" || run.Engine != "vllm" || run.TP != 2 ||
		run.Extra["engine_opt.disable_radix_cache"] != "true" || reqs[0].Model != "m" {
		t.Errorf("run = %+v, request %s", run, reqs[0])
	}
	if _, err := NewReader(strings.NewReader(mcGood), "x", Options{Engine: "tgi"}); err != nil {
		t.Fatal(err)
	} else if r, _ := NewReader(strings.NewReader(mcGood), "x", Options{Engine: "tgi"}); r.Scan() || r.Err() == nil {
		t.Errorf("unknown engine accepted")
	}
}

func TestSniffNewFormats(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"testdata/sglangbench/details.jsonl", sglangBenchName},
		{"testdata/sglangmetrics/export.jsonl", sglangMetricsName},
		{"testdata/sglangmetrics/logrequests.jsonl", sglangMetricsName},
		{"testdata/sglangtrace/mixed.log", sglangTraceName},
		{"testdata/otlp/sglang.jsonl", otlpName},
	} {
		f, err := os.Open(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		_, format, err := Detect(f, tc.path, "")
		f.Close()
		if err != nil || format.Name != tc.want {
			t.Errorf("Detect(%s) = %q, %v; want %s", tc.path, format.Name, err, tc.want)
		}
	}
}

// TestRunMetaEngineVersion: --engine-version fills a run that records no
// version, agrees with one that records the same, is a fatal error
// against one that records another, and must name a release.
func TestRunMetaEngineVersion(t *testing.T) {
	r := openFile(t, "testdata/mooncake/few.jsonl", Options{EngineVersion: "0.8.3"})
	readAll(t, r)
	if got := r.Runs()[0].Extra[EngineVersionKey]; got != "0.8.3" {
		t.Errorf("engine_version = %q, want 0.8.3", got)
	}
	for _, tc := range []struct {
		version, err string
	}{
		{"0.19.0", ""},
		{"0.8.3", `engine version: the file says "0.19.0", the command line "0.8.3"`},
		{"latest", `"latest" is not a release`},
	} {
		r := openFile(t, "testdata/vllmengine/requests.jsonl", Options{EngineVersion: tc.version})
		for r.Scan() {
		}
		r.Runs()
		switch err := r.Err(); {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.version, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.version, err, tc.err)
		case tc.err == "" && r.Runs()[0].Extra[EngineVersionKey] != "0.19.0":
			t.Errorf("%s: engine_version = %q", tc.version, r.Runs()[0].Extra[EngineVersionKey])
		}
	}
}

// A fleet's spans gathered by one collector: each request's worker is the
// instance its span's resource names — the SDK's service.instance.id, else
// the pod the collector's k8sattributes processor adds — and none when
// the resource names neither (host.name alone is not taken: a collector's
// resourcedetection gives its own host).
func TestOTLPWorker(t *testing.T) {
	b, err := os.ReadFile("testdata/otlp/sglang.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(b))
	const res = `{"key":"service.name","value":{"stringValue":"sglang"}}`
	if !strings.Contains(line, res) {
		t.Fatalf("the fixture's resource is not %s", res)
	}
	attr := func(k, v string) string { return `,{"key":"` + k + `","value":{"stringValue":"` + v + `"}}` }
	var in strings.Builder
	for i, c := range []string{
		attr("service.instance.id", "sglang-0") + attr("k8s.pod.name", "pod-a"),
		attr("k8s.pod.name", "pod-b"),
		attr("host.name", "collector-1"),
		"",
	} {
		l := strings.ReplaceAll(line, res, res+c)
		l = strings.ReplaceAll(l, "9f3c01ab", fmt.Sprintf("9f3c01a%d", i)) // a request id of its own
		in.WriteString(l + "\n")
	}
	r, err := NewReader(strings.NewReader(in.String()), "spans.jsonl", Options{})
	if err != nil {
		t.Fatal(err)
	}
	reqs, bad := readAll(t, r)
	if len(bad) > 0 {
		t.Fatalf("errors: %v", bad)
	}
	var got []string
	for _, q := range reqs {
		got = append(got, q.Worker)
	}
	if want := []string{"sglang-0", "pod-b", "", ""}; !slices.Equal(got, want) {
		t.Errorf("workers %q, want %q", got, want)
	}
}
