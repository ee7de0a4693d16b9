// Package analyze is the one place where serving metrics are defined,
// computed from trace.Requests (observed or simulated, one code path). It
// does not read files or print; report formats what it computes.
//
//  1. Summary (summary.go): vLLM's calculate_metrics — TTFT, TPOT, ITL
//     (pooled) and E2E with numpy's pairwise mean, population std, median
//     and linear percentiles (numpy.go, dist.go), bit-exact with numpy;
//     counts by status; the semantics the values were measured under; mean
//     tokens per chunk; goodput under SLOs (goodput.go) and vLLM's peak
//     output tokens/s and peak concurrency (peak.go), both as vLLM computes
//     them; trimming of warmup and cooldown (trim.go). A Summarizer
//     (summarizer.go) makes the same summary from requests added one at a
//     time, as a replay emits them: the pooled ITL gaps, millions in a
//     simulated run but of few distinct values, are counted by value as
//     they come (distinct.go) rather than sorted at the end. It stays
//     bit-exact with numpy: the counted values, each written as often as
//     it was counted, are the pool sorted, and the mean and std are
//     numpy's pairwise sums over the pooled order (meanStdPooled), which
//     Summary computes on goroutines of its own while it does the rest.
//  2. Sections (analysis.go): steady-state detection (MSER-5, shown, never
//     applied), TTFT decomposition by TTFT percentile band (decomp.go), KV
//     cache and tier shares (kvcache.go), per-second series on a 1-s grid
//     (series.go), and grouping by run, stage, worker or model (group.go).
//  3. Prefix-cache what-if (cachecurve.go): the exact hit rate of an ideal
//     block-level LRU cache at every capacity in one O(n log n) pass
//     (Mattson's stack distances over a Fenwick tree).
//  4. Comparison of two datasets (compare.go): per metric and statistic the
//     absolute and relative difference with seeded bootstrap intervals, KS
//     and Wasserstein-1 distances and a verdict against a margin; a
//     summary-only run compared on the statistics its source reported
//     (reported.go); runs paired one to one, a replay with the run it
//     replays or in order, never a sweep pooled (pair.go).
//  5. Bounded memory (stream.go, streamsum.go): the same summary in a few
//     passes over a Source, for pooled ITLs of 10⁸ values: exact selection
//     of the ranks by refining histograms of float64 bit patterns, and
//     numpy's pairwise sums computed streaming over the tree numpy uses.
//  6. Source views (assource.go): a run summarized as its client tool did
//     (AIPerf, GuideLLM), with the tool's names, windows and percentile rule.
//
// The numpy exactness is tested without ../shared on vectors numpy computed
// (testdata/numpy: gen.py makes vectors.json; n = 7, 8, 128, 129 and 1000,
// interpolation fractions on both sides of 0.5).
//
// Note: montanaflynn/stats, named in the original design, is not used: it
// is not numpy to the last bit and has no multi-pass mode (every function
// takes the whole slice). Measured on those 15 vectors (numpy 1.24.2) with
// v0.14.0: Mean sums left to right and differs from np.mean on 12 of 15
// (by up to 9 ulp, the last 4 bits); StandardDeviationPopulation on 6 of
// 15 (up to 3 ulp, 2 bits); Percentile, at numpy's linear rank
// (n−1)·p/100, interpolates as a+f·(b−a) only, so it differs on 13 of the
// 144 percentiles whose fraction f is ≥ 0.5 (up to 19 ulp, 5 bits), and
// refuses p = 0. v0.7.1, the version most modules pin, defines the
// percentile otherwise (the value at rank p·n/100, or the mean of two
// neighbours): 243 of 300 percentiles differ, 39 are refused.
package analyze
