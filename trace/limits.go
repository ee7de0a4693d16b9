package trace

import "time"

// The sane range of a request's values. A value outside it is not data but
// a corrupt or misread record (an epoch time taken for an offset, a
// latency written in the wrong unit, an overflow), and Validate rejects it,
// so every reader turns it into a bad record before any consumer sizes an
// array, a histogram or a loop by it.
//
// Note: the bounds are far outside every real trace (the longest production
// traces span weeks; a request that waits a day has failed) and well inside
// what int64 nanoseconds and float64 seconds hold exactly, so arithmetic on
// valid values cannot overflow: a time ± a duration, or the difference of
// two times, stays below 2⁶³ ns (292 years).
const (
	// MaxTraceTime bounds every time of a request (Arrival, the lifecycle
	// times): at most 10 years (of 365.25 days) before or after the start
	// of the trace.
	MaxTraceTime = Time(3652.5 * 24 * float64(time.Hour))
	// MaxLatencySec bounds a request's measured durations (TTFT, E2E, each
	// ITL gap, the server-side waits and phases): under a day.
	MaxLatencySec = 24 * 3600.0
	// MaxThinkSec bounds the waits outside a request (a session's think
	// time, a client's queue before sending): as long as the trace.
	MaxThinkSec = float64(MaxTraceTime / Time(time.Second))
	// MaxStringBytes bounds each string of a request (ids, labels, model,
	// error message) and of a run's metadata: 1 MiB, far over any real id
	// or error text, so that one field cannot hold a file's worth of
	// bytes in every row and in the Parquet metadata.
	MaxStringBytes = 1 << 20
	// MaxReportedBytes bounds a run's Reported summary (the source's own
	// JSON without the per-request arrays).
	MaxReportedBytes = 16 << 20
	// MaxTokens bounds a request's token counts (prompt, output, cached,
	// hits): a billion, a hundred times the longest context of any model.
	MaxTokens = 1_000_000_000
	// ConsistencyTolSec is how far the parts of a request's latency may
	// overshoot the whole (TTFT over E2E, TTFT + ΣITL over E2E) before the
	// request is inconsistent: the sources write latencies to the
	// microsecond or finer (vLLM, SGLang and GuideLLM full floats, AIPerf
	// ms to 6 decimals), so the parts, each rounded on its own, overshoot
	// by far less.
	ConsistencyTolSec = 1e-5
	// ConsistencyTolRel is the relative part of the same tolerance: float
	// sums of thousands of gaps drift by far less than this fraction.
	ConsistencyTolRel = 1e-6
)
