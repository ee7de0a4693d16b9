package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The DataCrunch Llama-3.3-70B runs (4×H200, TP4, SGLang with the radix
// cache off, per the repository's launch command), ingested with what
// their file does not record, replay on that deployment without being
// told again: Hugging Face id, GPU count and engine options all taken
// from the runs' record, and the summary line names them. A flag that
// changes the record says so.
func TestReplayDataCrunchDeployment(t *testing.T) {
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	pq := filepath.Join(dir, "dc.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "4xH200",
		"--engine", "sglang", "--engine-opt", "disable_radix_cache=true", "-o", pq, in); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	out := filepath.Join(dir, "sim.parquet")
	_, stderr, err := opaltrace(t, "replay", "-o", out, pq)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		`records 4 GPUs ("4xH200") and no parallel sizes: TP4`,
		"llama-3.3-70b on 4×h200 (TP4), sglang, 1 worker; KV cache ",
		"SGLang 0.4.0.post1's default mem_fraction_static 0.85; per GPU, in 1-token pages: 140.40 GiB free before loading",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	runs, _, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 {
		t.Fatalf("%d runs, want the 5 random-dataset ones", len(runs))
	}
	for _, r := range runs {
		if r.Model != "llama-3.3-70b" || r.Hardware != "h200" || r.TP != 4 || r.Engine != "sglang" ||
			!strings.Contains(r.Extra["config"], "disable_radix_cache: true") {
			t.Errorf("run %s: %s on %s TP%d %s; config:\n%s", r.Name, r.Model, r.Hardware, r.TP, r.Engine, r.Extra["config"])
		}
	}
	// --model overrides the record, with a note.
	_, stderr, err = opaltrace(t, "replay", "--model", "llama-3.1-70b", "-o", out, pq)
	if err != nil {
		t.Fatalf("replay --model: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, `records model "meta-llama/Llama-3.3-70B-Instruct"; replayed with llama-3.1-70b (--model)`) {
		t.Errorf("no note of the override:\n%s", stderr)
	}
}

// The surajssd vLLM 0.8.3 run at an infinite rate (8×A100-40GB, TP8)
// records its model as a Hugging Face id and nothing of its hardware: it
// is refused until the hardware is given, then replayed as Llama-3.3-70B
// on TP8 A100-40GBs, all 200 requests at once.
func TestReplaySurajssdDeployment(t *testing.T) {
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_inf.json")
	out := filepath.Join(dir, "sim.parquet")
	_, _, err := opaltrace(t, "replay", "-o", out, in)
	if err == nil || !strings.Contains(err.Error(), "its deployment is not known (no hardware recorded): give --hardware") {
		t.Fatalf("a run without hardware: %v", err)
	}
	assertNoFile(t, out)
	stdout, stderr, err := opaltrace(t, "replay", "--hardware", "a100-40gb", "--tp", "8", "-o", out, in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "llama-3.3-70b on 8×a100-40gb (TP8), vllm, 1 worker") || !strings.Contains(stderr, "infinite rate, 200 in flight") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "Deployment:                              llama-3.3-70b on 8×a100-40gb (TP8), vllm, 1 worker\n") {
		t.Errorf("the summary does not name the deployment:\n%s", stdout)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil || len(runs) != 1 || len(reqs) != 200 {
		t.Fatalf("%v: %d runs, %d requests", err, len(runs), len(reqs))
	}
	if r := runs[0]; r.Model != "llama-3.3-70b" || r.Hardware != "a100-40gb" || r.TP != 8 || r.Engine != "vllm" {
		t.Errorf("run %+v", r)
	}
}

// The surajssd run at 4 requests/s stored no arrival times: they are
// regenerated as vLLM's benchmark_serving drew them (numpy seeded with 0,
// exponential gaps of mean 1/4 s), so request 1 is sent 0.79587451/4 s
// after request 0, numpy's first exponential draw after seed 0.
func TestReplaySurajssdArrivals(t *testing.T) {
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_04.json")
	out := filepath.Join(dir, "sim.parquet")
	_, stderr, err := opaltrace(t, "replay", "--hardware", "a100-40gb", "--tp", "8", "-o", out, in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "arrivals as vLLM's benchmark_serving drew them: Poisson at 4 req/s, numpy seed 0") {
		t.Errorf("stderr:\n%s", stderr)
	}
	_, reqs, err := trace.ReadFile(out)
	if err != nil || len(reqs) != 200 {
		t.Fatalf("%v: %d requests", err, len(reqs))
	}
	var first, last float64 = 1e9, 0
	for _, r := range reqs {
		a := r.Arrival.V.Seconds()
		if a > 0 && a < first {
			first = a
		}
		last = max(last, a)
	}
	if d := first - 0.79587451/4; d > 1e-8 || d < -1e-8 {
		t.Errorf("second arrival at %.9f s, want %.9f", first, 0.79587451/4)
	}
	// 199 gaps of mean 0.25 s.
	if last < 35 || last > 65 {
		t.Errorf("last arrival at %.1f s, want about 50", last)
	}
}
