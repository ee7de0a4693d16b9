package replay

import (
	"cmp"
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
	Steps        int64         // forward passes, all workers
	Preemptions  int64         // recompute preemptions, all workers
	PromptTokens int64         // prompt tokens of completed requests
	CachedTokens int64         // of which prefix-cache hits at first schedule
	OutputTokens int64         // tokens generated
	Evictions    int64         // cached KV blocks reused for other content
	BusyTime     time.Duration // sum over workers of time spent in steps
	End          trace.Time    // time of the last event
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
	return RunObserved(cfg, cost, kvBlocks, reqs, emit, nil)
}

// RunObserved is Run with an observer called for every step (nil for
// none); an error from it stops the replay. Validators use it.
func RunObserved(cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request, emit func(*trace.Request) error, observe func(*Step) error) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	if cost == nil || emit == nil {
		return Stats{}, errors.New("replay: no step model or no emit function")
	}
	cfg = cfg.withDefaults()
	if cfg.Scheduler.KVCacheTokens > 0 {
		kvBlocks = cfg.Scheduler.KVCacheTokens / cfg.Scheduler.BlockSize
	}
	if kvBlocks <= 0 {
		return Stats{}, errors.New("replay: no KV cache capacity (kv_cache_tokens is 0 and the model gave none)")
	}
	if kvBlocks > 1<<31-1 {
		return Stats{}, fmt.Errorf("replay: %d KV blocks per worker is more than the engine supports", kvBlocks)
	}
	if len(reqs) > 1<<31-1 {
		return Stats{}, fmt.Errorf("replay: %d requests is more than the engine supports", len(reqs))
	}
	if err := checkInputs(reqs, cfg.Workload.Mode == ModeOpen); err != nil {
		return Stats{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	router, err := newRouter(cfg.Router, rng)
	if err != nil {
		return Stats{}, err
	}
	e := &engine{
		cfg:      cfg,
		cost:     cost,
		router:   router,
		reqs:     reqs,
		emit:     emit,
		observe:  observe,
		kvBlocks: kvBlocks,
	}
	e.stats.Requests = len(reqs)
	for i := range cfg.Workers {
		e.workers = append(e.workers, newWorker(i, "w"+strconv.Itoa(i), cfg.Scheduler, kvBlocks))
	}
	if *cfg.Scheduler.EnablePrefixCaching && !indexAll {
		e.shared = sharedPrefixes(reqs)
	}
	if err := e.run(); err != nil {
		return e.stats, err
	}
	for _, w := range e.workers {
		e.stats.Evictions += w.kv.Evictions
	}
	return e.stats, nil
}

// checkInputs rejects inputs the replay cannot interpret, before any
// simulation, with FILE:LINE: field: what is wrong.
func checkInputs(reqs []*trace.Request, open bool) error {
	var errs []error
	for i, r := range reqs {
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
	workers  []*worker
	q        eventQueue
	reqs     []*trace.Request
	kvBlocks int64
	emit     func(*trace.Request) error
	observe  func(*Step) error
	stats    Stats

	shared []int32 // per request: leading hash ids another request also has
	order  []int32 // open loop: request indices by arrival time
	next   int     // next entry of order (open) or of reqs (closed)
	at     []trace.Time

	free []*reqState // recycled request states
	done []*reqState // scratch: requests completed by a step
	step Step
}

func (e *engine) NumWorkers() int { return len(e.workers) }

func (e *engine) Load(i int) WorkerLoad {
	w := e.workers[i]
	return WorkerLoad{Running: len(w.running), Waiting: w.waiting.Len(), FreeBlocks: w.kv.NumFree()}
}

// arrivalTime is request i's open-loop arrival: its trace arrival scaled.
func (e *engine) arrivalTime(i int32) trace.Time {
	a := e.reqs[i].Arrival.V
	if e.cfg.Workload.TimeScale == 1 {
		return a
	}
	return trace.Time(float64(a)*e.cfg.Workload.TimeScale + 0.5)
}

func (e *engine) run() error {
	n := len(e.reqs)
	if e.cfg.Workload.Mode == ModeOpen {
		// Only the next arrival is queued, so the queue holds at most
		// one event per worker plus one.
		e.order = make([]int32, n)
		e.at = make([]trace.Time, n)
		for i := range e.order {
			e.order[i] = int32(i)
			e.at[i] = e.arrivalTime(int32(i))
		}
		slices.SortStableFunc(e.order, func(a, b int32) int { return cmp.Compare(e.at[a], e.at[b]) })
		e.pushNextOpen()
	} else {
		for range min(e.cfg.Workload.Clients, n) {
			e.q.push(0, evArrival, int32(e.next))
			e.next++
		}
	}
	for e.q.Len() > 0 {
		ev := e.q.pop()
		e.stats.End = ev.at
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
		}
		if err != nil {
			return err
		}
	}
	for _, w := range e.workers {
		if w.hasWork() {
			return fmt.Errorf("replay: internal error: worker %s stopped with %d running and %d waiting", w.name, len(w.running), w.waiting.Len())
		}
	}
	return nil
}

func (e *engine) pushNextOpen() {
	if e.next < len(e.order) {
		i := e.order[e.next]
		e.next++
		e.q.push(e.at[i], evArrival, i)
	}
}

// clientNext sends the next request of a closed-loop client whose request
// just completed.
func (e *engine) clientNext(now trace.Time) {
	if e.cfg.Workload.Mode == ModeClosed && e.next < len(e.reqs) {
		e.q.push(now, evArrival, int32(e.next))
		e.next++
	}
}

func (e *engine) arrive(now trace.Time, i int32) error {
	in := e.reqs[i]
	bs := e.cfg.Scheduler.BlockSize
	prompt, out := in.InputTokens.V, in.OutputTokens.V
	var reason string
	switch {
	case prompt == 0:
		reason = "empty prompt"
	case out == 0:
		reason = "output_tokens is 0; a generation produces at least one token"
	case ceilDiv(prompt+out, bs) > e.kvBlocks:
		reason = fmt.Sprintf("needs %d KV blocks for %d prompt + %d output tokens; a worker has %d",
			ceilDiv(prompt+out, bs), prompt, out, e.kvBlocks)
	}
	if reason != "" {
		e.stats.Rejected++
		o := e.base(in, i, now)
		o.Status = trace.StatusRejected
		o.Error = reason
		o.DoneAtRouter = trace.Some(now)
		e.clientNext(now)
		return e.emit(o)
	}
	r := e.alloc()
	r.in, r.idx, r.prompt, r.maxOut = in, i, prompt, out
	r.shared = len(in.HashIDs)
	if e.shared != nil {
		r.shared = int(e.shared[i])
	}
	r.arrival, r.workerArrival = now, now
	wi := e.router.Route(int(i), e)
	if wi < 0 || wi >= len(e.workers) {
		return fmt.Errorf("replay: router chose worker %d of %d", wi, len(e.workers))
	}
	w := e.workers[wi]
	r.worker = int32(wi)
	w.waiting.pushBack(r)
	e.wake(now, w)
	return nil
}

// wake queues a scheduling event for an idle worker.
func (e *engine) wake(now trace.Time, w *worker) {
	if !w.busy && !w.queued && w.hasWork() {
		w.queued = true
		e.q.push(now, evSchedule, int32(w.id))
	}
}

func (e *engine) schedule(now trace.Time, w *worker) error {
	w.queued = false
	if w.busy || !w.hasWork() {
		return nil
	}
	w.build(now)
	if len(w.sched) == 0 {
		return fmt.Errorf("replay: internal error: worker %s scheduled nothing with %d running and %d waiting",
			w.name, len(w.running), w.waiting.Len())
	}
	d := e.cost.StepTime(&w.batch)
	if d <= 0 {
		return fmt.Errorf("replay: step model returned a non-positive step time %v", d)
	}
	end := now.Add(d)
	w.busy = true
	e.stats.Steps++
	e.stats.Preemptions += int64(w.preempted)
	e.stats.BusyTime += d
	if e.observe != nil {
		e.step = Step{
			Worker: w.id, Start: now, End: end, Batch: &w.batch,
			Running: len(w.running), Waiting: w.waiting.Len(), Preempted: w.preempted, KV: w.kv,
		}
		if err := e.observe(&e.step); err != nil {
			return err
		}
	}
	e.q.push(end, evStepEnd, int32(w.id))
	return nil
}

func (e *engine) stepEnd(now trace.Time, w *worker) error {
	e.done = w.finish(now, e.done[:0])
	for _, r := range e.done {
		o := e.result(r, now)
		e.stats.Completed++
		e.stats.PromptTokens += r.prompt
		e.stats.CachedTokens += r.cached
		e.stats.OutputTokens += r.out
		e.release(r)
		e.clientNext(now)
		if err := e.emit(o); err != nil {
			return err
		}
	}
	e.wake(now, w)
	return nil
}

func (e *engine) alloc() *reqState {
	if n := len(e.free); n > 0 {
		r := e.free[n-1]
		e.free = e.free[:n-1]
		return r
	}
	return &reqState{}
}

// release recycles r, keeping its block table's capacity.
func (e *engine) release(r *reqState) {
	blocks, ghost := r.blocks[:0], r.ghost[:0]
	*r = reqState{blocks: blocks, ghost: ghost}
	e.free = append(e.free, r)
}

// indexAll turns off the private-block optimisation, so that a test can
// show it changes nothing.
var indexAll = false

// sharedPrefixes returns, for each request, how many of its leading
// hash_ids occur in more than one place in the trace. Blocks past that
// prefix can be hit by no other request, so the cache need not index them
// (kvcache.Cache.CommitPrivate): the results are the same, the replay
// faster.
func sharedPrefixes(reqs []*trace.Request) []int32 {
	var all []int64
	for _, r := range reqs {
		all = append(all, r.HashIDs...)
	}
	slices.Sort(all)
	var shared []int64 // ids seen more than once, sorted
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] && (len(shared) == 0 || shared[len(shared)-1] != all[i]) {
			shared = append(shared, all[i])
		}
	}
	out := make([]int32, len(reqs))
	for i, r := range reqs {
		n := 0
		for _, id := range r.HashIDs {
			if _, ok := slices.BinarySearch(shared, id); !ok {
				break
			}
			n++
		}
		out[i] = int32(n)
	}
	return out
}
