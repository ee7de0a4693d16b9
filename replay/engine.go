package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
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
	// (offload.go); vLLM's scheduler only, for now.
	Offload *Offload

	test testSwitches // set by tests only
}

// A Step describes one forward pass of one worker, as built. Run passes it
// to the observer of RunObserved before the step runs; it is reused, so an
// observer must copy what it keeps.
type Step struct {
	Worker     int
	Start, End trace.Time
	Batch      *model.Batch   // the batch priced by the step model
	Running    int            // running requests after scheduling
	Waiting    int            // waiting requests after scheduling
	Preempted  int            // requests preempted while building the step
	KV         *kvcache.Cache // the worker's cache after scheduling
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
// cost prices each forward pass. kvBlocks is each worker's KV capacity in
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

// An Inputs is the replay's input, by index. Request must return the same
// content each time it is asked for i: the engine reads every request once
// before the replay (arrivals, lengths, prefixes) and again when it
// arrives, and keeps it only while it is in flight. A generator that
// builds requests on demand thus replays a million requests without
// holding them (see Requests for a slice).
type Inputs interface {
	Len() int
	Request(i int) *trace.Request
}

// A shaper is Inputs built valid (lengths and arrivals present and not
// negative, no hash ids) that can tell a request's shape without building
// it, so that the engine's pass over all requests before the replay
// allocates nothing.
type shaper interface {
	shape(i int) (prompt, out int64, arrival trace.Time)
	// ident sets on o what base copies from Request(i) besides the
	// lengths: so a replay of a generated workload builds one record per
	// request, not two.
	ident(i int, o *trace.Request)
}

// A peeker is Inputs that can set a Request the caller reuses to its i-th
// request, so that the engine's passes over all requests before the
// replay (checks, arrival order, shared prefixes, sessions) do not build
// one request each (Columns).
type peeker interface {
	peek(i int, r *trace.Request)
}

// peek returns request i of reqs: scratch, set to it, when reqs is a
// peeker (valid until the next peek), else reqs.Request(i).
func peek(reqs Inputs, i int, scratch *trace.Request) *trace.Request {
	if p, ok := reqs.(peeker); ok {
		p.peek(i, scratch)
		return scratch
	}
	return reqs.Request(i)
}

// Requests is a slice of requests as Inputs.
type Requests []*trace.Request

// Len implements Inputs.
func (r Requests) Len() int { return len(r) }

// Request implements Inputs.
func (r Requests) Request(i int) *trace.Request { return r[i] }

// RunInputs is Run over any Inputs, with options.
func RunInputs(cfg Config, cost model.StepModel, kvBlocks int64, reqs Inputs, emit func(*trace.Request) error, opts Options) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	if cost == nil || emit == nil {
		return Stats{}, errors.New("replay: no step model or no emit function")
	}
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
		slots = max(slots, a.MaxReplicas)
	}
	router, err := newRouter(&cfg, slots, cfg.Scheduler.KVCacheTokens, rng)
	if err != nil {
		return Stats{}, err
	}
	e := &engine{
		cfg:      cfg,
		cost:     cost,
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
	if m, ok := cost.(model.DecodeSumModel); ok {
		if _, ok := m.DecodeStepTime(1, 0); ok {
			e.sum = m
		}
	}
	e.lat = time.Duration(math.Round(cfg.Client.LatencySec * 1e9))
	e.timeout = time.Duration(math.Round(cfg.Client.TimeoutSec * 1e9))
	if e.timeout > 0 {
		e.live = make([]*reqState, reqs.Len())
	}
	for i := range slots {
		e.workers = append(e.workers, newWorker(i, "w"+strconv.Itoa(i), cfg.Scheduler, kvBlocks, &e.test))
	}
	if opts.Offload != nil {
		if cfg.Autoscale.on() {
			return Stats{}, errors.New("replay: autoscaling with KV tiers is not modelled yet")
		}
		if cfg.Scheduler.Engine == EngineSGLang {
			return Stats{}, errors.New("replay: KV tiers are not modelled under SGLang's scheduler yet")
		}
		if err := opts.Offload.Validate(cfg.Scheduler.BlockSize); err != nil {
			return Stats{}, err
		}
		if e.off, err = newOffload(e, *opts.Offload, cfg.Scheduler.BlockSize, e.workers); err != nil {
			return Stats{}, err
		}
	}
	e.view.init(e, router)
	if cfg.Autoscale.on() {
		e.scale = newAutoscaler(cfg.Autoscale, cfg.Workers, slots)
		e.view.setReady(e.scale)
	}
	if opts.PerSecond {
		e.sec = &seconds{workers: cfg.Workers, block: cfg.Scheduler.BlockSize}
	}
	e.prepare()
	if err := e.run(); err != nil {
		return e.stats, err
	}
	if e.sec != nil {
		e.stats.Seconds = e.sec.done(e.stats.End)
	}
	if e.scale != nil {
		e.scale.finish(e.stats.End)
		e.stats.Fleet = e.scale.seconds(e.stats.End)
		e.stats.GPUHours = e.scale.onTime.Hours() * float64(e.cfg.Autoscale.GPUsPerWorker)
	}
	for _, w := range e.workers {
		e.stats.Evictions += w.s.evictions()
	}
	return e.stats, nil
}

// checkInputs rejects inputs the replay cannot interpret, before any
// simulation, with FILE:LINE: field: what is wrong.
func checkInputs(reqs Inputs, open bool) error {
	if _, ok := reqs.(shaper); ok {
		return nil // valid by construction
	}
	var errs []error
	var scratch trace.Request
	for i := range reqs.Len() {
		r := peek(reqs, i, &scratch)
		bad := func(field, msg string) {
			pos := "request " + strconv.Itoa(i)
			if file, line := r.Pos(); line > 0 {
				pos = file + ":" + strconv.Itoa(line)
			}
			errs = append(errs, fmt.Errorf("%s: %s: %s", pos, field, msg))
		}
		switch {
		case r == nil:
			errs = append(errs, fmt.Errorf("request %d: nil", i))
			continue
		case !r.InputTokens.OK:
			bad("input_tokens", "absent (replay needs the prompt length)")
		case r.InputTokens.V < 0:
			bad("input_tokens", "negative")
		}
		switch {
		case !r.OutputTokens.OK:
			bad("output_tokens", "absent (replay needs the output length)")
		case r.OutputTokens.V < 0:
			bad("output_tokens", "negative")
		}
		if open {
			switch {
			case !r.Arrival.OK:
				bad("arrival_s", "absent (the open loop replays arrival times; use the closed loop)")
			case r.Arrival.V < 0:
				bad("arrival_s", "negative")
			}
		}
		if len(errs) >= 10 {
			errs = append(errs, errors.New("too many errors"))
			break
		}
	}
	return errors.Join(errs...)
}

// An engine is the state of one replay.
type engine struct {
	cfg      Config
	cost     model.StepModel
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

	shared []int32 // per request: leading hash ids another request (on its worker, when known) also has
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
	live    []*reqState   // with a timeout: the state of each request in flight, by index

	tabs [maxTabN + 1][][]stepPrice // decode prices by batch size and context sum, in pages (decodePrice)
	one  [1]int64                   // scratch: a lone decode's batch
	// sum is the step model when it prices decode batches by their
	// contexts' sum (steadySteps); nil otherwise.
	sum model.DecodeSumModel

	free []*reqState // recycled request states
	// reuse (Options.Transient): every record is rec, and request
	// states keep their ITL lists' memory when recycled.
	reuse bool
	rec   trace.Request
	done  []*reqState // scratch: requests completed by a step
	step  Step

	test testSwitches
}

// arrivalTime is the open-loop arrival of a request sent at a in the
// trace: a scaled.
func (e *engine) arrivalTime(a trace.Time) trace.Time {
	if e.cfg.Workload.TimeScale == 1 {
		return a
	}
	return trace.Time(float64(a)*e.cfg.Workload.TimeScale + 0.5)
}

// prepare computes what the replay knows before it starts: the open
// loop's arrival order, every request's worker when the router is
// load-blind (with each worker's arrival times, for fast-forward), and
// which prefix blocks the cache must index.
func (e *engine) prepare() {
	n := e.reqs.Len()
	e.n = n
	e.nextArrival = never
	open := e.cfg.Workload.Mode == ModeOpen
	prefix := *e.cfg.Scheduler.EnablePrefixCaching && !e.test.indexAll
	_, blind := e.router.(loadBlind)
	// In the sessions mode arrivals follow completions, so their order
	// is only known as the replay runs.
	blind = blind && !e.test.noPreRoute && e.cfg.Workload.Mode != ModeSessions && e.scale == nil
	if e.cfg.Workload.Mode == ModeSessions {
		e.prepareSessions()
	}
	if open {
		e.at = make([]trace.Time, n)
	}
	var ok []bool // request can be served
	if blind {
		ok = make([]bool, n)
	}
	var ids [][]int64 // hash ids, when prefixes matter
	var bs []int64    // trace block size (0: none)
	var scratch trace.Request
	sh := e.sh
	for i := range n {
		if sh != nil {
			prompt, out, at := sh.shape(i)
			if open {
				e.at[i] = e.arrivalTime(at)
			}
			if blind {
				ok[i] = e.rejectReason(prompt, out) == ""
			}
			continue
		}
		r := peek(e.reqs, i, &scratch)
		if open {
			e.at[i] = e.arrivalTime(r.Arrival.V)
		}
		if blind {
			ok[i] = e.rejectReason(r.InputTokens.V, r.OutputTokens.V) == ""
		}
		if prefix && len(r.HashIDs) > 0 {
			if ids == nil {
				ids, bs = make([][]int64, n), make([]int64, n)
			}
			ids[i] = r.HashIDs
			bs[i] = r.BlockSize.V
			if !r.BlockSize.OK {
				bs[i] = 0
			}
		}
	}
	var order []int32 // arrival order; nil: index order
	if open {
		e.order = make([]int32, n)
		for i := range e.order {
			e.order[i] = int32(i)
		}
		slices.SortStableFunc(e.order, func(a, b int32) int { return cmp.Compare(e.at[a], e.at[b]) })
		order = e.order
	}
	if blind {
		e.route = make([]int32, n)
		each := func(i int32) {
			e.route[i] = -1
			if ok[i] {
				e.routed = Routed{Index: int(i)}
				wi := e.router.Route(&e.routed, &e.view)
				e.route[i] = int32(wi)
				if open && wi >= 0 && wi < len(e.workers) {
					w := e.workers[wi]
					w.arrivals = append(w.arrivals, e.at[i].Add(e.lat))
				}
			}
		}
		if order != nil {
			for _, i := range order {
				each(i)
			}
		} else {
			for i := range int32(n) {
				each(i)
			}
		}
	}
	if ids != nil {
		// A block of a request routed elsewhere can hit in the shared
		// remote tier.
		if e.route != nil && (e.off == nil || e.off.remote == nil) {
			e.shared = sharedOnWorkers(ids, bs, e.route, len(e.workers))
		} else {
			e.shared = sharedPrefixes(ids)
		}
	}
}

// never is a time after every event.
const never = trace.Time(1<<63 - 1)

func (e *engine) run() error {
	n := e.n
	switch e.cfg.Workload.Mode {
	case ModeOpen:
		// Only the next arrival is queued, so the queue holds at most
		// one event per worker plus one.
		e.pushNextOpen()
	case ModeSessions:
		if k := e.cfg.Workload.Sessions; k > 0 {
			for range min(k, len(e.starts)) {
				e.q.push(trace.Time(0).Add(e.lat), evArrival, e.starts[0])
				e.starts = e.starts[1:]
			}
		} else {
			var scratch trace.Request
			for _, i := range e.starts {
				r := peek(e.reqs, int(i), &scratch)
				e.q.push(e.arrivalTime(r.Arrival.V).Add(e.lat), evArrival, i)
			}
			e.starts = nil
		}
	default:
		for range min(e.cfg.Workload.Clients, n) {
			e.q.push(0, evArrival, int32(e.next))
			e.next++
		}
	}
	if e.scale != nil {
		e.q.push(trace.Time(0).Add(e.scale.period), evAutoscale, 0)
	}
	for e.q.Len() > 0 {
		ev := e.q.pop()
		if ev.kind == evAutoscale && e.allDone() {
			continue // a sync after the last request changes nothing
		}
		e.stats.End = ev.at
		e.stats.Events++
		var err error
		switch ev.kind {
		case evArrival:
			if e.cfg.Workload.Mode == ModeOpen {
				e.pushNextOpen()
			}
			err = e.arrive(ev.at, ev.arg)
		case evSchedule:
			err = e.schedule(ev.at, e.workers[ev.arg])
		case evStepEnd:
			err = e.stepEnd(ev.at, e.workers[ev.arg])
		case evTransfer:
			err = e.off.transfer(e, ev.at, int(ev.arg))
		case evTimeout:
			err = e.abort(ev.at, ev.arg)
		case evAutoscale:
			e.autoscale(ev.at)
		}
		if err == nil && e.off != nil {
			err = e.off.err
		}
		if err != nil {
			return err
		}
	}
	for _, w := range e.workers {
		if w.hasWork() || w.off != nil && w.off.loading > 0 {
			return fmt.Errorf("replay: internal error: worker %s stopped with %d running and %d waiting", w.name, len(w.running), w.waiting.Len())
		}
	}
	return nil
}

func (e *engine) pushNextOpen() {
	e.nextArrival = never
	if e.next < len(e.order) {
		i := e.order[e.next]
		e.next++
		e.q.push(e.at[i].Add(e.lat), evArrival, i)
		e.nextArrival = e.at[i].Add(e.lat)
	}
}

// clientNext sends the next request of the client whose request i the
// server finished at now: the client learns it one latency later and its
// next request reaches the router one latency after that (and, in a
// session, after the next turn's think time).
func (e *engine) clientNext(now trace.Time, i int32) {
	e.sendNext(now.Add(2*e.lat), i)
}

// sendNext sends, to reach the router at at (plus think time in a
// session), the request that follows request i for its client.
func (e *engine) sendNext(at trace.Time, i int32) {
	switch e.cfg.Workload.Mode {
	case ModeClosed:
		if e.next < e.n {
			e.q.push(at, evArrival, int32(e.next))
			e.next++
		}
	case ModeSessions:
		if j := e.nextTurn[i]; j >= 0 {
			e.q.push(at.Add(e.think[j]), evArrival, j)
		} else if len(e.starts) > 0 {
			e.q.push(at, evArrival, e.starts[0])
			e.starts = e.starts[1:]
		}
	}
}

func (e *engine) arrive(now trace.Time, i int32) error {
	var in *trace.Request // nil: a shaper's request, not built (see base)
	var prompt, out int64
	if e.sh != nil {
		prompt, out, _ = e.sh.shape(int(i))
	} else {
		in = e.reqs.Request(int(i))
		prompt, out = in.InputTokens.V, in.OutputTokens.V
	}
	sent := now.Add(-e.lat)
	if e.sec != nil {
		e.sec.at(now).Arrivals++
	}
	if e.scale != nil {
		e.scale.arrivals++
	}
	if reason := e.rejectReason(prompt, out); reason != "" {
		e.stats.Rejected++
		if e.sec != nil {
			e.sec.at(now).Rejected++
		}
		o := e.base(in, i, prompt, out, sent, now)
		o.Status = trace.StatusRejected
		o.Error = reason
		o.DoneAtRouter = trace.Some(now)
		e.clientNext(now, i)
		return e.emit(o)
	}
	r := e.alloc()
	r.in, r.idx, r.prompt, r.maxOut = in, i, prompt, out
	r.shared = 0
	if in != nil {
		r.shared = len(in.HashIDs)
	}
	if e.shared != nil {
		r.shared = int(e.shared[i])
	}
	r.sent, r.arrival, r.workerArrival = sent, now, now
	r.deadline = never
	if e.timeout > 0 {
		r.deadline = sent.Add(e.timeout + e.lat)
		e.live[i] = r
		e.q.push(r.deadline, evTimeout, i)
	}
	var wi int
	if e.route != nil {
		wi = int(e.route[i])
	} else {
		wi = e.routeNow(now, r)
	}
	if wi < 0 || wi >= len(e.workers) {
		return fmt.Errorf("replay: router chose worker %d of %d", wi, len(e.workers))
	}
	w := e.workers[wi]
	if e.route != nil && e.at != nil {
		w.arrived++
	}
	r.worker = int32(wi)
	e.view.sent(r)
	w.waiting.pushBack(r)
	e.wake(now, w)
	return nil
}

// rejectReason says why request in can never be served, or "" when it can.
func (e *engine) rejectReason(prompt, out int64) string {
	bs := e.cfg.Scheduler.BlockSize
	switch {
	case prompt == 0:
		return "empty prompt"
	case out == 0:
		return "output_tokens is 0; a generation produces at least one token"
	case e.cfg.Scheduler.ContextLength > 0 && prompt+out > e.cfg.Scheduler.ContextLength:
		// As the engines refuse it (vLLM's max_model_len, SGLang's
		// context_length) before it reaches the scheduler.
		return fmt.Sprintf("max_model_len: the model's maximum context length is %d tokens; the request has %d (%d in the prompt, %d in the completion)",
			e.cfg.Scheduler.ContextLength, prompt+out, prompt, out)
	case ceilDiv(prompt+out, bs) > e.kvBlocks:
		return fmt.Sprintf("needs %d KV blocks for %d prompt + %d output tokens; a worker has %d",
			ceilDiv(prompt+out, bs), prompt, out, e.kvBlocks)
	}
	return ""
}

// wake queues a scheduling event for an idle worker.
func (e *engine) wake(now trace.Time, w *worker) {
	if !w.busy && !w.queued && w.hasWork() {
		w.queued = true
		e.q.push(now, evSchedule, int32(w.id))
	}
}

// schedule builds and runs w's next step at now. When the step ends
// before anything outside w can happen (no arrival can reach w, no
// request completes), it runs the next step inline, and so on: a window of
// steps that queues only its last step's end (fast-forward). Each inline
// step is built and priced exactly as a queued one would be, at the same
// time, so the results are the same as stepping one event at a time
// (TestFastForwardSameResults).
func (e *engine) schedule(now trace.Time, w *worker) error {
	w.queued = false
	if w.busy || !w.hasWork() {
		return nil
	}
	bound := e.window(now, w)
	// The per-step hooks need every step; fast-forward's inner loop
	// serves both schedulers without them (SGLang's steps are then built
	// by build, steady or not).
	inner := e.observe == nil && e.sec == nil && !e.test.noSteadySteps
	for steady, first := false, true; ; first = false {
		if steady && inner {
			end, inFlight, err := e.steadySteps(w, now, bound)
			if err != nil || inFlight {
				return err
			}
			now = end
		}
		if !steady || !w.s.decodeStep(w, now) {
			if e.off != nil && !first && w.waiting.Len() > 0 {
				// Admission looks the tiers up, and starts
				// loads: at an event's time only, when every
				// transfer that ended before is accounted for.
				w.queued = true
				e.q.push(now, evSchedule, int32(w.id))
				return nil
			}
			w.build(now)
			steady = w.s.steady(w)
			if w.off != nil && w.off.loading > 0 {
				bound = now // see window
			}
		}
		if len(w.sched) == 0 && w.off != nil && (w.off.loading > 0 || w.waiting.Len() > 0 && w.waiting.front().holding) {
			// Every request waits for a load (or for the blocks
			// loads hold): the loads' ends wake w.
			return nil
		}
		if len(w.sched) == 0 {
			return fmt.Errorf("replay: internal error: worker %s scheduled nothing with %d running and %d waiting",
				w.name, len(w.running), w.waiting.Len())
		}
		d := e.price(&w.batch)
		if d <= 0 {
			return fmt.Errorf("replay: step model returned a non-positive step time %v", d)
		}
		end := now.Add(d)
		e.stats.Steps++
		e.stats.Preemptions += int64(w.preempted)
		e.stats.BusyTime += d
		if e.observe != nil || e.sec != nil {
			e.step = Step{
				Worker: w.id, Start: now, End: end, Batch: &w.batch,
				Running: len(w.running), Waiting: w.waiting.Len(), Preempted: w.preempted,
			}
			w.s.describe(&e.step)
			if e.sec != nil {
				e.sec.step(&e.step)
			}
			if e.observe != nil {
				if err := e.observe(&e.step); err != nil {
					return err
				}
			}
		}
		if end >= bound || w.completes() || e.off != nil && e.off.stores(w) {
			w.busy = true
			e.q.push(end, evStepEnd, int32(w.id))
			return nil
		}
		w.emitTokens(end) // no request leaves: completes() said so, and no timeout falls before end
		now = end
	}
}

// price returns the step model's time for batch b. The time of a lone
// decode is kept per context length, shared by all workers (they have one
// model): at moderate load most steps are one request decoding, and the
// step model's contract (a pure function of the batch) makes the kept
// value exact. A lookup costs a few nanoseconds, a roofline step some 50.
func (e *engine) price(b *model.Batch) time.Duration {
	if len(b.Prefill) != 0 || len(b.Decode) != 1 || e.test.noLoneMemo {
		return e.cost.StepTime(b)
	}
	return e.decodePrice(1, b.Decode[0]).d
}

// A stepPrice is the price of a decode step, and the same in seconds (an
// ITL gap at stream interval 1).
type stepPrice struct {
	d time.Duration // 0: not yet asked
	s float64
}

// decodePrice returns the price of a step of n decodes whose contexts sum
// to ctx. Prices are kept in a table per batch size, indexed by the sum:
// a steady batch advances its sum by n a step, and across a replay the
// same sums recur, so after warming up a step costs a lookup. The table
// of lone decodes (n = 1) serves every step model; larger batches need
// the sum form (e.sum), which prices a batch by its size and sum alone;
// batches above maxTabN are priced each time.
//
// Note: a table is paged, its pages allocated when first used: a batch of
// 16 long requests sums to millions, but the sums a replay meets are a few
// ranges, and fresh memory costs a page fault per 4 KiB.
func (e *engine) decodePrice(n int, ctx int64) stepPrice {
	if n > maxTabN {
		d, _ := e.sum.DecodeStepTime(n, ctx)
		return stepPrice{d, d.Seconds()}
	}
	tab := &e.tabs[n]
	pg, off := ctx>>tabPageBits, ctx&(1<<tabPageBits-1)
	if pg < int64(len(*tab)) && (*tab)[pg] != nil {
		if p := (*tab)[pg][off]; p.d != 0 {
			return p
		}
	}
	var d time.Duration
	if n == 1 {
		e.one[0] = ctx
		d = e.cost.StepTime(&model.Batch{Decode: e.one[:]})
	} else {
		d, _ = e.sum.DecodeStepTime(n, ctx)
	}
	p := stepPrice{d, d.Seconds()}
	if pg < maxTabPages {
		if pg >= int64(len(*tab)) {
			*tab = append(*tab, make([][]stepPrice, pg+1-int64(len(*tab)))...)
		}
		if (*tab)[pg] == nil {
			(*tab)[pg] = make([]stepPrice, 1<<tabPageBits)
		}
		(*tab)[pg][off] = p
	}
	return p
}

// Price table pages hold 4,096 context sums (64 KiB); sums below 2^24 are
// kept.
const (
	tabPageBits = 12
	maxTabPages = 1 << (24 - tabPageBits)
)

// maxTabN is the largest batch size with a price table.
const maxTabN = 16

// window returns the time before which nothing outside w can change w's
// course: a step of w that ends before it can be followed at once by the
// next (unless it completes a request: completions are emitted in the
// order of events across workers). In the open loop that is the next
// arrival at w when requests were routed in advance, else the next
// arrival anywhere; in the closed loop arrivals follow completions
// elsewhere, so it is the next queued event of any kind. A client timeout
// of a request on w bounds it as well.
func (e *engine) window(now trace.Time, w *worker) trace.Time {
	if e.test.noFastForward {
		return now
	}
	bound := e.arrivalBound(w)
	if w.off != nil && w.off.loading > 0 {
		// A load's end changes w's course, and other transfers
		// starting meanwhile move it (either way: max-min sharing).
		return now
	}
	if e.timeout > 0 {
		// A request's timeout changes w's course too.
		for _, r := range w.running {
			bound = min(bound, r.deadline)
		}
		w.waiting.each(func(r *reqState) { bound = min(bound, r.deadline) })
	}
	return bound
}

// arrivalBound returns the time before which no request can reach w.
func (e *engine) arrivalBound(w *worker) trace.Time {
	switch {
	case e.cfg.Workload.Mode != ModeOpen:
		if e.q.Len() == 0 {
			return never
		}
		return e.q.h[0].at
	case e.route != nil:
		if w.arrived < len(w.arrivals) {
			return w.arrivals[w.arrived]
		}
		return never
	}
	return e.nextArrival
}

func (e *engine) stepEnd(now trace.Time, w *worker) error {
	if e.off != nil {
		// Blocks computed by the step are offloaded as it ends.
		for _, s := range w.sched {
			if err := e.off.store(e, w, s.r, now); err != nil {
				return err
			}
		}
	}
	e.done = w.finish(now, e.done[:0])
	for _, r := range e.done {
		// A request the client gave up on, or whose last chunk would
		// reach the client after it gave up, times out.
		if r.aborted || e.timeout > 0 && r.lastTok.Add(e.lat).Sub(r.sent) > e.timeout {
			if err := e.timedOut(r, now); err != nil {
				return err
			}
			continue
		}
		if e.live != nil {
			e.live[r.idx] = nil
		}
		o := e.result(r, now)
		if e.scale != nil {
			e.scale.completed(o.TTFTSec.V)
		}
		e.stats.Completed++
		if e.sec != nil {
			e.sec.at(now).Completions++
		}
		e.stats.PromptTokens += r.prompt
		e.stats.CachedTokens += r.cached
		e.stats.OutputTokens += r.out
		idx := r.idx
		e.release(r)
		e.clientNext(now, idx)
		if err := e.emit(o); err != nil {
			return err
		}
	}
	e.wake(now, w)
	if e.scale != nil {
		e.drained(now, w)
	}
	return nil
}

// abort handles the timeout of request i at now, when the server learns
// that its client gave up: a request still waiting or on an idle worker
// leaves at once; one in the step in flight leaves when the step ends
// (finish hands it back as done), as engines abort between steps.
func (e *engine) abort(now trace.Time, i int32) error {
	r := e.live[i]
	if r == nil {
		return nil // completed before its deadline
	}
	if r.loadLeft > 0 {
		r.aborted = true // leaves when its load ends (loaded)
		return nil
	}
	w := e.workers[r.worker]
	if w.waiting.remove(r) {
		w.s.leave(w, r, leaveWaiting)
		err := e.timedOut(r, now)
		if e.scale != nil {
			e.drained(now, w)
		}
		return err
	}
	if w.busy {
		r.aborted = true
		return nil
	}
	j := slices.Index(w.running, r)
	if j < 0 {
		return fmt.Errorf("replay: internal error: timed-out request %d is neither waiting nor running", i)
	}
	w.running = slices.Delete(w.running, j, j+1)
	w.s.leave(w, r, leaveRunning)
	if err := e.timedOut(r, now); err != nil {
		return err
	}
	e.wake(now, w)
	if e.scale != nil {
		e.drained(now, w)
	}
	return nil
}

// timedOut emits the record of a request aborted at now because its client
// gave up, sends that client's next request (closed loop) and recycles r.
func (e *engine) timedOut(r *reqState, now trace.Time) error {
	e.stats.TimedOut++
	e.live[r.idx] = nil
	if e.sec != nil {
		e.sec.at(now).TimedOut++
	}
	o := e.base(r.in, r.idx, r.prompt, r.maxOut, r.sent, r.arrival)
	o.Status = trace.StatusTimeout
	o.Error = fmt.Sprintf("client gave up after %g s", e.timeout.Seconds())
	o.Worker = e.workers[r.worker].name
	if r.scored {
		o.RouterScore = trace.Some(r.score)
	}
	o.OutputTokens = trace.Some(r.out)
	o.OutputTokensSource = trace.OutputServerUsage
	if r.out > 0 {
		if ttft := r.firstTok.Add(e.lat).Sub(r.sent); ttft <= e.timeout {
			o.TTFTSec = trace.Some(ttft.Seconds())
		}
	}
	o.Preemptions = trace.Some(r.preemptions)
	o.WorkerArrival = trace.Some(r.workerArrival)
	if r.scheduled {
		o.GPUStart = trace.Some(r.gpuStart)
	}
	o.DoneAtRouter = trace.Some(now)
	idx := r.idx
	e.release(r)
	// The client gave up one latency ago; its next request reaches the
	// router now.
	e.sendNext(now, idx)
	return e.emit(o)
}

func (e *engine) alloc() *reqState {
	if n := len(e.free); n > 0 {
		r := e.free[n-1]
		e.free = e.free[:n-1]
		return r
	}
	return &reqState{}
}

// release recycles r, keeping its block table's capacity (and its ITL
// list's, when records are transient).
func (e *engine) release(r *reqState) {
	e.view.left(r)
	blocks, ghost := r.blocks[:0], r.ghost[:0]
	keys, from := r.tierKeys[:0], r.loadFrom[:0]
	var itl []float64
	if e.reuse {
		itl = r.itl[:0]
	}
	*r = reqState{blocks: blocks, ghost: ghost, itl: itl, tierKeys: keys, loadFrom: from}
	e.free = append(e.free, r)
}

// record returns the record to fill: rec when records are transient.
func (e *engine) record() *trace.Request {
	if e.reuse {
		return &e.rec
	}
	return new(trace.Request)
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
	// noLoneMemo turns off the price table of lone decodes.
	noLoneMemo bool
	// noPreRoute turns off routing in advance.
	noPreRoute bool
	// checkSteady, when set, is called at the end of every run of
	// steadySteps with the worker's state, whose block tables must be
	// what stepping one at a time leaves; grownAhead says that the run
	// stopped because a step's allocation failed, after the requests
	// before the one that failed may have been given their blocks for
	// that step (as decodeStep leaves them).
	checkSteady func(w *worker, grownAhead bool)
}
