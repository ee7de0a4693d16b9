package replay

import (
	"fmt"
	"math/rand/v2"

	"github.com/opaltrace/opaltrace/trace"
)

// A WorkerLoad is what a worker exposes to a router that scrapes it (its
// Prometheus metrics: vllm:num_requests_running, num_requests_waiting,
// kv_cache_usage_perc), as of the router's last scrape.
type WorkerLoad struct {
	Running     int   // requests in the running batch
	Waiting     int   // requests queued
	FreeBlocks  int64 // unreferenced KV blocks
	TotalBlocks int64 // KV capacity in blocks
}

// KVUsage is the fraction of the KV cache in use, as vLLM's
// kv_cache_usage_perc counts it (cached but unreferenced blocks are free).
func (l WorkerLoad) KVUsage() float64 {
	if l.TotalBlocks == 0 {
		return 0
	}
	return 1 - float64(l.FreeBlocks)/float64(l.TotalBlocks)
}

// An Outstanding is what the router itself knows of a worker without
// asking it: the requests it sent there that have not completed, and
// their tokens (prompt plus requested output). A proxy counts these
// exactly, so they are never stale. (Dynamo's router counts its own
// active blocks, activeSeqs.)
type Outstanding struct {
	Requests int
	Tokens   int64
}

// A Cluster is the router's view of the workers.
type Cluster interface {
	// NumWorkers is the number of worker slots: worker indices are in
	// [0, NumWorkers), though only Ready ones may be chosen.
	NumWorkers() int
	// Ready lists the workers a request may go to, in index order: all
	// of them without autoscaling; else the ready ones, not the starting
	// or draining ones.
	Ready() []int
	// Load is the worker's state as of the router's last scrape
	// (RouterConfig.ViewIntervalSec; live when 0).
	Load(worker int) WorkerLoad
	// Loads is Load for every worker slot, indexed by worker: current
	// for the Ready ones (the router reads it, never writes it).
	//
	// Note: one call for every worker, as Outstanding: llm-d's scorers
	// asked Load of each of 16 workers per request, a call through the
	// interface and a copy of the load each, some 60 instructions a
	// worker (11 M of BenchmarkReplayMooncakeRouters/llm_d).
	Loads() []WorkerLoad
	// Outstanding is the router's own count for each worker slot,
	// indexed by worker (the router reads it, never writes it).
	//
	// Note: one call for every worker, not one per worker: a call
	// through the interface per worker scored was some 3 M
	// instructions of each load-aware router on the Mooncake trace.
	Outstanding() []Outstanding
}

// A Routed is the request a router places: what a gateway can read from
// it (lengths, prefix blocks, session), and the score the router gave the
// worker it chose, which the output records (trace.Request.RouterScore).
type Routed struct {
	Index     int        // position in the replayed trace
	At        trace.Time // when it reaches the router
	Prompt    int64      // prompt tokens
	Out       int64      // requested output tokens
	HashIDs   []int64    // prefix block ids (trace.Request.HashIDs); nil: none
	BlockSize int64      // tokens per HashIDs entry
	Session   string     // session or user id, when the trace has one
	// SharedIDs is how many leading HashIDs some other request of the
	// replay starts with too, or another on its worker when the replay
	// routed in advance (len(HashIDs) when the replay does not know): no
	// request that can share its blocks has one past them. Not what a
	// gateway knows, it only spares a router bookkeeping that cannot
	// change its choices (activeSeqs).
	SharedIDs int

	Score  float64 // set by the router: its score of the chosen worker
	Scored bool    // Score is set
}

// A Router picks the worker for each request. Implementations may keep
// state (a cursor, an RNG seeded from Config.Seed, a prefix index) but
// must be deterministic given it.
type Router interface {
	// Route returns the index of the worker that serves q.
	Route(q *Routed, c Cluster) int
}

// A kvObserver is a router fed by the workers' KV events (Dynamo's
// KvIndexer, Opal's KVBM events, llm-d's kvblock index): the engine tells
// it, one view tick after the fact, which prefix blocks a worker holds
// once it has computed a prompt: all its ids, of which ids[fresh:] it
// computed (vLLM's BlockStored events; the first fresh it found cached,
// whole trace blocks of its prefix hit, which store no event).
type kvObserver interface {
	Router
	kvStored(worker int, ids []int64, blockSize int64, fresh int)
}

// An activeTracker is a router that follows the requests it sent through
// their lives, as Dynamo's does (ActiveSequences): the engine tells it
// when a request's first token comes back from its worker and when the
// request ends (completed, timed out or aborted), by Routed.Index.
type activeTracker interface {
	Router
	prefillDone(idx int)
	freed(idx int)
}

// A routerSpec is one entry of the routers table: its name, what it is,
// and how to build it.
type routerSpec struct {
	name, doc string
	new       func(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router
}

// routers lists the routing policies, in the order errors name them.
var routers = []routerSpec{
	{RouterRoundRobin, "workers in turn", func(*Config, int, int64, *rand.Rand) Router { return &roundRobin{} }},
	{RouterRandom, "uniform from the seed", func(_ *Config, _ int, _ int64, rng *rand.Rand) Router { return &random{rng: rng} }},
	{RouterLeastRequests, "fewest outstanding requests", func(*Config, int, int64, *rand.Rand) Router { return &leastRequests{} }},
	{RouterLeastTokens, "fewest outstanding tokens", func(*Config, int, int64, *rand.Rand) Router { return &leastTokens{} }},
	{RouterPowerOfTwo, "the less loaded of two sampled", func(_ *Config, _ int, _ int64, rng *rand.Rand) Router { return &powerOfTwo{rng: rng} }},
	{RouterSession, "sticky by session, bounded load", newSessionAffinity},
	{RouterSGLang, "SGLang router's cache_aware", newSGLangCacheAware},
	{RouterLLMD, "llm-d's weighted scorers", newLLMD},
	{RouterDynamo, "Dynamo's KV router", newDynamoKV},
	{RouterMaxPrefix, "Opal's MaxPrefix, matching", newMaxPrefix},
	{RouterVLLMDP, "vLLM's data-parallel front end", func(cfg *Config, slots int, _ int64, _ *rand.Rand) Router { return newVLLMDP(cfg, slots) }},
	{RouterRecorded, "the worker each request's trace names", func(*Config, int, int64, *rand.Rand) Router { return &recorded{} }},
}

// Router names.
const (
	RouterRoundRobin    = "round_robin"
	RouterRandom        = "random"
	RouterLeastRequests = "least_requests"
	RouterLeastTokens   = "least_tokens"
	RouterPowerOfTwo    = "power_of_two"
	RouterSession       = "session_affinity"
	RouterSGLang        = "sglang_cache_aware"
	RouterLLMD          = "llm_d"
	RouterDynamo        = "dynamo_kv"
	RouterMaxPrefix     = "max_prefix"
	RouterVLLMDP        = "vllm_dp"
	RouterRecorded      = "recorded"
)

func routerFor(name string) (routerSpec, bool) {
	for _, s := range routers {
		if s.name == name {
			return s, true
		}
	}
	return routerSpec{}, false
}

func routerNames() []string {
	var names []string
	for _, s := range routers {
		names = append(names, s.name)
	}
	return names
}

// RouterNames returns the routing policies' names, for flags' help.
func RouterNames() []string { return routerNames() }

// newRouter builds the router named in the configuration for slots
// worker slots; kvTokens is a worker's KV capacity in tokens (what
// event-fed indexes mirror).
func newRouter(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) (Router, error) {
	s, ok := routerFor(cfg.Router)
	if !ok {
		return nil, fmt.Errorf("router: unknown router %q", cfg.Router)
	}
	return s.new(cfg, slots, kvTokens, rng), nil
}

// A slotResetter is a router that keeps per-worker knowledge (a prefix
// index), which it must drop when a worker slot is started afresh.
type slotResetter interface {
	resetWorker(w int)
}

// A loadBlind router's choices depend only on the order in which requests
// reach it, never on the cluster's state, so the engine can route every
// request before the replay starts (engine.preRoute): it then knows which
// requests meet on a worker (to index only the prefix blocks another
// request on the same worker can hit) and when a worker's next request
// arrives (to fast-forward up to it).
type loadBlind interface {
	Router
	loadBlind()
}

// roundRobin sends requests to workers 0, 1, …, N−1, 0, … in arrival order.
type roundRobin struct{ next int }

func (r *roundRobin) Route(_ *Routed, c Cluster) int {
	ready := c.Ready()
	k := r.next % len(ready)
	r.next = k + 1
	return ready[k]
}

func (*roundRobin) loadBlind() {}

// random picks a worker uniformly from the seeded RNG.
type random struct{ rng *rand.Rand }

func (r *random) Route(_ *Routed, c Cluster) int {
	ready := c.Ready()
	return ready[r.rng.IntN(len(ready))]
}

func (*random) loadBlind() {}
