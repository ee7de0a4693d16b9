// Package replay simulates a serving cluster: it replays a trace's
// requests through a router and vLLM-like workers and emits one simulated
// trace.Request per input, with every lifecycle timestamp filled.
//
// A replay is a pipeline:
//
//  1. Workload. The open loop sends each request at its trace arrival
//     time times Config.Workload.TimeScale; the closed loop runs N clients,
//     each sending the next request, in trace order, when its previous one
//     completes; the sessions mode sends each session's turns in order,
//     each its think time after the previous answer, with N sessions at
//     once or each starting at its trace arrival. Regenerate rebuilds a
//     summary-only benchmark run from its recorded arguments with its
//     client's generator (vLLM or SGLang random datasets). Inputs come
//     from a slice (Requests), from columns that keep only what a replay
//     reads (Columns: about a tenth of the memory, for large traces), or
//     from a generator that builds each request when asked (Sampled:
//     Poisson arrivals, lengths drawn from observed pairs), so a
//     million-request replay does not hold its input.
//  2. Client. The simulated client is ClientConfig.LatencySec away from
//     the router, both ways, and gives up after ClientConfig.TimeoutSec.
//     A worker's API server, when ClientConfig.APIServerRequestSec is
//     set, hands the requests routed to it to the scheduler one at a
//     time, that long each (ingress.go); a server's ranks share one
//     (APIServerRanks; a prefill pool's own, PrefillAPIServerRanks).
//  3. Router. A Router picks a worker per request, one file per router
//     (router*.go): round-robin and random (load-blind, routed before the
//     replay starts); least outstanding requests or tokens and power of
//     two choices (on the router's own counts); session affinity
//     (consistent hashing with bounded loads); and the cache-aware
//     routers as deployed: SGLang router's cache_aware (an approximate
//     tree of what it sent, balance thresholds), llm-d's weighted
//     prefix, queue and KV-usage scorers, Dynamo's KV router (the prefill
//     tokens and distinct prompt blocks of what it sent, activeSeqs) and
//     Opal's MaxPrefix as meant (the longest cached prefix); and
//     recorded, the worker each request's trace names (a measured
//     placement, or a replay's read back from its records;
//     disaggregated, its prefill worker too). Scraped
//     worker state and KV events reach
//     the router on ticks of RouterConfig.ViewIntervalSec (0: at once),
//     so its view is as stale as a real one; each output records the
//     router's score of its choice (trace.Request.RouterScore).
//  4. Worker. Each worker runs vLLM v1's scheduler over a KV cache of
//     fixed-size blocks with a full-block prefix cache (package
//     replay/kvcache): running requests first, chunked prefill under a
//     token budget, FCFS admission, recompute preemption only when KV
//     blocks run out. A model.StepModel prices each forward pass; tokens
//     are emitted when the pass ends and streamed in chunks of
//     SchedulerConfig.StreamInterval tokens after the first. With
//     SchedulerConfig.Engine "sglang" each worker runs SGLang's scheduler
//     instead (sglang.go): prefill-first steps (decodes wait, or join with
//     enable_mixed_chunk), the waiting queue by longest prefix match or
//     FCFS, admission by new_token_ratio, retraction when decode runs out
//     of memory, over a token-granular radix cache (kvcache.Radix). Each
//     engine is one file behind the scheduler interface (scheduler.go),
//     owning its KV cache and the defaults of its own settings, and one
//     line of the schedulers table; Config.Effective is the configuration
//     as it ran, every default filled in, which outputs record.
//     With Config.Disaggregation the workers split into a prefill pool
//     and a decode pool (disagg.go): a request prefills on one, its
//     prompt's KV crosses the prefill worker's link, and it decodes on
//     the other, as vLLM's KV connectors and SGLang's PD servers run it.
//     The prefill pool may be a deployment of its own (Options.Prefill,
//     a PoolModel: its step model and KV capacity; prefillpool.go).
//     With Config.Autoscale the fleet is sized as Kubernetes' HPA sizes
//     it, by one metric or several (autoscale.go, autoscalepolicy.go,
//     autoscalemetrics.go): new workers ready after their start-up,
//     drained ones stopped once idle, a replica several workers with
//     data parallelism (AutoscaleConfig.ReplicaWorkers: a server's
//     ranks, started and stopped together); and it may scale to zero as KEDA
//     does (scaletozero.go), requests waiting at the gateway while no
//     worker is ready. Disaggregated, each pool may have an HPA of its
//     own (DisaggregationConfig.PrefillAutoscale, DecodeAutoscale: the
//     autoscaler's pools), or both be sized by Dynamo's SLA planner
//     (planner.go, observing as Dynamo's frontend does, tokens as they
//     stream; its constant or Kalman load predictor, plannerpredict.go)
//     or by its load-based scaling (policy dynamo, plannerload.go), which
//     also sizes an aggregated fleet (Config.Planner). A prefill pool of
//     its own deployment with KV tiers on both pools has the decode
//     pool's own (Options.DecodeOffload).
//  5. Output. Completed, rejected and timed-out requests are emitted as
//     trace.Requests with Source "simulated", in completion order,
//     measured as vLLM's benchmark client measures (first_chunk TTFT,
//     per-chunk ITL, last_token E2E).
//
// # Engine
//
// The engine's files go by concern: engine.go holds the API (Run,
// Options, Stats) and the replay's state, inputs.go the checks and the
// passes over the inputs before the replay, loop.go the event loop and
// the fast-forward window, client.go the client's next requests and
// timeouts, pricing.go the step price tables, recycle.go the reuse of
// request states and records, steady.go fast-forward's inner loop.
//
// The engine is a discrete-event loop over a binary heap of events ordered
// by (time, kind, worker for step ends, else sequence number). There are
// events for arrivals, timeouts and step ends, never one per token, and no
// wall clock; the only randomness is a PCG generator seeded from
// Config.Seed. The same inputs and seed give the same outputs, byte for
// byte. When the workers cannot affect one another (the open loop with a
// load-blind router, no autoscaler, no KV tiers, no step observer), groups
// of workers run their own loops on up to GOMAXPROCS goroutines and a merge
// emits their records in the one loop's order, with the same stats
// (parallel.go; TestPartsSameResults).
//
// # Fast-forward
//
// Most steps change nothing outside their worker. When a worker's step
// ends before any event that could reach it (the next arrival routed to
// it, a timeout of one of its requests) and completes no request, the
// engine builds the next step at once, inline, and queues only the last
// step of such a window: the Mooncake conversation trace's 3.7 million
// steps take some 42,000 events. A steady decode batch (every running
// request decoding, no admission possible) is advanced by an inner loop
// (steadySteps) that allocates blocks as the general scheduler would (under
// SGLang's scheduler: a pool slot per request and step, new_token_ratio
// decaying) and prices each step from a table per batch size indexed by
// the contexts' sum (the step model being a pure function of the batch,
// and the roofline pricing a decode batch by its size and sum alone), at
// a few nanoseconds a step. Inline steps are built and priced as queued
// ones would be, at the same times, so results are identical to stepping
// one event at a time (TestFastForwardSameResults, with both schedulers);
// load-blind routers are run before the replay, which tells each worker
// when its next request arrives and which prefix blocks another request
// on it can hit (only those are indexed).
//
// Per-request state lives only while the request is in flight and is
// recycled, so memory grows with the requests in flight plus what the
// emitted records hold; with Options.Transient the records are reused
// too, for a consumer that copies what it needs (trace.Writer does). A
// million generated requests on 64 workers replay in about 3.5 s on one
// core (BenchmarkReplayAzureMillion).
//
// KV tiers (Options.Offload) are vLLM's offloading under its scheduler
// (offload.go) and SGLang's HiCache under SGLang's, with its page sizes
// (hicache.go).
//
// # Not yet
//
// ShareGPT-style regenerated workloads, a request rate capped by a max
// concurrency, and fast-forward across workers in the closed loop and the sessions mode
// (whose windows end at the next event anywhere) are later work; see the
// design document.
//
// Per-second statistics (Options.PerSecond, trace.WriteSeconds) give, for each
// simulated second, arrivals, completions, timeouts, rejections, running
// and waiting requests, GPU busy fraction, KV blocks used, steps and
// tokens per step.
package replay
