// Package ingest reads request traces and benchmark results in the formats
// other tools write and converts every record to a trace.Request, with the
// runs it belongs to as trace.Run. It owns one file per input format, the
// format registry with sniffing, and SyntaxError. It does not compute
// metrics (package analyze) or write Parquet (package trace).
//
// # Pipeline
//
//  1. Detect peeks at the first SniffLen bytes of an input, decompresses
//     gzip transparently, and asks each registered format, in the order of
//     the formats table, whether it recognises the input; Options.Format
//     (--format) overrides detection.
//  2. The format's Reader yields Records in input order: a good
//     *trace.Request or a bad record as *SyntaxError ("FILE:LINE: field:
//     what is wrong"). Bad records are not fatal; Err reports the fatal
//     (I/O) error that ended the input.
//  3. Files runs this over files and directories, calls back for good and
//     bad records, stops past Options.MaxErrors, and returns the runs with
//     names unique in the dataset: PREFIX#N for the Nth run of an input.
//
// Every request gets Run = its run's name, Source = the format name and
// RequestID = the source's id or "RUN/INDEX" (0-based index in the run).
//
// # Formats
//
// vllm-bench: the --save-result JSON of vLLM's benchmark_serving.py and
// vllm bench serve, one or more run objects per file (old and new layouts,
// "inf" rates, bare NaN/Infinity, the "request_goodput:" key kept verbatim
// in Run.Reported, where bare NaN/Infinity become the strings "NaN" and
// "Infinity"). Per request: input_lens, output_lens, ttfts, itls
// (chunk gaps), errors, and when present latencies (E2E), start_times
// (arrival, perf_counter seconds relative to the run's earliest time) and
// queue_times (client-side wait: intended arrival = start − queue). Old
// layouts do not save per-request latencies, and their TPOT used
// latency = perf_counter() after the stream loop, which ttft + Σitl
// underestimates by ~1 ms, so E2E is left absent there and analyze uses the
// run's reported summary. A failed request's 0 placeholders (ttft, output
// length, latency) are absent, not 0. Arrays of different lengths make
// the whole run bad; a bad element drops only its request. Positions: a
// request's Pos line is its 1-based element number; a SyntaxError's Line is
// the line where the run object starts (the message names array and index).
//
// mooncake: Mooncake/timed_trace JSON lines {"timestamp": ms,
// "input_length", "output_length", "hash_ids"}; one run per file; the
// output length is the requested one; Options.BlockSize tokens per hash id
// (default 512). Streamed line by line with a hand decoder.
//
// sglang-bench: python -m sglang.bench_serving JSONL, one run per line
// (sglangbench.go): summary-only runs keep their summary and workload
// arguments; --output-details arrays become requests (walked in step, see
// colscan.go); server_info names the engine, model, TP and PD
// disaggregation; accept_length marks speculative decoding; non-synthetic
// datasets (ShareGPT…) mark the run Approximate. sglang-metrics: SGLang's
// --export-metrics-to-file and --log-requests-format json lines
// (sglangmetrics.go). sglang-trace: the per-request TTFT/HiCache line
// (sglangtrace.go). otlp: OTLP/JSON spans of vLLM and SGLang (otlp.go).
//
// # Client and production-trace formats
//
// Each file's doc comment is the format's spec: what maps to which column
// and which semantics it records. aiperf (aiperf.go): profile_export.jsonl,
// old and new metadata, error records as failed rows, its _aiperf.json
// aggregate paired as Reported (read alone, a summary-only run:
// summaryonly.go). genai-perf (genaiperf.go):
// profile_export.json, one run per experiment. guidellm (guidellm.go):
// benchmarks.json 0.5 and 0.2–0.3, one run per benchmark, errored and
// incomplete requests kept. llmperf (llmperf.go): individual_responses,
// no arrivals, its _summary.json paired as Reported (alone, a
// summary-only run). inference-perf
// (inferenceperf.go): per-request lifecycle metrics, one run per stage,
// and stage summaries as summary-only runs. lmbenchmark (lmbenchmark.go):
// LMBenchmark's ShareGPT per-request CSV (llm-d's benchmark results), the
// rate from the file name, streamed. azure (azure.go) and burstgpt
// (burstgpt.go): production CSVs, streamed. agentic (agentic.go):
// per-session JSON with namespaced hash ids and think times. opal
// (opal.go): Opal's per-stage opal_stats.json. vllm-engine
// (vllmengine.go): vLLM's engine-side RequestStateStats per request
// (queue, prefill, decode), with the run's meta.json and per-second
// timeseries.csv beside it. Formats whose time origin
// is only known at the end (epoch or perf_counter clocks in completion
// order) and JSON documents load one input at a time (clientutil.go).
//
// # Source semantics and run metadata
//
// Every request carries how its source measured (itl_unit, ttft_basis,
// e2e_basis, output_tokens_source); benchmark runs repeat them in
// Run.Extra so a summary-only run says it too. Run.Engine comes from what
// the file says about the server (server_info, server-side formats, span
// names), never from a client's backend field, or from Options.Engine.
// Options.Model, Hardware, TP, Engine, EngineVersion and EngineOpts (the command line)
// fill what a file leaves blank; a contradiction is a fatal error
// (runmeta.go).
package ingest
