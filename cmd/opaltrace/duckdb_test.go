package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/opaltrace/opaltrace/internal/duckdbtest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// TestDuckDBReadsIngestedFiles ingests a real file of every format with
// per-request records and has DuckDB, an independent Parquet reader,
// recount what opaltrace reads back: rows, present values, token totals,
// and the sums of the latencies and ITL lists. The writer encodes its own
// pages (trace/pqchunk.go); this is the check that other tools read them
// as we do, on data as the tools write it (nulls, empty lists, distinct
// strings).
func TestDuckDBReadsIngestedFiles(t *testing.T) {
	files := []string{
		lambdaLabs,
		"formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export.jsonl",
		"formats/guidellm/danielkorat_guidellm-bench_Qwen_Qwen3-4B-Thinking-2507_tp2_quant-fp8_benchmarks.json",
		"formats/llmperf/ray-project_llmperf_vllm_Yi-1-5-34B-Chat_550_150_c16_individual_responses.json",
		"formats/otel/anud18_qwen36-vllm-aiperf-benchmark_sample_vllm_spans.jsonl",
		"traces/mooncake/conversation_trace.jsonl",
		"traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv",
		"traces/weka_agentic_coding/trace_0012.json",
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x.parquet")
			if _, stderr, err := opaltrace(t, "ingest", "-o", out, shareddata.Path(t, name)); err != nil {
				t.Fatalf("ingest: %v\n%s", err, stderr)
			}
			_, reqs, err := trace.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{"n": float64(len(reqs))}
			for _, r := range reqs {
				add := func(k string, v float64) { want[k] += v }
				if v, ok := r.TTFTSec.Get(); ok {
					add("ttfts", 1)
					add("ttft_sum", v)
				}
				if v, ok := r.E2ESec.Get(); ok {
					add("e2e_sum", v)
				}
				if v, ok := r.Arrival.Get(); ok {
					add("arrival_sum", v.Seconds())
				}
				add("input", float64(r.InputTokens.Or(0)))
				add("output", float64(r.OutputTokens.Or(0)))
				add("hash_ids", float64(len(r.HashIDs)))
				if r.ITLSec != nil {
					add("lists", 1)
				}
				add("gaps", float64(len(r.ITLSec)))
				for _, g := range r.ITLSec {
					add("itl_sum", g)
				}
				if r.Worker != "" {
					add("workers", 1)
				}
			}
			q := "'" + out + "'"
			got := duckdbtest.Query(t, "SELECT count(*) AS n, count(ttft_s) AS ttfts, coalesce(sum(ttft_s), 0) AS ttft_sum, "+
				"coalesce(sum(e2e_s), 0) AS e2e_sum, coalesce(sum(arrival_s), 0) AS arrival_sum, "+
				"coalesce(sum(input_tokens), 0) AS input, coalesce(sum(output_tokens), 0) AS output, "+
				"coalesce(sum(len(hash_ids)), 0) AS hash_ids, count(itl_s) AS lists, coalesce(sum(len(itl_s)), 0) AS gaps, "+
				"coalesce(sum(list_sum(itl_s)), 0) AS itl_sum, count(worker) AS workers FROM "+q)[0]
			for k, w := range want {
				g := duckdbtest.Number(got[k])
				if math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
					t.Errorf("%s: DuckDB reads %v, opaltrace %v", k, got[k], w)
				}
			}
			if want["n"] == 0 {
				t.Error("no requests: pick a file with per-request records")
			}
		})
	}
}
