// Package calibrate fits the coefficients of package model's cost models
// to measurements, and writes them with their provenance and fit quality
// as a costmodel.yaml that replay reads.
//
// # Fits
//
// Each quantity is fitted by non-negative least squares (Lawson–Hanson,
// on gonum) of relative residuals, on regressors computed from a
// model.Deployment's shapes at full efficiency (model.Deployment.Terms):
//
//  1. prefill_s: time from the first forward pass to the first token,
//     against the matmul and attention seconds of the uncached prompt
//     tokens over their cached context, plus a fixed cost, and — when the
//     trace has prefill intervals — the compute of the prefills that ran
//     at the same time. Coefficients: 1/MFU, 1/attention MFU, step
//     overhead, and for a MoE model whose expert_mfu a table fit is given
//     (--fix, --assume) 1/expert MFU on the routed experts' part of the
//     matmuls. In the Opal form the regressors are Opal's a and b terms.
//  2. decode_s_per_token: decode time / (output tokens − 1), against the
//     KV bytes of the batch (reconstructed from the decode intervals of
//     all requests, else the request's own context), the number of
//     running requests, and the prefill compute that shared the decode
//     steps. Coefficient: 1/bandwidth efficiency.
//  3. storage_io_s: storage prefetch I/O time (SGLang L3_pf_io) against
//     storage-hit bytes → NVMe bandwidth and latency.
//  4. host_fetch_s: KV fetch time of requests whose hits are all in host
//     memory, against their bytes → PCIe bandwidth and latency.
//
// FitServerSide fits all that the trace has; FitTable fits prefill to a
// measurement table (ParseTable: Opal's {"<prompt_len>": seconds} JSON or
// a CSV). Records the model underpredicts by more than 4 robust standard
// deviations are set aside as contended (interference only adds time).
//
// Every fit reports R², MAPE and residual quantiles, and each coefficient
// is checked: a regressor with no data (no hits of a tier), too narrow a
// range, collinear with the others, held at its bound, or with a standard
// error over half its value is marked not identified, and NewCostModel
// leaves it out of the cost model (replay keeps its default) with a
// warning. Coefficients above physical peak are left out too.
//
// # Fit by replay in the loop
//
// FitReplay fits runs that have only client-side latencies, engine
// timestamps or a benchmark's summary: it replays each training run
// through package replay with candidate coefficients and minimises the
// mean squared log error of the runs' TTFT, ITL and E2E quantiles (or
// queue, prefill and decode), plus a weak prior, by Levenberg–Marquardt
// with a forward-difference Jacobian whose points replay in parallel
// (levmar.go), within bounds (a fraction of peak is at most 1 here as in
// every cost model). What is fitted by default depends on what the runs
// can tell (defaultFree): the KV bandwidth efficiency, for one, only when
// KV reads are a fair share of some training run's memory traffic.
// Held-out runs are only predicted; the error table of every run, in-sample
// or held out, is kept with the coefficients.
//
// With the table comes the sweep's saturation step (saturation.go): the
// lowest finite request rate of the fitted and held-out runs whose p99
// TTFT exceeds a threshold (issue 13's 1 s by default), observed and as
// the uncalibrated and calibrated replays predict it, and a verdict (same
// step, N steps early or late, none saturated). Offline runs (rate inf)
// are not steps. A summary-only run that reports no p99 counts as
// saturated when a lower quantile it reports (p90, p50) exceeds the
// threshold, since p99 is at least as high, and as unknown otherwise;
// unknown steps before the first saturated one leave the observed step a
// range, and a replay's step inside it is "not determined".
//
// A run that followed another on the same server with the same prompts
// (SameSession, from their metadata) can be replayed after it, with the
// prefix cache it left (carry.go): sweeps are measured that way.
//
// A run is replayed on the deployment that was measured, KV tiers
// (ReplayRun.Offload: a CPU tier, LMCache, SGLang's HiCache; their links
// as the deployment gives them, not fitted) and a disaggregated prefill
// pool of its own TP or batch limits included (ReplayRun.Prefill: its
// steps priced by the same coefficients on its layout, since one GPU's
// coefficients price any layout of it; a prefill pool on another GPU
// would need that GPU's, and package deploy's caller refuses it). A
// run's layouts are all counted where the default fit asks for two
// (the collectives' latency).
package calibrate
