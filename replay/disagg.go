package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// A DisaggregationConfig splits the workers into a prefill pool and a
// decode pool (prefill/decode disaggregation), as vLLM runs it with a KV
// connector that moves the prompt's KV between instances (NixlConnector,
// MooncakeConnector: kv_producer and kv_consumer) behind its proxy
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py). Off unless
// PrefillWorkers is set.
//
// A request goes to a prefill worker (chosen by the router among the
// prefill pool), which computes its prompt as a request of one output
// token (the proxy sends it with max_tokens 1); when that token is
// computed the request goes to a decode worker (DecodeRouter's: the
// proxy's next decode instance in turn by default, chosen then under
// vLLM, at the request's arrival under SGLang), and the prompt's KV
// crosses the prefill worker's link, one transfer at a time a link. The decode worker then schedules the request with every prompt
// token but the last one computed (vLLM's scheduler recomputes the last
// one to get its logits: _update_waiting_for_remote_kv,
// num_computed_tokens −1 when the whole prompt was received), so its first
// token comes from a one-token step there, and it decodes the rest.
//
// Under vLLM the decode worker starts the load: the request waits in its
// queue, in turn (FCFS), until its scheduler allocates the blocks of the
// whole prompt (allocate_slots for the external tokens, the request then
// WAITING_FOR_REMOTE_KVS, skipped by later passes until the load ends),
// so a busy decode worker starts it at its next step's start, and one
// short of memory when room is freed; the blocks of a prefix its own
// cache holds are taken as hits and only the rest of the prompt is sent
// (the connectors' get_num_new_matched_tokens); the hashes of the loaded
// blocks are committed when the load ends (cache_blocks), and the request
// is taken at the next pass, first in the queue. The prefill worker keeps
// the prompt's blocks until the transfer ends (vLLM's delay-free of the
// blocks a decode instance reads). SGLang's decode server takes the whole
// prompt, as it does by default (its decode radix cache,
// --disaggregation-decode-enable-radix-cache, is off), into tokens it
// pre-allocates when the request arrives, in order while they fit with
// its reserve for the requests it holds (its PreallocQueue:
// sgReservedDecodeTokens), and the prefill server holds the request back until
// then (its bootstrap queue: the prefill waits for where its KV goes;
// engine.awaitPrealloc, preallocate). vLLM's proxy sends the
// decode request when the prefill response is back, so it passes the
// decode worker's API server (client.api_server_request_s) before its
// load; SGLang's router sends it to both servers at once, and the decode
// server's API pass overlaps the prefill. The proxy's own hops cost
// nothing past the client latency.
//
// Where vLLM's FCFS admission would stall for good (a request preempted
// on a decode worker at the front of its queue, unable to fit, while
// loaded requests behind it hold the blocks it needs and nothing runs)
// the loaded ones go first (disagg.unstall).
//
// With KV tiers, under vLLM (its offloading) as vLLM runs its KV
// connector for the hand-over beside its offloading connector
// (MultiConnector: NixlConnector first, then OffloadingConnector or
// LMCacheConnectorV1) and as Dynamo runs KVBM on its prefill workers
// (PdConnector; its decode workers run NIXL alone):
//   - A prefill worker looks its prompts up in its tiers and loads
//     their hits before it computes the rest, and writes the prompt
//     blocks it computes to its tiers as its steps end, as an
//     aggregated worker does: the hand-over's connector matches
//     nothing for a prefill request, so the offloading connector's
//     hits are the ones loaded (MultiConnector.get_num_new_matched_tokens
//     takes the first connector that matches any).
//   - A decode worker loads a handed-over prompt from its prefill
//     worker only: the hand-over's connector, first, matches it. With
//     DecodeKVTiers it has tiers of its own (host and disk; the shared
//     remote store only to look up), into which it writes the prompt
//     it received, every full tier block its tiers lack (vLLM's
//     offloading connector stores a request's blocks from its first,
//     the offloading manager skipping those it holds), and from which a
//     request it preempted loads its prompt back; without, it has none,
//     as Dynamo's decode workers.
//
// Under SGLang, HiCache runs on the prefill servers, as SGLang's HiCache
// guide deploys it with PD: they prefetch from L3 as a request joins
// their queue (the bootstrap queue's add), load L2 hits in the step and
// write through, as an aggregated server does; the decode servers have
// none (no hits without their decode radix cache; their decode offload
// writes decoded tokens, which replays do not write): DecodeKVTiers is
// refused under SGLang.
//
// A record's kv_fetch_s is then the wait for its prefill worker's tier
// loads and for the hand-over's transfer; its host, storage and remote
// hit tokens are its prefill worker's.
type DisaggregationConfig struct {
	// PrefillWorkers is the size of the prefill pool: workers 0 to
	// PrefillWorkers−1 prefill, the others decode (0: no
	// disaggregation).
	PrefillWorkers int `yaml:"prefill_workers,omitempty"`
	// KVBytesPerToken is the KV a prompt token sends, all of a worker's
	// GPUs together (package deploy sets it from the model).
	KVBytesPerToken int64 `yaml:"kv_bytes_per_token,omitempty"`
	// TransferGBps is the rate at which a prefill worker sends KV, in
	// GB/s (1e9 bytes), and TransferLatencySec the fixed time of each
	// transfer (package deploy sets both from the node's network
	// unless given).
	TransferGBps       float64 `yaml:"transfer_gbps,omitempty"`
	TransferLatencySec float64 `yaml:"transfer_latency_s,omitempty"`
	// DecodeRouter is how the decode worker of a request is chosen:
	// DecodeRoundRobin (the default; vLLM's proxy cycles through its
	// decode instances), DecodeLeastRequests, DecodeRandom or
	// DecodePowerOfTwo (sgl-router's decode policies). Under vLLM it is chosen
	// when the prefill ends (the proxy sends the decode request when the
	// prefill response is back); under SGLang when the request arrives,
	// with its prefill worker (SGLang's router picks the pair at once,
	// select_pd_pair, and sends the request to both).
	DecodeRouter string `yaml:"decode_router,omitempty"`
	// PrefillAutoscale and DecodeAutoscale size the pools apart, each
	// by an HPA of its own (AutoscaleConfig, scale to zero aside), as
	// llm-d and Dynamo deploy the prefill and the decode workers as
	// two deployments that scale on their own metrics: the prefill
	// pool's arrivals are the requests', the decode pool's the
	// hand-overs (request_rate), and each pool's queue_depth,
	// in_flight and kv_usage are its own workers'. A pool's
	// max_replicas defaults to its workers at the start; a pool
	// without one keeps its workers. Its slots follow the other
	// pool's: the prefill pool's slots are 0 to its most − 1.
	PrefillAutoscale AutoscaleConfig `yaml:"prefill_autoscale,omitempty"`
	DecodeAutoscale  AutoscaleConfig `yaml:"decode_autoscale,omitempty"`
	// Planner sizes both pools as Dynamo's SLA planner does
	// (planner.go), in place of the two HPAs.
	Planner PlannerConfig `yaml:"planner,omitempty"`
	// DecodeKVTiers gives the decode pool the KV tiers too (vLLM);
	// by default only the prefill pool has them (above).
	DecodeKVTiers bool `yaml:"decode_kv_tiers,omitempty"`
	// PrefillHardware and PrefillTP give the prefill pool a deployment
	// of its own: another GPU (a preset name) or another TP size than
	// the cluster's, whose workers the decode pool is (0, "": the
	// cluster's). Package deploy resolves it into the pool's step model
	// and KV capacity (Options.Prefill), which the replay needs.
	PrefillHardware string `yaml:"prefill_hardware,omitempty"`
	PrefillTP       int    `yaml:"prefill_tp,omitempty"`
	// PrefillDP is the prefill servers' data-parallel ranks when they
	// are not the cluster's dp (0: the cluster's): vLLM's wide-EP PD
	// deployments launch the two pools with data-parallel sizes of their
	// own. Each rank is a worker, as the cluster's are.
	PrefillDP int `yaml:"prefill_dp,omitempty"`
	// PrefillNodesPerWorker is the nodes a prefill worker of its own
	// deployment spans (0 or 1: one), on the cluster's inter_node
	// network; the cluster's nodes_per_worker is the decode workers'.
	PrefillNodesPerWorker int `yaml:"prefill_nodes_per_worker,omitempty"`
	// PrefillScheduler gives the prefill workers batch limits of their
	// own (0: the cluster's scheduler's), as PD deployments launch the
	// prefill instances with their own flags.
	PrefillScheduler PoolScheduler `yaml:"prefill_scheduler,omitempty"`
}

// A PoolScheduler is a pool's own batch limits, each 0 for the cluster
// scheduler's: vLLM's max_num_batched_tokens and max_num_seqs, SGLang's
// chunked_prefill_size and max_running_requests.
type PoolScheduler struct {
	MaxNumBatchedTokens int64 `yaml:"max_num_batched_tokens,omitempty"`
	MaxNumSeqs          int   `yaml:"max_num_seqs,omitempty"`
	ChunkedPrefillSize  int64 `yaml:"chunked_prefill_size,omitempty"`
	MaxRunningRequests  int   `yaml:"max_running_requests,omitempty"`
}

// On reports whether the pool has a limit of its own.
func (p PoolScheduler) On() bool { return p != PoolScheduler{} }

// Apply returns s with p's limits in place of its own.
func (p PoolScheduler) Apply(s SchedulerConfig) SchedulerConfig {
	s.MaxNumBatchedTokens = cmp.Or(p.MaxNumBatchedTokens, s.MaxNumBatchedTokens)
	s.MaxNumSeqs = cmp.Or(p.MaxNumSeqs, s.MaxNumSeqs)
	s.ChunkedPrefillSize = cmp.Or(p.ChunkedPrefillSize, s.ChunkedPrefillSize)
	s.MaxRunningRequests = cmp.Or(p.MaxRunningRequests, s.MaxRunningRequests)
	return s
}

// validate checks p's limits for a pool of engine's workers.
func (p PoolScheduler) validate(key, engine string, bad func(field, format string, args ...any)) {
	for _, f := range []struct {
		name   string
		v      int64
		sglang bool
	}{{"max_num_batched_tokens", p.MaxNumBatchedTokens, false}, {"max_num_seqs", int64(p.MaxNumSeqs), false},
		{"chunked_prefill_size", p.ChunkedPrefillSize, true}, {"max_running_requests", int64(p.MaxRunningRequests), true}} {
		switch {
		case f.v < 0:
			bad(key+"."+f.name, "negative (%d)", f.v)
		case f.v > 0 && f.sglang != (engine == EngineSGLang):
			bad(key+"."+f.name, "is not a setting of %s's scheduler", engine)
		}
	}
}

// ownPrefill reports whether the prefill pool has a deployment of its
// own (PrefillHardware, PrefillTP, PrefillDP, PrefillNodesPerWorker).
func (d DisaggregationConfig) ownPrefill() bool {
	return d.PrefillHardware != "" || d.PrefillTP != 0 || d.PrefillDP != 0 || d.PrefillNodesPerWorker != 0
}

// prefillTiersOnly reports whether the KV tiers (an Offload's) are the
// prefill pool's alone: disaggregated, without DecodeKVTiers.
func (d DisaggregationConfig) prefillTiersOnly() bool { return d.on() && !d.DecodeKVTiers }

// TieredWorkers is how many of c's workers at the start have the KV
// tiers: all of them, or the prefill pool (prefillTiersOnly).
func (c Config) TieredWorkers() int {
	if d := c.Disaggregation; d.prefillTiersOnly() {
		return d.PrefillWorkers
	}
	return max(c.Workers, 1)
}

// decodeWorkers is the decode pool at the start of a fleet of workers.
func (d DisaggregationConfig) decodeWorkers(workers int) int {
	return max(workers, 1) - d.PrefillWorkers
}

// scaled reports whether an HPA or the planner sizes either pool.
func (d DisaggregationConfig) scaled() bool {
	return d.PrefillAutoscale.on() || d.DecodeAutoscale.on() || d.Planner.on()
}

// withDefaults fills the pools' autoscalers' defaults.
func (d DisaggregationConfig) withDefaults(workers int) DisaggregationConfig {
	if d.on() {
		d.PrefillAutoscale = d.PrefillAutoscale.withDefaults(d.PrefillWorkers)
		d.DecodeAutoscale = d.DecodeAutoscale.withDefaults(d.decodeWorkers(workers))
		d.Planner = d.Planner.withDefaults()
	}
	return d
}

// slots returns the prefill pool's slots and the decode pool's: their
// workers at the start, or, sized by an HPA, its max_replicas when more.
func (d DisaggregationConfig) slots(workers int) (prefill, decode int) {
	prefill, decode = d.PrefillWorkers, d.decodeWorkers(workers)
	if a := d.PrefillAutoscale; a.on() {
		prefill = max(prefill, a.mostWorkers())
	}
	if a := d.DecodeAutoscale; a.on() {
		decode = max(decode, a.mostWorkers())
	}
	if p := d.Planner.withDefaults(); p.on() {
		prefill, decode = max(prefill, p.most(true)*p.poolReplicaWorkers(true)), max(decode, p.most(false)*p.poolReplicaWorkers(false))
	}
	return prefill, decode
}

// The decode routers (DisaggregationConfig.DecodeRouter).
const (
	// DecodeRoundRobin takes the decode workers in turn, whatever their
	// load: vLLM's toy proxy (itertools.cycle over its decode clients).
	DecodeRoundRobin = "round_robin"
	// DecodeLeastRequests takes the decode worker with the fewest
	// outstanding requests by the proxy's own count: those it sent there
	// (KV on its way, or arrived) and not completed; ties go to the
	// first after the last one chosen, so an idle pool is taken in turn
	// (the cluster router least_requests, over the decode pool).
	DecodeLeastRequests = "least_requests"
	// DecodeRandom takes a decode worker at random (seeded), as
	// sgl-router's random policy.
	DecodeRandom = "random"
	// DecodePowerOfTwo samples two distinct decode workers (seeded) and
	// takes the one with fewer outstanding requests, by the count
	// DecodeLeastRequests keeps, the first sampled on a tie (sgl-router's
	// power_of_two; the cluster router power_of_two over the decode pool).
	DecodePowerOfTwo = "power_of_two"
	// DecodeDynamo is Dynamo's decode router: its KV router as Dynamo
	// derives it for decode workers (derive_decode_router_config:
	// overlap_score_weight 0, router_assume_kv_reuse and
	// router_track_prefill_tokens off), whose logit is the decode
	// worker's active blocks plus the request's: each request it sent
	// there and has not seen end holds its prompt's full blocks, none
	// counted as another's. The fewest wins, ties at random; above a
	// router_temperature of 0, which Dynamo's decode router keeps, a
	// worker is drawn as the cluster router draws one (softmaxPick). The
	// default decode router when the cluster's router is dynamo_kv.
	DecodeDynamo = "dynamo_kv"
)

// on reports whether the workers are disaggregated.
func (d DisaggregationConfig) on() bool { return d.PrefillWorkers > 0 }

func (d DisaggregationConfig) validate(c Config, bad func(field, format string, args ...any)) {
	if d.PrefillWorkers < 0 {
		bad("disaggregation.prefill_workers", "negative (%d)", d.PrefillWorkers)
	}
	if !d.on() {
		if d.ownPrefill() || d.PrefillScheduler.On() {
			bad("disaggregation.prefill_workers", "missing: prefill_hardware, prefill_tp, prefill_dp, prefill_nodes_per_worker and prefill_scheduler are the prefill pool's")
		}
		return
	}
	workers := max(c.Workers, 1)
	if d.PrefillWorkers >= workers {
		bad("disaggregation.prefill_workers", "%d leaves no decode worker of %d workers", d.PrefillWorkers, workers)
	}
	// 0s are absent here: package deploy fills them from the model and
	// the node, and Run refuses them (figures).
	if d.KVBytesPerToken < 0 {
		bad("disaggregation.kv_bytes_per_token", "negative (%d)", d.KVBytesPerToken)
	}
	if !(d.TransferGBps >= 0) || d.TransferGBps > 1e6 {
		bad("disaggregation.transfer_gbps", "%v is not a rate in GB/s in (0, 1e6]", d.TransferGBps)
	}
	if !(d.TransferLatencySec >= 0) || d.TransferLatencySec > 3600 {
		bad("disaggregation.transfer_latency_s", "%v is not a number of seconds in [0, 3600]", d.TransferLatencySec)
	}
	if c.Autoscale.on() {
		bad("autoscale", "sizes a fleet of one pool: with disaggregation, disaggregation.prefill_autoscale and disaggregation.decode_autoscale size each pool")
	}
	for _, p := range []struct {
		key     string
		cfg     AutoscaleConfig
		workers int
	}{{"prefill_autoscale", d.PrefillAutoscale, d.PrefillWorkers}, {"decode_autoscale", d.DecodeAutoscale, d.decodeWorkers(c.Workers)}} {
		if !p.cfg.on() {
			continue
		}
		key := "disaggregation." + p.key
		p.cfg.validate(p.workers, func(field, format string, args ...any) {
			bad(key+strings.TrimPrefix(field, "autoscale"), format, args...)
		})
		if p.cfg.toZero() {
			bad(key+".min_replicas", "scale to zero of a pool is not modelled yet (min_replicas 1 or more, no idle_replicas)")
		}
	}
	d.Planner.validate("disaggregation.planner.", false, bad)
	if p := d.Planner.withDefaults(); p.on() {
		if start := d.PrefillWorkers*p.PrefillGPUsPerWorker + d.decodeWorkers(c.Workers)*p.GPUsPerWorker; start > p.MaxGPUBudget {
			bad("disaggregation.planner.max_gpu_budget", "%d GPUs, fewer than the %d workers at the start take", p.MaxGPUBudget, start)
		}
		for _, pool := range []struct {
			name    string
			workers int
			prefill bool
		}{{poolPrefill, d.PrefillWorkers, true}, {poolDecode, d.decodeWorkers(c.Workers), false}} {
			if k := p.poolReplicaWorkers(pool.prefill); pool.workers%k != 0 {
				bad("disaggregation.planner", "the %s pool's workers (%d) are not whole engines of %d workers each", pool.name, pool.workers, k)
			}
		}
	}
	if d.Planner.on() && (d.PrefillAutoscale.on() || d.DecodeAutoscale.on()) {
		bad("disaggregation.planner", "sizes both pools: not with prefill_autoscale or decode_autoscale")
	}
	if d.PrefillTP < 0 || d.PrefillTP > 1024 {
		bad("disaggregation.prefill_tp", "%d is not a TP size", d.PrefillTP)
	}
	if d.PrefillDP < 0 || d.PrefillDP > 1024 {
		bad("disaggregation.prefill_dp", "%d is not a number of data-parallel ranks", d.PrefillDP)
	}
	if d.PrefillNodesPerWorker < 0 || d.PrefillNodesPerWorker > 1024 {
		bad("disaggregation.prefill_nodes_per_worker", "%d is not a number of nodes", d.PrefillNodesPerWorker)
	}
	d.PrefillScheduler.validate("disaggregation.prefill_scheduler", cmp.Or(c.Scheduler.Engine, EngineVLLM), bad)
	if a, b := d.PrefillAutoscale.withDefaults(1), d.DecodeAutoscale.withDefaults(1); a.on() && b.on() && a.GPUsPerWorker != b.GPUsPerWorker && !d.ownPrefill() {
		bad("disaggregation.decode_autoscale.gpus_per_worker", "%d, the prefill pool's %d: the workers are of one deployment", b.GPUsPerWorker, a.GPUsPerWorker)
	}
	switch d.DecodeRouter {
	case "", DecodeRoundRobin, DecodeLeastRequests, DecodeRandom, DecodePowerOfTwo, DecodeDynamo:
	default:
		bad("disaggregation.decode_router", "%q is not one of %s, %s, %s, %s, %s", d.DecodeRouter, DecodeRoundRobin, DecodeLeastRequests, DecodeRandom, DecodePowerOfTwo, DecodeDynamo)
	}
}

// figures reports a hand-over that lacks its KV size or its link.
func (d DisaggregationConfig) figures() error {
	if d.KVBytesPerToken == 0 || d.TransferGBps == 0 {
		return errors.New("replay: disaggregation needs kv_bytes_per_token and transfer_gbps (package deploy sets them from the model and the node's network)")
	}
	return nil
}

// disagg is a replay's prefill/decode hand-over: the links and the
// requests whose KV is on its way.
type disagg struct {
	prefill  int           // workers 0…prefill−1 prefill
	perToken float64       // KV bytes a prompt token sends
	rate     float64       // bytes a second
	latency  time.Duration // per transfer
	linkFree []trace.Time  // per prefill worker: when its link is free
	sending  []int         // per prefill worker: prompts whose KV it holds until sent
	next     int           // the next decode worker, in turn, from 0
	// policy is DecodeRouter. Its loads (least_requests, power_of_two)
	// are inbound (per decode worker: requests chosen for it and not
	// handed over yet) and the router's count of those handed over
	// (routerView.out); after a least_requests choice next is the one
	// after it.
	policy  string
	rng     *rand.Rand // random, power_of_two's and dynamo_kv's draws
	inbound []int
	// live lists the decode workers a request may go to (by index in
	// the pool), down the others: starting, draining or off slots when
	// an HPA sizes the pool (setReady).
	live []int
	down []bool
	// dynamo_kv's count: per decode worker, the prompt blocks of the
	// requests chosen for it that have not ended; by request index, the
	// blocks it counts (−1: none), in bs-token blocks.
	blocks  []int64
	blockOf []int64
	bs      int64
	ties    []int
	// temperature is the cluster's dynamo_kv router_temperature, which
	// Dynamo's decode router keeps; logits, its scratch.
	temperature float64
	logits      []float64
	// counted: by request index, whether it is in inbound (from its
	// decode worker's choice to its hand-over, or to its timeout).
	counted []bool
	// sglang: the workers run SGLang. Its router chooses the decode
	// worker when the request arrives, with its prefill worker
	// (select_pd_pair), and the decode server pre-allocates the prompt's
	// tokens before the prefill may start (preallocate). Else (vLLM) the
	// proxy chooses it when the prefill ends, and the decode worker
	// allocates the prompt's blocks before the KV is sent (loadRemote:
	// allocate_slots for the external tokens, then
	// WAITING_FOR_REMOTE_KVS); the request waits in its queue for them
	// (reqState.pdWait), and its prefill worker's blocks are kept in held
	// until the transfer ends.
	sglang bool
	held   map[int32]heldPrefill
	spare  [][]int32 // block tables of held ones, for reuse
	// pending: per prefill worker, its requests waiting at decode
	// workers for their blocks (bound).
	pending []int
	err     error // a transfer refused in a decode worker's build
	// SGLang's pre-allocation (preallocate): prealloc, per decode
	// worker, the requests waiting for it, in order; unbooted, per
	// prefill worker, its requests held back.
	prealloc [][]*reqState
	unbooted []int
	// preHeld, per decode worker, the requests it pre-allocated that
	// have not reached it yet: they will, and free what they hold.
	preHeld []int
	moving  []*reqState // by request index: its KV in transit (evHandOff)
	to      []int32     // by request index: the decode worker it goes to
	// recorded holds, under router recorded, by request index the
	// decode worker (its place in the pool) the trace names, which
	// choose takes in place of DecodeRouter's (nil: none).
	recorded []int32
	// The ends of the transfers under way: from each prefill worker's
	// link, in order (a link sends one at a time), and to each decode
	// worker (by w − prefill): when hand-overs change those workers'
	// course (bound).
	fromEnds [][]trace.Time
	toEnds   [][]trace.Time
}

// newDisagg returns the hand-over of n requests between prefill slots
// 0…prefill−1 and decode slots prefill…prefill+decode−1.
func newDisagg(d DisaggregationConfig, n, prefill, decode int, seed uint64, sglang bool, bs int64, temperature float64) *disagg {
	p := &disagg{
		sglang:   sglang,
		policy:   d.DecodeRouter,
		rng:      rand.New(rand.NewPCG(seed, 0x6465636f6465)), // "decode"
		prefill:  prefill,
		perToken: float64(d.KVBytesPerToken),
		rate:     d.TransferGBps * 1e9,
		latency:  trace.DurationSeconds(d.TransferLatencySec),
		linkFree: make([]trace.Time, prefill),
		sending:  make([]int, prefill),
		moving:   make([]*reqState, n),
		to:       make([]int32, n),
		fromEnds: make([][]trace.Time, prefill),
		toEnds:   make([][]trace.Time, decode),
		inbound:  make([]int, decode),
		counted:  make([]bool, n),
		held:     map[int32]heldPrefill{},
		pending:  make([]int, prefill),
		prealloc: make([][]*reqState, decode),
		unbooted: make([]int, prefill),
		preHeld:  make([]int, decode),
		bs:       bs,
		live:     make([]int, decode),
		down:     make([]bool, decode),

		temperature: temperature,
	}
	for i := range p.live {
		p.live[i] = i
	}
	if p.policy == DecodeDynamo {
		p.blocks = make([]int64, decode)
		p.blockOf = make([]int64, n)
		for i := range p.blockOf {
			p.blockOf[i] = -1
		}
	}
	return p
}

// awaitPrealloc holds back request r, which arrived at its prefill worker
// at now, until its decode server has pre-allocated its prompt's tokens
// (SGLang: the decode server's PreallocQueue; the prefill server's
// bootstrap queue keeps the request until the decode side has sent where
// its KV goes); an idle decode server does it at once.
func (e *engine) awaitPrealloc(now trace.Time, r *reqState) {
	p := e.pd
	d := e.workers[p.to[r.idx]]
	r.pdPre = true
	p.unbooted[r.worker]++
	p.prealloc[d.id-p.prefill] = append(p.prealloc[d.id-p.prefill], r)
	if !d.busy {
		e.preallocate(d, now)
	}
}

// sgReservedDecodeTokens is what SGLang's decode server keeps back, per
// request it holds, for their next decode steps when it pre-allocates:
// num_reserved_decode_tokens, SGLANG_NUM_RESERVED_DECODE_TOKENS' default
// (disaggregation/decode.py).
const sgReservedDecodeTokens = 512

// preallocate allocates on SGLang decode server w, at now, the prompt
// tokens of the requests waiting for them, in order while they fit, and
// wakes their prefill workers, as its PreallocQueue does
// (pop_preallocated, _allocatable_tokens): the room is the pool's free
// (and evictable) tokens less the larger of sgReservedDecodeTokens for
// each request it holds (running, waiting, or pre-allocated and on its
// way) and what the longest running request still needs beyond the
// running ones' tokens (retractable); a request takes its prompt plus the
// reserve from it, and waits, with every one behind it, when that or its
// prompt and output beyond the retractable tokens is more than is left
// (unless the server holds nothing and the prompt fits its pool).
func (e *engine) preallocate(w *worker, now trace.Time) {
	p := e.pd
	g := w.s.(*sglang)
	q := p.prealloc[w.id-p.prefill]
	if len(q) == 0 {
		return
	}
	g.settle(w)
	var retractable, longest int64
	for _, r := range w.running {
		retractable += r.prompt + r.out
		longest = max(longest, r.maxOut+r.prompt)
	}
	single := max(longest-retractable, 0)
	held := int64(len(w.running) + p.preHeld[w.id-p.prefill] + w.waiting.Len())
	room := g.tree.Free() + g.tree.Evictable() - max(sgReservedDecodeTokens*held, single)
	k := 0
	for ; k < len(q); k++ {
		r := q[k]
		need := r.prompt + sgReservedDecodeTokens
		// A server that holds nothing takes a prompt that fits its
		// pool: SGLang's check would keep it waiting for good when
		// the pool is smaller than the prompt and the reserve.
		alone := held == 0 && k == 0 && r.prompt <= g.tree.Free()+g.tree.Evictable()
		if max(need, r.prompt+r.wants()-retractable) > room && !alone {
			break
		}
		room -= need
		if free := g.tree.Free(); free < r.prompt {
			g.tree.Evict(r.prompt - free)
		}
		if !g.tree.Alloc(r.prompt) {
			break
		}
		r.pdPre, r.pdHeld = false, true
		p.unbooted[r.worker]--
		p.preHeld[w.id-p.prefill]++
		e.wake(now, e.workers[r.worker])
	}
	if k > 0 {
		n := copy(q, q[k:])
		clear(q[n:])
		p.prealloc[w.id-p.prefill] = q[:n]
	}
}

// dropPrealloc lets go of what r, which timed out or was done without a
// decode step, holds of its decode server's pre-allocation: its place in
// line, or its tokens.
func (e *engine) dropPrealloc(now trace.Time, r *reqState) {
	p := e.pd
	d := e.workers[p.to[r.idx]]
	switch {
	case r.pdPre:
		q := p.prealloc[d.id-p.prefill]
		p.prealloc[d.id-p.prefill] = slices.DeleteFunc(q, func(x *reqState) bool { return x == r })
		p.unbooted[r.worker]--
		r.pdPre = false
	case r.pdHeld:
		d.s.(*sglang).tree.FreePrivate(r.prompt)
		r.pdHeld = false
		if int(r.worker) < p.prefill { // not handed over yet
			p.preHeld[d.id-p.prefill]--
		}
		if !d.busy {
			e.preallocate(d, now)
		}
	}
}

// A heldPrefill is what a prefill worker holds of a request whose decode
// worker has allocated its blocks: the prompt's blocks and how many of
// them have their hashes committed, freed when the transfer ends.
type heldPrefill struct {
	blocks []int32
	hashed int64
}

// choose sets the decode worker of request r (DecodeRouter) and counts r
// as on its way there.
func (p *disagg) choose(r *reqState, out []Outstanding) {
	var d int
	if p.recorded != nil {
		d = int(p.recorded[r.idx])
	} else {
		d = p.pickDecode(out)
	}
	if p.blocks != nil {
		k := r.prompt / p.bs // Dynamo's tracking hashes: full blocks
		p.blocks[d] += k
		p.blockOf[r.idx] = k
	}
	p.inbound[d]++
	p.counted[r.idx] = true
	p.to[r.idx] = int32(p.prefill + d)
}

// ended ends request i's count in dynamo_kv's blocks: it completed or
// timed out, wherever it was.
func (p *disagg) ended(i int32) {
	if p.blocks != nil && p.blockOf[i] >= 0 {
		p.blocks[p.to[i]-int32(p.prefill)] -= p.blockOf[i]
		p.blockOf[i] = -1
	}
}

// uncount ends request i's count in its decode worker's inbound: it was
// handed over, or timed out on the way.
func (p *disagg) uncount(i int32) {
	if p.counted[i] {
		p.counted[i] = false
		p.inbound[p.to[i]-int32(p.prefill)]--
	}
}

// pickDecode returns the decode worker (by its index in the pool) that
// DecodeRouter chooses: in turn, the least loaded one with ties to the
// first after the last chosen, one at random, the less loaded of two at
// random, or the one whose requests hold the fewest prompt blocks, ties
// at random.
//
// Only the live decode workers are candidates: with every one of them
// live, as without an HPA on the pool, the choices and draws are the same
// as over the whole pool.
func (p *disagg) pickDecode(out []Outstanding) int {
	n, live := len(p.inbound), p.live
	load := func(d int) int { return p.inbound[d] + out[p.prefill+d].Requests }
	switch p.policy {
	case DecodeRandom:
		return live[p.rng.IntN(len(live))]
	case DecodeDynamo:
		// The request's own blocks are the same on every worker, and
		// a softmax over logits scaled to their range is the same
		// whatever is added to all of them.
		if p.temperature > 0 {
			p.logits = p.logits[:0]
			for _, d := range live {
				p.logits = append(p.logits, float64(p.blocks[d]))
			}
			return live[softmaxPick(p.logits, p.temperature, p.rng.Float64())]
		}
		ties := p.ties[:0]
		for _, d := range live {
			b := p.blocks[d]
			switch {
			case len(ties) == 0 || b < p.blocks[ties[0]]:
				ties = append(ties[:0], d)
			case b == p.blocks[ties[0]]:
				ties = append(ties, d)
			}
		}
		p.ties = ties
		return pickTie(ties, p.rng)
	case DecodePowerOfTwo:
		a := p.rng.IntN(len(live))
		if len(live) == 1 {
			return live[a]
		}
		b := p.rng.IntN(len(live) - 1)
		if b >= a {
			b++
		}
		if load(live[b]) < load(live[a]) {
			return live[b]
		}
		return live[a]
	}
	// In turn, or the least loaded: from the one after the last chosen,
	// the live ones.
	best, bestL := -1, 0
	d := p.next
	for range n {
		if !p.down[d] {
			if p.policy != DecodeLeastRequests {
				best = d
				break
			}
			if l := load(d); best < 0 || l < bestL {
				best, bestL = d, l
			}
		}
		if d++; d == n {
			d = 0
		}
	}
	p.next = (best + 1) % n
	return best
}

// setReady makes the decode workers live that are ready in state, the
// decode pool's slots.
func (p *disagg) setReady(state []slotState) {
	p.live = p.live[:0]
	for d, s := range state {
		p.down[d] = s != slotReady
		if !p.down[d] {
			p.live = append(p.live, d)
		}
	}
}

// idle reports whether nothing of the hand-over involves worker slot i
// beyond its queue and running requests (the HPA stops a draining worker
// only then: drained): a prefill worker holds no prompt whose KV is to go
// (sending, from its prefill's end to its hand-over: the decode worker's
// API server, its blocks, the transfer), and no request is on its way to
// a decode worker (inbound, from its choice to its hand-over: SGLang's
// pre-allocation, the transfer).
func (p *disagg) idle(i int) bool {
	if i < p.prefill {
		return p.sending[i] == 0
	}
	return p.inbound[i-p.prefill] == 0
}

// bound returns the time before which no hand-over changes w's course
// (engine.routerBound, in the open loop with no timeout and no API
// server time). A prefill worker's changes at the next arrival (routed
// as it comes) and at the first end of a transfer from its link (which
// frees blocks). A decode worker's changes at the first end of a transfer
// to it, and a transfer not started yet starts when a prefill step ends
// (engine.prefilled): no earlier than the prefill workers' queued step
// ends and schedulings, the first ends of their links' transfers (which
// wake them) and the next arrival.
func (p *disagg) bound(e *engine, w *worker) trace.Time {
	b := e.nextArrival
	if w.id < p.prefill {
		if ends := p.fromEnds[w.id]; len(ends) > 0 {
			b = min(b, ends[0])
		}
		if p.pending[w.id] > 0 || p.unbooted[w.id] > 0 {
			// A decode worker's scheduling starts a transfer from
			// w's link (loadRemote), whose end frees w's blocks,
			// or lets a request of w's in (preallocate).
			b = min(b, p.decodeEvents(e))
		}
		return b
	}
	if slices.ContainsFunc(p.pending, func(n int) bool { return n > 0 }) {
		// A transfer a decode worker starts ends by waking a
		// prefill worker short of blocks, whose next prefill can
		// come here.
		b = min(b, p.decodeEvents(e))
	}
	for _, t := range p.toEnds[w.id-p.prefill] {
		b = min(b, t)
	}
	for _, pw := range e.workers[:p.prefill] {
		if pw.busy || pw.queued {
			b = min(b, pw.eventAt)
		}
		if ends := p.fromEnds[pw.id]; len(ends) > 0 {
			b = min(b, ends[0])
		}
	}
	return b
}

// waitsForSends reports whether w is a prefill worker that holds the
// blocks of prompts whose KV it is sending: when it can schedule nothing,
// their hand-overs free blocks and wake it.
func (p *disagg) waitsForSends(w *worker) bool {
	return w.id < p.prefill && p.sending[w.id] > 0
}

// unstall moves the requests of decode worker w whose KV has arrived
// (holding their blocks) to the front of its queue, in their order, when
// w can schedule nothing with none running, and reports whether it moved
// any. Behind a front that cannot fit (a request preempted here, to be
// computed again), they hold blocks it needs and vLLM's FCFS admission
// would wait for good: nothing runs to free any.
func (p *disagg) unstall(w *worker) bool {
	if p.sglang || w.id < p.prefill || len(w.running) > 0 || w.waiting.Len() < 2 || w.waiting.front().holding {
		return false
	}
	var loaded []*reqState
	w.waiting.each(func(r *reqState) {
		if r.holding {
			loaded = append(loaded, r)
		}
	})
	for i := len(loaded) - 1; i >= 0; i-- {
		w.waiting.remove(loaded[i])
		w.waiting.pushFront(loaded[i])
	}
	return len(loaded) > 0
}

// decodeEvents returns the first time a decode worker may schedule: its
// next event, or, idle, the end of a transfer to it (which wakes it).
// Under vLLM its scheduling starts transfers (loadRemote).
func (p *disagg) decodeEvents(e *engine) trace.Time {
	b := never
	for i, dw := range e.workers[p.prefill:] {
		if dw.busy || dw.queued {
			b = min(b, dw.eventAt)
		}
		for _, t := range p.toEnds[i] {
			b = min(b, t)
		}
	}
	return b
}

// admitsAfter reports whether the build after w's step may start KV
// transfers (w is a decode worker with requests waiting for their blocks):
// the step's end must then be an event, so that the transfers start on the
// prefill workers' links in the order of the events across workers
// (evStepEnd's, by worker), as stepping one event at a time starts them.
func (p *disagg) admitsAfter(w *worker) bool {
	if p.sglang {
		return w.id >= p.prefill && len(p.prealloc[w.id-p.prefill]) > 0
	}
	return w.remote > 0
}

// waitsForBoot reports whether w is a prefill worker holding back
// requests until their decode servers pre-allocate (awaitPrealloc): when
// it can schedule nothing, their pre-allocation wakes it.
func (p *disagg) waitsForBoot(w *worker) bool {
	if !p.sglang {
		return false
	}
	if w.id < p.prefill {
		return p.unbooted[w.id] > 0
	}
	// A decode server whose pre-allocated requests are still on their
	// way: they free what they hold, or run, when they reach it.
	return p.preHeld[w.id-p.prefill] > 0
}

// loadsBound returns bound, or the end of a KV transfer to decode
// worker w if one ends earlier: its build may have started one
// (loadRemote) after its window's bound was set.
func (p *disagg) loadsBound(w *worker, bound trace.Time) trace.Time {
	if w.id >= p.prefill {
		for _, t := range p.toEnds[w.id-p.prefill] {
			bound = min(bound, t)
		}
	}
	return bound
}

// waitsForLoads reports whether w is a decode worker with KV on its way
// to blocks it allocated (loadRemote): when it can schedule nothing, the
// loads' ends wake it.
func (p *disagg) waitsForLoads(w *worker) bool {
	return w.id >= p.prefill && len(p.toEnds[w.id-p.prefill]) > 0
}

// transferTime is the time to send the KV of n prompt tokens. A time
// longer than trace.MaxLatencySec is an error (figures that far off are
// wrong, and a few orders more would overflow the clock).
func (p *disagg) transferTime(n int64) (time.Duration, error) {
	sec := p.latency.Seconds() + float64(n)*p.perToken/p.rate
	if !(sec <= trace.MaxLatencySec) {
		return 0, fmt.Errorf("replay: disaggregation: sending the KV of %d prompt tokens (%.4g bytes at %.4g GB/s) takes %.4g s, more than %g: kv_bytes_per_token or transfer_gbps is off",
			n, float64(n)*p.perToken, p.rate/1e9, sec, trace.MaxLatencySec)
	}
	return p.latency + trace.DurationSeconds(float64(n)*p.perToken/p.rate), nil
}

// prefilled is called when request r's prompt is computed on prefill
// worker w at now (its one output token): its KV (but what the decode
// worker holds already) starts for the next decode worker once w's link
// is free. r has left w's running list but holds its blocks until the
// transfer ends.
func (e *engine) prefilled(now trace.Time, w *worker, r *reqState) error {
	p := e.pd
	r.pdPrefilled, r.pdFrom, r.prefilledPD = now, int32(w.id), true
	if !p.sglang { // SGLang's was chosen at arrival
		p.choose(r, e.view.out)
		e.decodeChosen(r)
	}
	to := int(p.to[r.idx])
	p.moving[r.idx] = r
	p.sending[w.id]++
	if e.apiSvc > 0 && e.cfg.Scheduler.Engine != EngineSGLang {
		// Through the decode worker's API server first (ingressed).
		e.ingress(now, e.workers[to], r)
		return nil
	}
	if !p.sglang {
		e.awaitBlocks(now, r)
		return nil
	}
	return e.startTransfer(now, r, r.prompt)
}

// awaitBlocks puts moving request r in its decode worker's queue at now,
// where its KV load starts once the worker's scheduler has allocated its
// blocks (vllm.admitRemote, loadRemote), in its turn among the waiting
// requests.
func (e *engine) awaitBlocks(now trace.Time, r *reqState) {
	p := e.pd
	d := e.workers[p.to[r.idx]]
	r.pdWait, r.remote, r.pdQueued = true, true, now
	p.pending[r.worker]++
	d.remote++
	d.waiting.pushBack(r)
	e.wake(now, d)
}

// loadRemote starts the KV load of r, at decode worker w's scheduling at
// now: r's prefill blocks are set aside (held) and r takes the decode
// worker's, its own cache's hits and fresh ones for the rest of the
// prompt, and the rest is sent.
func (e *engine) loadRemote(w *worker, r *reqState, hits []int32, fresh int64, now trace.Time) {
	p := e.pd
	v := w.s.(*vllm)
	p.held[r.idx] = heldPrefill{blocks: r.blocks, hashed: r.hashed}
	r.blocks = nil
	if k := len(p.spare); k > 0 {
		r.blocks, p.spare = p.spare[k-1], p.spare[:k-1]
	}
	v.kv.AcquireAll(hits)
	v.reserve(r)
	r.blocks = append(r.blocks, hits...)
	r.hashed = int64(len(hits))
	if !v.allocate(r, fresh) {
		panic("replay: allocation failed after the free-block check")
	}
	r.pdWait, r.remote = false, false
	p.pending[r.worker]--
	if err := e.startTransfer(now, r, r.prompt-int64(len(hits))*v.bs); err != nil && p.err == nil {
		p.err = err
	}
}

// startTransfer starts the send of moving request r's KV, at now or when
// its prefill worker's link is free: of the prompt but what the decode
// worker holds already.
func (e *engine) startTransfer(now trace.Time, r *reqState, send int64) error {
	p := e.pd
	d, err := p.transferTime(send)
	if err != nil {
		return err
	}
	start := max(now, p.linkFree[r.worker])
	end := start.Add(d)
	p.linkFree[r.worker] = end
	from := now
	if !p.sglang {
		from = r.pdQueued // waiting for the decode worker's blocks too
	}
	r.pdEnd, r.pdKV = end, end.Sub(from)
	p.fromEnds[r.worker] = append(p.fromEnds[r.worker], end)
	to := p.to[r.idx] - int32(p.prefill)
	p.toEnds[to] = append(p.toEnds[to], end)
	e.q.push(end, evHandOff, r.idx)
	return nil
}

// dropEnd forgets the end of r's transfer, which ends now: the first of
// its link's, and one of its decode worker's.
func (p *disagg) dropEnd(r *reqState) {
	from := p.fromEnds[r.worker]
	if len(from) == 0 || from[0] != r.pdEnd {
		panic("replay: internal error: a KV transfer ended out of its link's order")
	}
	p.fromEnds[r.worker] = from[1:]
	d := p.to[r.idx] - int32(p.prefill)
	to := p.toEnds[d]
	k := slices.Index(to, r.pdEnd)
	to[k] = to[len(to)-1]
	p.toEnds[d] = to[:len(to)-1]
}

// handOff ends request i's KV transfer at now: the prefill worker frees
// the prompt's blocks and the decode worker takes the request, its
// prompt computed but for the last token, or it times out if its client
// gave up meanwhile.
func (e *engine) handOff(now trace.Time, i int32) error {
	r := e.pd.moving[i]
	e.pd.dropEnd(r)
	return e.handOver(now, r)
}

// handOver is handOff but for the transfer's end: r leaves its prefill
// worker at now for its decode worker, or times out.
func (e *engine) handOver(now trace.Time, r *reqState) error {
	p := e.pd
	p.moving[r.idx] = nil
	p.uncount(r.idx)
	pw := e.workers[r.worker]
	d := e.workers[p.to[r.idx]]
	h, loaded := p.held[r.idx]
	if loaded {
		// The decode worker holds r's blocks already (loadRemote):
		// the prefill worker frees the ones it kept.
		delete(p.held, r.idx)
		blocks, hashed := r.blocks, r.hashed
		r.blocks, r.hashed = h.blocks, h.hashed
		pw.s.leave(pw, r, leaveRunning)
		p.spare = append(p.spare, r.blocks[:0])
		r.blocks, r.hashed = blocks, hashed
	} else {
		pw.s.leave(pw, r, leaveRunning) // between its steps
	}
	p.sending[pw.id]--
	e.wake(now, pw) // its waiting front may fit now
	if e.scale != nil {
		e.drained(now, pw) // it may have sent its last
	}
	if r.aborted {
		if loaded {
			d.s.leave(d, r, leaveWaiting)
			e.wake(now, d)
		}
		return e.timedOut(r, now)
	}
	e.view.left(r)
	if r.pdHeld {
		p.preHeld[d.id-p.prefill]-- // here now, its tokens with it
	}
	r.worker = int32(d.id)
	r.maxOut, r.pdOut, r.out = r.pdOut, 0, 0
	if d.off != nil {
		// Its decode worker's tiers take its prompt from the first
		// block on (disaggregation.decode_kv_tiers).
		r.stored = 0
	}
	r.ghost = r.ghost[:0]
	// SGLang's token keys were made for the one token the prefill
	// worker computed: the decode worker's cover the whole output.
	r.sg = sgReq{}
	if loaded {
		// Every prompt token but the last is in its blocks, their
		// hashes committed as vLLM caches a load's blocks when it
		// ends; the scheduler takes it next (holding), to compute the
		// last again for its logits.
		r.computed = r.prompt - 1
		if !d.s.(*vllm).grow(r, 0) {
			return fmt.Errorf("replay: internal error: the loaded blocks of request %d are missing", r.idx)
		}
		r.holding = true
		e.view.sent(r)
		d.waiting.pushFront(r)
		e.wake(now, d)
		return nil
	}
	r.computed, r.hashed = 0, 0
	r.remote = true
	e.view.sent(r)
	if e.cfg.Scheduler.Engine == EngineSGLang && r.maxOut == 1 {
		// SGLang's decode server streams the prefill server's token
		// as it takes the request in (sglang.prebuilt): a one-token
		// request is then done.
		r.remote = false
		r.out, r.firstTok, r.lastTok = 1, now, now
		if d.plan != nil {
			d.plan.firstToken(now, r)
		}
		if r.pdHeld {
			e.dropPrealloc(now, r)
		}
		return e.completed(r, now)
	}
	d.remote++
	d.waiting.pushBack(r)
	e.wake(now, d)
	return nil
}
