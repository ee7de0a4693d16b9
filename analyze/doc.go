// Package analyze is the one place where serving metrics are defined: TTFT,
// TPOT, ITL and E2E distributions, throughputs and per-run summaries,
// computed from trace.Requests exactly as vLLM's benchmark computes them
// (numpy-linear percentiles, population std, pooled ITL, TPOT per request
// as (E2E − TTFT)/(output tokens − 1)).
//
// It does not read files or print; report formats what it computes.
package analyze
