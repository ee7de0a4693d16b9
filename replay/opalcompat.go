package replay

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/internal/numpyrand"
	"github.com/opaltrace/opaltrace/trace"
)

// The Opal-compatible replay: what Opal (IBM opal-sim@bc1e67e) computes
// for a workload, its quirks included (../shared/docs/opal-notes.md §2),
// so that a team moving from Opal sees its own numbers first, and then,
// one switch at a time (OpalQuirks), how each quirk moves them.
//
// Note: it is not a scheduler of the engine (scheduler.go) but a
// simulation of its own, because what makes Opal's numbers lies outside
// what an engine scheduler decides: the worker loop stalls for its 1 ms
// batch-build and completion waits and for its synchronous KV stores;
// KV lookups, fetches and stores are IOs on Opal's processor-sharing
// devices; a prefill step emits no token (a request with N output
// tokens takes N decode steps after its prefill); TTFT counts from the
// request's creation. The worker loop (opalworker.go) follows
// vllm_worker.py's _scheduler_step and _build_batch statement by
// statement, on a SimPy-like runtime (opalsim.go).

// OpalCompat configures an Opal-compatible replay, in Opal's terms.
type OpalCompat struct {
	Workers int
	// Seed is simulation.seed: Opal's router draws from numpy's
	// Generator(PCG64(Seed)).
	Seed uint64
	// Router is router_params.policy: MaxPrefix and Random route every
	// request to rng.choice(workers) (MaxPrefix never matches, Q1),
	// RoundRobin in turn from the second worker (Opal's _last_selected
	// starts at 0 and is incremented first), LeastLoaded to the first
	// worker with the fewest requests in flight.
	Router string

	// The model, as Opal reads its config.json.
	Layers, Hidden  int64
	Params          int64 // Opal's parameter estimate (model.OpalParams)
	KVBytesPerToken int64
	MaxModelLen     int64 // max_position_embeddings

	// worker.hw and inference_params (roofline).
	MemoryGB  float64
	TFLOPS    float64
	MemBWTBps float64
	TP        int64
	A, B      float64

	// worker.vllm_params.
	BlockSize           int64
	MaxNumSeqs          int
	MaxNumBatchedTokens int64
	ChunkedPrefill      bool
	MaxKVCReadyRequests int
	LookaheadReqs       int

	// kvc: LMCache-style chunks of KVChunk tokens over Tiers, in order.
	KVChunk int64
	Tiers   []OpalTier

	Quirks OpalQuirks
}

// An OpalTier is one KV tier of kvc.kvc_tiers: CPUMemory and LocalNVMe
// are a device per worker, DistributedFS one device all workers share
// (each worker still keeps its own index of what it stored there).
type OpalTier struct {
	Name          string
	BandwidthGBps float64
	LatencyNsec   float64
	CapacityGB    float64
	Shared        bool
}

// OpalQuirks are Opal's behaviours that differ from opaltrace's
// semantics; each true reproduces Opal, false does what opaltrace's own
// replay does instead (AllOpalQuirks: all true).
type OpalQuirks struct {
	// PersistentBatch: a running batch admits waiting requests only
	// when one of its requests completes (Q2). Off: the batch is
	// rebuilt before every step.
	PersistentBatch bool
	// StaleChunk: a continuing prefill is priced with the chunk size
	// of the step that built the batch, so its last chunk costs a full
	// chunk (Q2). Off: each chunk is priced at its own size.
	StaleChunk bool
	// BudgetPreemption: a running request that no longer fits the token
	// budget is preempted, its progress lost (Q8). Off: it waits for
	// the next step, as in vLLM, and only a lack of KV blocks preempts.
	BudgetPreemption bool
	// MaxPricing: a step costs max(longest prefill chunk, decode), the
	// decode's weight read charged even with no decode (Q8). Off: the
	// parts of the forward pass add up, the weights read once.
	MaxPricing bool
	// NoTierEviction: a full tier takes nothing more (Q9). Off: least
	// recently used chunks are evicted.
	NoTierEviction bool
	// StoreAtCompletion: a request's prompt chunks are stored when it
	// completes, inside the scheduler loop, which stalls for it (Q9).
	// Off: they are written through as each prefill step computes
	// them, without stalling the loop.
	StoreAtCompletion bool
	// IOHeadStart: an IO that joins a busy tier device is credited
	// with the bytes each IO already active moved since Opal's
	// bandwidth manager last woke (it joins the active set before the
	// manager brings the set up to date), so it may even be done at
	// once; not in opal-notes, found by comparing runs request by
	// request. Off: an IO moves bytes only from when it joins.
	IOHeadStart bool
	// TTFTFromPrevious: a trace request's TTFT and queue time count
	// from its creation, the previous request's arrival (Q3). Off:
	// from its own arrival.
	TTFTFromPrevious bool
	// WholeSeconds: the run ends at the 1-second poll after its last
	// completion (Q4). Off: at the last completion.
	WholeSeconds bool
}

// AllOpalQuirks is what Opal does.
func AllOpalQuirks() OpalQuirks {
	return OpalQuirks{true, true, true, true, true, true, true, true, true}
}

// OpalQuirkNames lists the quirks in OpalQuirks' order, with their
// opal-notes labels, for tables and flags.
var OpalQuirkNames = []string{
	"persistent_batch", "stale_chunk", "budget_preemption", "max_pricing",
	"no_tier_eviction", "store_at_completion", "io_head_start", "ttft_from_previous", "whole_seconds",
}

// Set sets the quirk named name (one of OpalQuirkNames) to on.
func (q *OpalQuirks) Set(name string, on bool) error {
	p := map[string]*bool{
		"persistent_batch": &q.PersistentBatch, "stale_chunk": &q.StaleChunk,
		"budget_preemption": &q.BudgetPreemption, "max_pricing": &q.MaxPricing,
		"no_tier_eviction": &q.NoTierEviction, "store_at_completion": &q.StoreAtCompletion,
		"io_head_start":      &q.IOHeadStart,
		"ttft_from_previous": &q.TTFTFromPrevious, "whole_seconds": &q.WholeSeconds,
	}[name]
	if p == nil {
		return fmt.Errorf("unknown Opal quirk %q (want %s)", name, orList(OpalQuirkNames))
	}
	*p = on
	return nil
}

// Validate reports a setting Opal could not run with.
func (c *OpalCompat) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Workers < 1 {
		bad("simulation.num_workers: %d, want at least 1", c.Workers)
	}
	switch c.Router {
	case "MaxPrefix", "Random", "RoundRobin", "LeastLoaded":
	default:
		bad("router.router_params.policy: %q, want MaxPrefix, Random, RoundRobin or LeastLoaded", c.Router)
	}
	if c.Layers < 1 || c.Hidden < 1 || c.Params < 1 || c.KVBytesPerToken < 1 || c.MaxModelLen < 1 {
		bad("model: layers, hidden size, parameters, KV bytes per token and max_position_embeddings must be positive")
	}
	if !(c.TFLOPS > 0) || !(c.MemBWTBps > 0) || !(c.MemoryGB > 0) || c.TP < 1 {
		bad("worker.hw: tflops, mem_bw_TBps, memory_gb and tp must be positive")
	}
	if c.BlockSize < 1 || c.MaxNumSeqs < 1 || c.MaxNumBatchedTokens < 1 || c.MaxKVCReadyRequests < 1 || c.LookaheadReqs < 1 {
		bad("worker.vllm_params: block_size, max_num_seqs, max_num_batched_tokens, max_kvc_ready_requests and lookahead_reqs must be positive")
	}
	if c.KVChunk < 1 {
		bad("kvc.chunk_size: %d, want at least 1", c.KVChunk)
	}
	for _, t := range c.Tiers {
		if !(t.BandwidthGBps > 0) || !(t.LatencyNsec >= 0) || !(t.CapacityGB >= 0) {
			bad("kvc.%s: bandwidth_GBps must be positive, latency_nsec and capacity_GB not negative", t.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.gpuBlocks() < ceilDiv(c.MaxModelLen, c.BlockSize) {
		// Opal stops: "GPU memory is insufficient".
		return fmt.Errorf("worker.hw.memory_gb: %d KV blocks of %d tokens per worker after the weights, fewer than one max_position_embeddings (%d tokens) needs",
			c.gpuBlocks(), c.BlockSize, c.MaxModelLen)
	}
	return nil
}

// gpuBlocks is Opal's KV blocks per worker: the GPUs' memory less the
// weights, in blocks (vllm_worker.py _init_gpu_memory_blocks).
func (c *OpalCompat) gpuBlocks() int64 {
	total := int64(c.MemoryGB * float64(c.TP) * (1 << 30))
	return (total - 2*c.Params) / (c.BlockSize * c.KVBytesPerToken)
}

// GPUBlocks is each worker's KV capacity in blocks of BlockSize tokens,
// as Opal sizes it.
func (c *OpalCompat) GPUBlocks() int64 { return c.gpuBlocks() }

// prefillSec is gpu_model.py's _roofline_model, in its order of
// operations: the prefill time of tokens p+1..n.
func (c *OpalCompat) prefillSec(n, p int64) float64 {
	an2d := c.A * float64(n*(n+1)-p*(p+1)) * float64(c.Hidden)
	bnd2 := c.B * float64(n-p) * float64(c.Hidden*c.Hidden)
	eff := c.TFLOPS * float64(c.TP)
	return float64(c.Layers)*an2d/(eff*1e12) + float64(c.Layers)*bnd2/(eff*1e12)
}

// decodeSec is _roofline_get_decode_latency_batch over the contexts
// ctx, summed as Python sums them; base adds the weight read.
func (c *OpalCompat) decodeSec(ctx []int64, base bool) float64 {
	bw := float64(c.TP) * (c.MemBWTBps * 1e12)
	var t float64
	if base {
		t = float64(2*c.Params) / bw
	}
	var sum float64
	for _, x := range ctx {
		sum += float64(x*c.KVBytesPerToken) / bw
	}
	return t + sum
}

// An OpalRun is one stage of an Opal run, as Opal's opal_stats.json
// reports it: what an Opal-compatible replay of the stage produced, or
// (package opal's ReplayStage) what an opaltrace replay of it did.
type OpalRun struct {
	// Records are the finished requests in the order Opal's router
	// collected them (its raw_* lists' order).
	Records []*trace.Request
	// GPUTime is, per record, the time from the end of its first step
	// to the end of its last (Opal's raw_gpu_time); nil for an opaltrace
	// replay, whose records give the first scheduling and the last token.
	GPUTime []float64
	// Queued is the requests the router received.
	Queued int
	// Start and End are the stage's times (Opal's stage_time_start and
	// stage_time_end).
	Start, End float64
	// Per simulated second from 1 while the stage ran: requests finished
	// in that second, workers, and the workers' mean GPU busy time as a
	// percentage of the time so far (Opal's per_unit_* series; an
	// opaltrace replay leaves PerSecondGPUUtil empty).
	PerSecondFinished []int
	PerSecondWorkers  []int
	PerSecondGPUUtil  []float64
	// Steps and Preemptions count the workers' scheduler steps and
	// preemptions during the stage; HitTokens the prompt tokens fetched
	// from the tiers.
	Steps, Preemptions, HitTokens int64
}

// An OpalCompatStage is one stage of an Opal config for RunOpalCompat.
type OpalCompatStage struct {
	// Requests are the stage's, in the order its generator dispatches
	// them. A trace stage's arrivals are absolute simulation times
	// (Opal sleeps until each timestamp, so rows already past when the
	// stage starts go at once: opal-notes.md Q5); a synthetic stage's
	// (Source opal-synthetic) count from the stage's start.
	Requests Requests
	// Run names the records' run.
	Run string
	// FinishGapSec is how long a synthetic stage's generator sleeps
	// after its last request before it reports the stage generated (its
	// request gap); 0 for a trace stage, whose reader stops at once.
	FinishGapSec float64
}

// RunOpalCompat replays reqs, the only stage of an Opal config, as Opal
// would (RunOpalCompatStages).
func RunOpalCompat(c OpalCompat, reqs Requests, run string) (*OpalRun, error) {
	runs, err := RunOpalCompatStages(c, []OpalCompatStage{{Requests: reqs, Run: run}})
	if err != nil {
		return nil, err
	}
	return runs[0], nil
}

// RunOpalCompatStages replays an Opal config's stages as Opal runs them:
// one simulation, in which each stage starts when the previous one is
// done (every request generated and its response back at the stage) and
// finds the cluster as that stage left it: the workers' KV tiers and GPU
// time, the router's random draws and round-robin position. Requests
// are routed by Opal's router and served by Opal's worker. It returns
// one OpalRun per stage.
func RunOpalCompatStages(c OpalCompat, stages []OpalCompatStage) ([]*OpalRun, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, errors.New("opal compat: no stages")
	}
	s := &opalSim{cfg: &c, env: newSimEnv(), rng: numpyrand.NewPCG64(c.Seed)}
	s.bwBps = c.MemBWTBps * 1e12
	var shared []*opalDevice
	for _, t := range c.Tiers {
		var d *opalDevice
		if t.Shared {
			d = s.device(t)
		}
		shared = append(shared, d)
	}
	for i := range c.Workers {
		w := newOpalWorker(s, i, shared)
		s.workers = append(s.workers, w)
	}
	s.inflight = make([]int, c.Workers)
	var scratch trace.Request
	for k, st := range stages {
		n := st.Requests.Len()
		if n == 0 {
			return nil, fmt.Errorf("opal compat: stage %d: no requests", k)
		}
		sr := &opalStageRun{cfg: st, out: &OpalRun{Queued: n}, left: n}
		for i := range n {
			in := peek(st.Requests, i, &scratch)
			r := &opalReq{idx: i, stageIdx: k, run: st.Run, in: in.InputTokens.V, out: in.OutputTokens.V}
			r.src, r.id, r.stage = in.Source, in.RequestID, in.Stage
			r.arrival = in.Arrival.V.Seconds()
			if r.in < 1 {
				return nil, fmt.Errorf("opal compat: stage %d: request %d has no prompt", k, i)
			}
			keys, sizes, err := opalChunkKeys(in, c.KVChunk)
			if err != nil {
				return nil, fmt.Errorf("opal compat: stage %d: request %d: %w", k, i, err)
			}
			r.keys, r.chunkTok = keys, sizes
			sr.reqs = append(sr.reqs, r)
		}
		s.stages = append(s.stages, sr)
		s.total += n
	}
	for _, w := range s.workers {
		w.start()
	}
	s.env.at(0, func() { s.startStage(0) })
	s.env.at(1, s.perSecond)
	s.env.run()
	if s.err != nil {
		return nil, s.err
	}
	if s.finished != s.total || s.active != len(s.stages)-1 || !s.done {
		return nil, fmt.Errorf("opal compat: internal error: %d of %d requests finished", s.finished, s.total)
	}
	last := s.stages[s.active].out
	if c.Quirks.WholeSeconds {
		// The run ends at the 1-second poll that sees the workload done.
		end := math.Ceil(last.End)
		if end == last.End {
			end++ // the poll at that second ran before the completion's handling ended
		}
		last.End = end
	}
	// The per-second series run to the end, and one sample past it, as
	// Opal's stats loop takes one more before it sees the run is done.
	s.sampleUntil(last.End + 1)
	runs := make([]*OpalRun, len(s.stages))
	for i, sr := range s.stages {
		runs[i] = sr.out
	}
	return runs, nil
}

// An opalStageRun is one stage of an Opal-compatible replay in progress.
type opalStageRun struct {
	cfg  OpalCompatStage
	reqs []*opalReq
	out  *OpalRun
	left int // responses not yet back
	// generated: when the stage's generator reported it had generated
	// every request (its last dispatch, plus FinishGapSec).
	generated float64
}

// startStage is the workload orchestrator running stage k: its generator
// dispatches its requests, each no earlier than the previous, and
// creates each right after dispatching the previous (Q3).
func (s *opalSim) startStage(k int) {
	sr := s.stages[k]
	s.active = k
	now := s.env.now
	sr.out.Start = now
	var steps, pre int64
	for _, w := range s.workers {
		steps += w.steps
		pre += w.preemptions
	}
	s.stepsAt, s.preemptionsAt = steps, pre
	prev := now
	for _, r := range sr.reqs {
		t := r.arrival
		if r.src == "opal-synthetic" {
			t += now
		}
		r.dispatch = max(t, prev)
		r.creation = r.dispatch
		if s.cfg.Quirks.TTFTFromPrevious && r.src != "opal-synthetic" {
			r.creation = prev // created before the generator sleeps until its time (Q3)
		}
		prev = r.dispatch
		s.env.at(r.dispatch, func() { s.route(r) })
	}
	sr.generated = prev + sr.cfg.FinishGapSec
}

// stageResponded is the stage's response loop after its last response:
// the stage is done when its generator has also finished, which the loop
// sees at once or at one of its 1-second polls.
func (s *opalSim) stageResponded(k int) {
	sr := s.stages[k]
	now := s.env.now
	end := now
	if sr.generated > now {
		end = now + math.Ceil(sr.generated-now)
	}
	s.env.at(end, func() { s.endStage(k) })
}

// endStage ends stage k and starts the next, if any.
func (s *opalSim) endStage(k int) {
	sr := s.stages[k]
	sr.out.End = s.env.now
	for _, w := range s.workers {
		sr.out.Steps += w.steps
		sr.out.Preemptions += w.preemptions
	}
	sr.out.Steps -= s.stepsAt
	sr.out.Preemptions -= s.preemptionsAt
	if k+1 < len(s.stages) {
		s.startStage(k + 1)
		return
	}
	s.done = true
}

// An opalSim is one Opal-compatible replay in progress.
type opalSim struct {
	cfg      *OpalCompat
	env      *simEnv
	rng      *numpyrand.PCG64
	workers  []*opalWorker
	stages   []*opalStageRun
	active   int // the stage running (Opal's active_stage)
	done     bool
	total    int   // requests of every stage
	inflight []int // per worker, routed and not yet collected
	rr       int   // RoundRobin's last selected
	bwBps    float64
	err      error

	stepsAt, preemptionsAt int64 // the workers' counts when the active stage started

	finished      int
	sampled       int // per-second samples taken
	finishedSince int
}

func (s *opalSim) device(t OpalTier) *opalDevice {
	return &opalDevice{env: s.env, bw: t.BandwidthGBps * 1e9, latency: t.LatencyNsec / 1e9, remaining: t.CapacityGB * (1 << 30),
		headStart: s.cfg.Quirks.IOHeadStart}
}

func (s *opalSim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// route is the router's _accept_requests for r.
func (s *opalSim) route(r *opalReq) {
	var wi int
	switch s.cfg.Router {
	case "RoundRobin":
		s.rr++
		if s.rr == len(s.workers) {
			s.rr = 0
		}
		wi = s.rr
	case "LeastLoaded":
		for i, n := range s.inflight {
			if n < s.inflight[wi] {
				wi = i
			}
		}
	default: // MaxPrefix (never matches) and Random
		wi = s.rng.Choice(len(s.workers))
	}
	s.inflight[wi]++
	r.worker = wi
	s.workers[wi].arrive(r)
}

// collect is the router's _collect_completion for r.
func (s *opalSim) collect(r *opalReq, gpuTime float64) {
	now := s.env.now
	s.inflight[r.worker]--
	r.doneAtRouter = now
	// Opal files a finished request under the stage running, which is
	// r's: a stage ends only after its last response.
	sr := s.stages[r.stageIdx]
	o := sr.out
	o.Records = append(o.Records, r.record(s.cfg))
	o.GPUTime = append(o.GPUTime, gpuTime)
	o.HitTokens += r.hitTokens
	s.finished++
	s.finishedSince++
	r.keys, r.chunkTok, r.decodeStamps = nil, nil, nil
	if sr.left--; sr.left == 0 {
		s.stageResponded(r.stageIdx)
	}
}

// perSecond takes Opal's per-second samples while requests are left.
func (s *opalSim) perSecond() {
	s.sample()
	if !s.done && s.err == nil {
		s.env.at(s.env.now+1, s.perSecond)
	}
}

// sampleUntil takes the samples after the last completion, up to end.
func (s *opalSim) sampleUntil(end float64) {
	for float64(s.sampled+1) <= end {
		s.env.now = float64(s.sampled + 1)
		s.sample()
	}
}

// sample takes the per-second sample of the stage running.
func (s *opalSim) sample() {
	s.sampled++
	o := s.stages[s.active].out
	o.PerSecondFinished = append(o.PerSecondFinished, s.finishedSince)
	s.finishedSince = 0
	o.PerSecondWorkers = append(o.PerSecondWorkers, len(s.workers))
	var busy float64
	for _, w := range s.workers {
		busy += w.gpuBusy
	}
	o.PerSecondGPUUtil = append(o.PerSecondGPUUtil, busy/float64(len(s.workers))*100/s.env.now)
}

// An opalReq is one request inside the Opal-compatible replay
// (vllm_worker.py's VLLMSchedulerRequest and its LLMRequest's stats).
type opalReq struct {
	idx            int // in its stage
	stageIdx       int
	arrival        float64 // as the stage gives it (absolute for a trace)
	run, src, id   string
	stage          string
	in, out        int64
	keys           []uint64 // the prompt's KV chunk keys
	chunkTok       []int64  // tokens of each chunk
	worker         int
	dispatch       float64 // when the router received it
	phase          opalPhase
	processed      int64 // prompt_processed (may overshoot the prompt: stale chunks)
	generated      int64 // decode_tokens_generated
	allocated      int64 // GPU blocks held
	batchTok       int64 // request_tokens in the batch
	preemptions    int64
	lookupDone     bool
	prefixTokens   int64 // the cached lookup's result
	hitTokens      int64
	storedChunks   int // write-through: leading chunks already offered to the tiers
	firstStamp     float64
	hasStamp       bool
	decodeStamps   []float64
	creation       float64
	workerArrival  float64
	startProc      float64
	ready          float64
	gpuStart       float64
	prefillDone    float64
	decodeDone     float64
	doneAtRouter   float64
	lastDecodeSeen float64
}

type opalPhase int8

const (
	opalWaiting opalPhase = iota
	opalFetchKVC
	opalReady
	opalPrefill
	opalDecode
	opalCompleted
)

// record is r as an opaltrace record, Opal's definitions kept: TTFT is
// the end of the last prefill step less the creation, E2E the last
// decode step's end less the worker's arrival (server side), one ITL
// gap per decode step, the first from the end of the prefill.
func (r *opalReq) record(c *OpalCompat) *trace.Request {
	o := &trace.Request{
		RequestID: r.id, Run: r.run, Stage: r.stage, Source: "opal-compat",
		Worker: "worker." + strconv.Itoa(r.worker), Status: trace.StatusOK, FinishReason: "length",
		InputTokens: trace.Some(r.in), OutputTokens: trace.Some(r.out),
		Arrival:      trace.Some(trace.TimeFromSeconds(r.dispatch)),
		TTFTSec:      trace.Some(r.prefillDone - r.creation),
		E2ESec:       trace.Some(r.decodeDone - r.workerArrival),
		QueueSec:     trace.Some(r.gpuStart - r.creation),
		KVFetchSec:   trace.Some(r.ready - r.startProc),
		Preemptions:  trace.Some(r.preemptions),
		CachedTokens: trace.Some(r.hitTokens),
		ITLUnit:      trace.ITLToken, TTFTBasis: trace.TTFTServer, E2EBasis: trace.E2EServer,
		OutputTokensSource: trace.OutputRequested,
	}
	if o.RequestID == "" {
		o.RequestID = r.run + "/" + strconv.Itoa(r.idx)
	}
	o.ITLSec = make([]float64, len(r.decodeStamps))
	prev := r.prefillDone
	for i, t := range r.decodeStamps {
		o.ITLSec[i] = t - prev
		prev = t
	}
	at := func(t float64) trace.Opt[trace.Time] { return trace.Some(trace.TimeFromSeconds(t)) }
	o.Created = at(r.creation)
	o.RouterArrival = at(r.dispatch)
	o.WorkerArrival = at(r.workerArrival)
	o.StartProcessing = at(r.startProc)
	o.Ready = at(r.ready)
	o.GPUStart = at(r.gpuStart)
	o.PrefillDone = at(r.prefillDone)
	o.DecodeDone = at(r.decodeDone)
	o.DoneAtRouter = at(r.doneAtRouter)
	return o
}
