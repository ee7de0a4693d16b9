package replay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// Stats sums up a replay.
type Stats struct {
	Requests     int           // requests in the input
	Completed    int           // requests that ran to their output length
	Rejected     int           // requests that can never fit in a worker's KV cache
	TimedOut     int           // requests aborted because their client gave up (Client.TimeoutSec)
	Steps        int64         // forward passes, all workers
	Events       int64         // events processed; fast-forward makes these far fewer than the steps
	Preemptions  int64         // recompute preemptions, all workers
	PromptTokens int64         // prompt tokens of completed requests
	CachedTokens int64         // of which prefix-cache hits at first schedule
	OutputTokens int64         // tokens generated
	Evictions    int64         // cached KV blocks reused for other content (SGLang: tokens evicted from the radix tree, in blocks, rounded up)
	BusyTime     time.Duration // sum over workers of time spent in steps
	End          trace.Time    // time of the last event

	// Seconds holds per-second statistics when Options.PerSecond asks
	// for them, from second 0 to the one holding End.
	Seconds []Second

	// With autoscaling (Config.Autoscale): the fleet per second, and
	// its cost: the time each worker was starting, ready or draining,
	// times its GPUs.
	Fleet    []FleetSecond
	GPUHours float64
	// Planner holds the planner's adjustments (DisaggregationConfig.Planner).
	Planner []PlannerAdjustment
	// With scale to zero (scaletozero.go): the requests that waited at
	// the gateway for a ready worker, and the longest of those waits.
	Held       int
	HeldMaxSec float64
}

// Options are the optional parts of a replay.
type Options struct {
	// Observe, when not nil, is called for every step before it runs;
	// an error from it stops the replay. Validators use it.
	Observe func(*Step) error
	// PerSecond collects Stats.Seconds.
	PerSecond bool
	// Transient says that emit does not keep a record, or its lists,
	// after it returns (it copies what it needs, as trace.Writer does):
	// the engine then reuses their memory for the next records.
	Transient bool
	// Offload, when not nil, gives every worker KV tiers below its GPU
	// (offload.go; under SGLang's scheduler, HiCache: hicache.go).
	Offload *Offload
	// DecodeOffload, when not nil, is the decode pool's own tiers when
	// the prefill pool has a deployment of its own (Prefill) and
	// disaggregation.decode_kv_tiers gives the decode pool tiers:
	// Offload is then the prefill pool's, each sized by its pool's
	// deployment (its workers' PCIe links, KV bytes a token and node),
	// with one tier block, write policy and remote store (vLLM's
	// scheduler).
	DecodeOffload *Offload
	// KeepRecords says that emit keeps every record, and its lists, to
	// the end (a summary in memory): the engine then allocates them all
	// at once and has the kernel map their memory ahead (recordSlab).
	// Ignored with Transient.
	KeepRecords bool

	// Prefill, when not nil, is the prefill pool's own deployment
	// under disaggregation (package deploy: disaggregation.
	// prefill_hardware and prefill_tp): its step model prices the
	// prefill workers' steps, and KVBlocks is each prefill worker's KV
	// capacity, where RunInputs's cost and kvBlocks are then the decode
	// pool's. The scheduler's settings are the cluster's for both
	// pools but for DisaggregationConfig.PrefillScheduler's limits.
	Prefill *PoolModel

	test testSwitches // set by tests only
}

// A PoolModel is what one pool's workers are made of when it is not the
// cluster's deployment: the step model that prices their steps and each
// worker's KV capacity in blocks of the scheduler's block size.
type PoolModel struct {
	Cost     model.StepModel
	KVBlocks int64
}

// A Step describes one forward pass of one worker, as built. Run passes it
// to the observer of RunObserved before the step runs; it is reused, so an
// observer must copy what it keeps.
type Step struct {
	Worker     int
	Start, End trace.Time
	Batch      *model.Batch    // the batch priced by the step model
	Cost       model.StepModel // the step model that priced it: its worker's pool's (Options.Prefill)
	Running    int             // running requests after scheduling
	Waiting    int             // waiting requests after scheduling
	Preempted  int             // requests preempted while building the step
	KV         *kvcache.Cache  // the worker's cache after scheduling
	// Radix is an SGLang worker's radix cache after scheduling (its KV;
	// KV then stays empty); nil for vLLM workers.
	Radix *kvcache.Radix
}

// Run replays reqs through the cluster that cfg describes and calls emit
// with one simulated Request per input request, in completion order:
// ordered by simulated completion time, ties broken by event order (and
// within one step by the worker's running order), so the order is
// deterministic. Rejected requests are emitted when they arrive.
//
// cost prices each forward pass; it is called from several goroutines
// at once when the replay is split among them (parallel.go), which its
// contract, a pure function of the batch, allows. kvBlocks is each worker's KV capacity in
// blocks of cfg.Scheduler.BlockSize tokens as the model computes it; a
// non-zero cfg.Scheduler.KVCacheTokens overrides it.
//
// Run reads from the inputs InputTokens, OutputTokens (the length to
// generate), HashIDs and BlockSize, and Arrival for the open loop; a
// missing one is an error naming the request's position. An error from
// emit stops the replay and is returned.
func Run(cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request, emit func(*trace.Request) error) (Stats, error) {
	return RunInputs(cfg, cost, kvBlocks, Requests(reqs), emit, Options{})
}

// RunObserved is Run with an observer called for every step (nil for
// none); an error from it stops the replay. Validators use it.
func RunObserved(cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request, emit func(*trace.Request) error, observe func(*Step) error) (Stats, error) {
	return RunInputs(cfg, cost, kvBlocks, Requests(reqs), emit, Options{Observe: observe})
}

// RunInputs is Run over any Inputs, with options.
func RunInputs(cfg Config, cost model.StepModel, kvBlocks int64, reqs Inputs, emit func(*trace.Request) error, opts Options) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	if cost == nil || emit == nil {
		return Stats{}, errors.New("replay: no step model or no emit function")
	}
	lruGiven := cfg.RouterConfig.LRUCapacityTokens != 0
	runningGiven := cfg.Scheduler.MaxRunningRequests != 0 // SGLang's, else derived from a worker's KV
	cfg = cfg.Effective(kvBlocks)
	kvBlocks = cfg.Scheduler.KVCacheTokens / cfg.Scheduler.BlockSize
	if kvBlocks <= 0 {
		return Stats{}, errors.New("replay: no KV cache capacity (kv_cache_tokens is 0 and the model gave none)")
	}
	if kvBlocks > kvcache.MaxBlocks {
		return Stats{}, fmt.Errorf("replay: %d KV blocks per worker is more than the engine supports", kvBlocks)
	}
	if reqs.Len() > 1<<31-1 {
		return Stats{}, fmt.Errorf("replay: %d requests is more than the engine supports", reqs.Len())
	}
	timed := cfg.Workload.Mode == ModeOpen || cfg.Workload.Mode == ModeSessions && cfg.Workload.Sessions == 0
	if err := checkInputs(reqs, timed); err != nil {
		return Stats{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	slots := cfg.Workers
	if a := cfg.Autoscale; a.on() {
		slots = max(slots, a.mostWorkers())
	}
	if p := cfg.Planner; p.on() {
		slots = max(slots, p.poolAgg().mostWorkers())
	}
	// With disaggregation, the prefill pool's slots, then the decode
	// pool's.
	prefillSlots, decodeSlots := cfg.Disaggregation.slots(cfg.Workers)
	if cfg.Disaggregation.on() {
		slots = prefillSlots + decodeSlots
	}
	routerKV := cfg.Scheduler.KVCacheTokens // a worker's KV, for the routers that size their view by it
	if p := opts.Prefill; p != nil && cfg.Disaggregation.on() {
		// The router sends to the prefill pool: its view of a worker
		// is a prefill worker's (llm-d's LRU, autoTune, too).
		routerKV = p.KVBlocks * cfg.Scheduler.BlockSize
		if !lruGiven && cfg.Router == RouterLLMD {
			cfg.RouterConfig.LRUCapacityTokens = routerKV
		}
	}
	router, err := newRouter(&cfg, slots, routerKV, rng)
	if err != nil {
		return Stats{}, err
	}
	e := &engine{
		cfg:      cfg,
		router:   router,
		reqs:     reqs,
		emit:     emit,
		observe:  opts.Observe,
		kvBlocks: kvBlocks,
		reuse:    opts.Transient,
		test:     opts.test,
	}
	e.stats.Requests = reqs.Len()
	e.sh, _ = reqs.(shaper)
	e.pricing = newPricing(cost, opts.test.noLoneMemo)
	e.lat = trace.DurationSeconds(cfg.Client.LatencySec)
	e.timeout = trace.DurationSeconds(cfg.Client.TimeoutSec)
	e.apiSvc = trace.DurationSeconds(cfg.Client.APIServerRequestSec)
	e.apiRanks = max(cfg.Client.APIServerRanks, 1)
	apiServers := (slots + e.apiRanks - 1) / e.apiRanks
	if n := cfg.Client.PrefillAPIServerRanks; n > 0 && cfg.Disaggregation.on() {
		// The prefill pool's servers, then the decode pool's.
		e.apiPrefillRanks, e.apiPrefillSlots = n, prefillSlots
		e.apiDecodeFirst = (prefillSlots + n - 1) / n
		apiServers = e.apiDecodeFirst + (decodeSlots+e.apiRanks-1)/e.apiRanks
	}
	e.apiFree = make([]trace.Time, apiServers)
	if e.timeout > 0 {
		e.live = make([]*reqState, reqs.Len())
	}
	var given []string // the workers' names the trace gives
	var rec *recorded
	if r, ok := router.(*recorded); ok {
		pre := 0
		if cfg.Disaggregation.on() {
			pre = prefillSlots
		}
		if err := r.assign(reqs, slots, pre); err != nil {
			return Stats{}, err
		}
		given, rec = r.names, r
	}
	e.prefillSlots = prefillSlots
	switch p := opts.Prefill; {
	case p != nil:
		if err := e.prefillPool(p, opts.Offload != nil && opts.DecodeOffload == nil); err != nil {
			return Stats{}, err
		}
	case cfg.Disaggregation.ownPrefill():
		return Stats{}, errors.New("replay: disaggregation.prefill_hardware, prefill_tp or prefill_dp without the prefill pool's step model and KV capacity (Options.Prefill; package deploy resolves them)")
	}
	e.prefillScheduler(runningGiven)
	for i, name := range workerNames(given, slots) {
		s, blocks := e.schedulerOf(i)
		e.workers = append(e.workers, newWorker(i, name, s, blocks, &e.test))
	}
	if d := cfg.Disaggregation; d.on() {
		switch {
		case d.DecodeKVTiers && cfg.Scheduler.Engine == EngineSGLang:
			return Stats{}, errors.New("replay: disaggregation.decode_kv_tiers under SGLang: its decode server's HiCache is not modelled yet (the prefill servers' is)")
		case d.DecodeKVTiers && opts.Offload == nil:
			return Stats{}, errors.New("replay: disaggregation.decode_kv_tiers without KV tiers to give the decode pool")
		}
		if err := cfg.Disaggregation.figures(); err != nil {
			return Stats{}, err
		}
		e.pd = newDisagg(cfg.Disaggregation, reqs.Len(), prefillSlots, decodeSlots, cfg.Seed, cfg.Scheduler.Engine == EngineSGLang, cfg.Scheduler.BlockSize, cfg.RouterConfig.RouterTemperature)
		if rec != nil {
			e.pd.recorded = rec.decode
		}
		for _, w := range e.workers[prefillSlots:] {
			if v, ok := w.s.(*vllm); ok {
				v.loadRemote = e.loadRemote
			}
		}
	}
	if opts.Offload != nil {
		bs := cfg.Scheduler.BlockSize
		if cfg.Scheduler.Engine == EngineSGLang {
			if err := opts.Offload.hiValidate(cfg.Scheduler); err != nil {
				return Stats{}, err
			}
			bs = 1 // HiCache's pages are the radix cache's, of any size
		} else if opts.Offload.HiCache != nil {
			return Stats{}, errors.New("replay: HiCache tiers need SGLang's scheduler")
		}
		if err := opts.Offload.Validate(bs); err != nil {
			return Stats{}, err
		}
		tiered := len(e.workers) // the workers with tiers: the first so many
		if cfg.Disaggregation.prefillTiersOnly() {
			tiered = prefillSlots
		}
		if err := e.decodeOffload(opts); err != nil {
			return Stats{}, err
		}
		if e.off, err = newOffload(e, *opts.Offload, opts.DecodeOffload, cfg.Scheduler.BlockSize, e.workers, tiered); err != nil {
			return Stats{}, err
		}
	} else if opts.DecodeOffload != nil {
		return Stats{}, errors.New("replay: the decode pool's own KV tiers (Options.DecodeOffload) without the prefill pool's (Options.Offload)")
	}
	e.view.init(e, router)
	switch d := cfg.Disaggregation; {
	case cfg.Autoscale.on():
		e.scale = newAutoscaler(slots, 0, []poolSpec{{cfg: cfg.Autoscale, hi: slots, workers: cfg.Workers}})
	case cfg.Planner.on():
		e.scale = newAutoscaler(slots, 0, []poolSpec{{cfg: cfg.Planner.poolAgg(), hi: slots, workers: cfg.Workers, planned: true}})
		e.scale.plan = newPlanner(cfg.Planner, cost, cost, 0, 0, 0)
	case d.Planner.on():
		if d.Planner.Policy == PlannerDynamoLoad && d.Planner.thresholds().perContext && cfg.Scheduler.ContextLength <= 0 {
			// Dynamo's decision is then insufficient_data, every time.
			return Stats{}, fmt.Errorf("replay: the planner's optimization_target %s weighs a prefill engine's queue in context lengths: the scheduler's context_length is not set", d.Planner.OptimizationTarget)
		}
		e.scale = newAutoscaler(slots, prefillSlots, []poolSpec{
			{name: poolPrefill, cfg: d.Planner.pool(true), hi: prefillSlots, workers: d.PrefillWorkers, planned: true},
			{name: poolDecode, cfg: d.Planner.pool(false), lo: prefillSlots, hi: slots, workers: d.decodeWorkers(cfg.Workers), planned: true},
		})
		// The prefill profile is a prefill worker's (slot 0): its
		// step model, in chunks of its token budget; the decode
		// profile the cluster's scheduler's.
		s, ps := cfg.Scheduler, e.prefillSchedulerOf()
		chunk, seqs := ps.MaxNumBatchedTokens, s.MaxNumSeqs
		if s.Engine == EngineSGLang {
			chunk, seqs = ps.ChunkedPrefillSize, s.MaxRunningRequests
		}
		e.scale.plan = newPlanner(d.Planner, e.pricingOf(e.workers[0]).cost, cost, chunk, e.kvBlocks*s.BlockSize, seqs)
		if d.Planner.Policy == PlannerDynamoSLA {
			// Its frontend's TTFT, ISL and ITL come from the chunks
			// the decode workers stream.
			for _, w := range e.workers[prefillSlots:] {
				w.plan = e.scale.plan
			}
		}
	case d.scaled():
		e.scale = newAutoscaler(slots, prefillSlots, []poolSpec{
			{name: poolPrefill, cfg: d.PrefillAutoscale, hi: prefillSlots, workers: d.PrefillWorkers},
			{name: poolDecode, cfg: d.DecodeAutoscale, lo: prefillSlots, hi: slots, workers: d.decodeWorkers(cfg.Workers)},
		})
	}
	if e.scale != nil {
		e.view.setReady(e.scale)
	}
	if opts.PerSecond {
		e.sec = &seconds{workers: cfg.Workers, block: cfg.Scheduler.BlockSize}
		if e.off != nil {
			e.off.observe(e.sec)
		}
	}
	e.prepare()
	if opts.KeepRecords && !opts.Transient {
		e.slab = newRecordSlab(e)
	}
	if e.sec != nil {
		if err := checkPerSecondSpan(e.at); err != nil {
			return Stats{}, err
		}
	}
	if k := e.parts(); k > 1 {
		err = e.runParts(k)
	} else {
		err = e.run()
	}
	if err == nil {
		err = e.checkIdle()
	}
	if err != nil {
		return e.stats, err
	}
	if e.scale != nil {
		e.scale.finish(e.stats.End)
		e.stats.Fleet = e.scale.seconds(e.stats.End)
		e.stats.GPUHours = e.scale.gpuHours(e.cfg.Disaggregation)
		if e.scale.plan != nil {
			e.stats.Planner = e.scale.plan.plannerLog()
		}
	}
	if e.sec != nil {
		e.stats.Seconds = e.sec.done(e.stats.End, e.stats.Fleet)
	}
	for _, w := range e.workers {
		e.stats.Evictions += w.s.evictions()
	}
	if e.test.atEnd != nil {
		e.test.atEnd(e)
	}
	return e.stats, nil
}

// An engine is the state of one replay.
type engine struct {
	cfg      Config
	router   Router
	view     routerView // the router's view of the workers
	routed   Routed     // scratch: the request being routed
	workers  []*worker
	q        eventQueue
	reqs     Inputs
	sh       shaper // reqs, when it is one; nil otherwise
	n        int    // requests
	kvBlocks int64
	emit     func(*trace.Request) error
	observe  func(*Step) error
	sec      *seconds    // per-second statistics; nil: not collected
	scale    *autoscaler // nil: a fixed fleet
	stats    Stats
	off      *offload // KV tiers; nil: none
	pd       *disagg  // prefill/decode hand-over; nil: not disaggregated

	shared []int32 // per request: leading hash ids another request (on its worker, when known) also has
	// online, when requests are routed as they arrive, tells each its
	// shared ids once its worker is known (shared is nil then).
	online *onlineSharing
	route  []int32 // per request: its worker, when the router is load-blind (-1: rejected); nil otherwise
	order  []int32 // open loop: request indices by arrival time
	next   int     // next entry of order (open) or of reqs (closed)
	at     []trace.Time
	// Sessions mode: each request's next turn (-1: none) and think time
	// before it, and the first requests of the sessions not started yet.
	nextTurn []int32
	think    []time.Duration
	starts   []int32
	// nextArrival is the open loop's next arrival not yet delivered
	// (never when none is left): how far any worker may fast-forward
	// when arrivals are not routed in advance.
	nextArrival trace.Time

	lat     time.Duration // client latency, one way
	timeout time.Duration // client timeout; 0: none
	apiSvc  time.Duration // the API server's serial time per request (ingress.go); 0: none
	// apiRanks workers share an API server (Config.Client.APIServerRanks,
	// at least 1); apiFree[i] is when server i finishes the last request
	// in its line.
	apiRanks int
	apiFree  []trace.Time
	// With Config.Client.PrefillAPIServerRanks: apiPrefillRanks
	// prefill workers share an API server, of the first
	// apiPrefillSlots slots, and the decode workers' servers are from
	// apiDecodeFirst on (apiServerOf); 0: apiRanks for every slot.
	apiPrefillRanks, apiPrefillSlots, apiDecodeFirst int

	live []*reqState // with a timeout: the state of each request in flight, by index

	// pricing prices the steps of the workers (pricing.go), and
	// prefillPricing those of a prefill pool of its own deployment
	// (Options.Prefill; nil: none), whose workers are the first
	// prefillSlots (the prefill pool's slots under disaggregation),
	// each of prefillKV blocks (prefillPool).
	pricing
	prefillPricing *pricing
	prefillSlots   int
	prefillKV      int64
	// prefillSched is the prefill workers' scheduler settings when
	// they are not the cluster's (prefillScheduler; nil: the cluster's).
	prefillSched *SchedulerConfig

	free [][]*reqState // recycled request states, by their tables' room (roomClass)
	// reuse (Options.Transient): every record is rec, and request
	// states keep their ITL lists' memory when recycled.
	reuse bool
	rec   trace.Request
	// inScratch is the request arriving, when the inputs build it on
	// demand (peeker); a served one's state keeps a copy (reqState.inBuf).
	inScratch trace.Request
	// slab, when every record is kept (Options.KeepRecords), holds them
	// and their ITL lists; nil otherwise.
	slab *recordSlab
	done []*reqState // scratch: requests completed by a step
	step Step

	// part, when the workers are split among goroutines (parallel.go),
	// is the part this engine runs; nil for the one loop.
	part *part

	test testSwitches
}

// testSwitches turn the engine's optimisations off (or a check on), so
// that a test can show they change nothing; the zero value is what a
// replay runs. They are per replay (Options.test), so tests that set them
// run in parallel.
type testSwitches struct {
	// indexAll indexes private blocks too.
	indexAll bool
	// eagerPrivate records every private block's hash when the block
	// fills, as before MarkPrivate.
	eagerPrivate bool
	// noFastForward makes every step an event of its own.
	noFastForward bool
	// noSteadySteps turns off fast-forward's inner loop (steadySteps).
	noSteadySteps bool
	// noLoneMemo turns off the price table of lone decodes, and the
	// pricing of a built batch of decodes by their sum (price): every
	// built step is priced by StepTime.
	noLoneMemo bool
	// noPreRoute turns off routing in advance.
	noPreRoute bool
	// noMatchResume makes vLLM's prefix match start over at every
	// step instead of resuming where it missed (vllm.match).
	noMatchResume bool
	// checkMatchResume, when set, is vllm.checkResume.
	checkMatchResume func(dropped bool, kept int, resumed, all, full []int32)
	// checkBlockedFront, when set, is vllm.checkBlocked.
	checkBlockedFront func(said, blocked bool)
	// parts, when not 0, is the number of goroutines among which the
	// workers are split (parallel.go), 1 for the one loop, whether or
	// not the replay would be split by itself.
	parts int
	// partBatch, when not 0, is how many records or events a part
	// keeps before it passes them to the merge (parallel.go).
	partBatch int
	// wrapPart, when set, runs each part's loop (run) on the part's
	// goroutine: benchmarks measure the part's CPU time with it.
	wrapPart func(run func() error) error
	// checkSteady, when set, is called at the end of every run of
	// steadySteps with the worker's state, whose block tables must be
	// what stepping one at a time leaves; grownAhead says that the run
	// stopped because a step's allocation failed, after the requests
	// before the one that failed may have been given their blocks for
	// that step (as decodeStep leaves them).
	checkSteady func(w *worker, grownAhead bool)
	// atEnd, when set, is called with the engine once a replay ends
	// without error.
	atEnd func(e *engine)
	// routed, when set, is called with each routing decision, the
	// router's state as the decision left it.
	routed func(e *engine, q *Routed, w int)
	// choseDecode, when set, is called with each choice of a decode
	// worker (its slot).
	choseDecode func(e *engine, w int)
}

// workerNames names slots workers: given's names first (a trace's, for
// router recorded), then w0, w1, … for the others and for those given
// leaves "", leaving out the names given took (w2 and w3 given on four
// workers: w2, w3, w0, w1; w2, "", w3, "": w2, w0, w3, w1), so that no
// two workers share a name.
func workerNames(given []string, slots int) []string {
	taken := make(map[string]bool, len(given))
	for _, s := range given {
		taken[s] = true
	}
	names := slices.Clone(given)
	for len(names) < slots {
		names = append(names, "")
	}
	k := 0
	for i := range names {
		for ; names[i] == ""; k++ {
			if s := "w" + strconv.Itoa(k); !taken[s] {
				names[i] = s
			}
		}
	}
	return names
}
