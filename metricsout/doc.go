// Package metricsout writes a simulated run as the metrics a serving
// engine would have exposed during it: OpenMetrics samples with
// timestamps, under the engine's own metric names, so that
// `promtool tsdb create-blocks-from openmetrics` backfills them into
// Prometheus and the engine's published Grafana dashboards show a replay
// beside production.
//
// # Names
//
// vLLM (its v1 engine's Prometheus logger, label model_name and
// engine="0"): histograms vllm:time_to_first_token_seconds,
// vllm:inter_token_latency_seconds (and its older name
// vllm:time_per_output_token_seconds, which older dashboards read),
// vllm:e2e_request_latency_seconds, with vLLM's buckets; gauges
// vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc (0–1); counters vllm:prefix_cache_queries and
// vllm:prefix_cache_hits (tokens), vllm:prompt_tokens,
// vllm:generation_tokens, vllm:request_success.
//
// SGLang (its metrics collector, label model_name):
// sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds,
// sglang:e2e_request_latency_seconds with SGLang's buckets; gauges
// sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage,
// sglang:cache_hit_rate; counters sglang:prompt_tokens,
// sglang:generation_tokens, sglang:cached_tokens, sglang:num_requests.
//
// # Times
//
// A sample is written every Interval seconds of simulated time, at the
// run's start (Options.Start) plus that time. A histogram or counter
// sample holds everything observed up to its time, each observation at the
// moment the engine makes it: TTFT at the first token, each inter-token
// gap at its token, E2E and the token and request counters at completion,
// the prefix-cache counters at the first token (the request's prefix
// lookup). A gauge sample is the mean of the per-second statistics of the
// second before it (replay's per-second running, waiting and KV usage).
//
// The families are built as prometheus/client_model's MetricFamily and
// encoded by prometheus/common's OpenMetrics encoder.
package metricsout
