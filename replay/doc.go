// Package replay simulates a serving cluster: it replays a trace's
// requests through a router and vLLM-like workers and emits one simulated
// trace.Request per input, with every lifecycle timestamp filled.
//
// A replay is a pipeline:
//
//  1. Workload. The open loop sends each request at its trace arrival
//     time times Config.Workload.TimeScale; the closed loop runs N clients,
//     each sending the next request, in trace order, when its previous one
//     completes.
//  2. Router. A Router picks a worker per request (round-robin, random).
//  3. Worker. Each worker runs vLLM v1's scheduler over a KV cache of
//     fixed-size blocks with a full-block prefix cache (package
//     replay/kvcache): running requests first, chunked prefill under a
//     token budget, FCFS admission, recompute preemption only when KV
//     blocks run out. A model.StepModel prices each forward pass; tokens
//     are emitted when the pass ends.
//  4. Output. Completed and rejected requests are emitted as
//     trace.Requests with Source "simulated", in completion order.
//
// # Engine
//
// The engine is a discrete-event loop over a binary heap of events ordered
// by (time, kind, sequence number). There is one event per worker step
// and one per arrival, never one per token, no goroutines and no wall
// clock; the only randomness is a PCG generator seeded from Config.Seed.
// The same inputs and seed give the same outputs, byte for byte.
//
// Per-request state lives only while the request is in flight and is
// recycled, so a trace of a million requests costs memory for the
// requests in flight plus what the emitted records hold.
//
// # Not yet
//
// SGLang's scheduler, KV tiers below the GPU, network and client
// overheads, stream intervals above 1 token, sessions with think time,
// synthetic workloads, and fast-forwarding of steady decode batches are
// later work; see the design document.
package replay
