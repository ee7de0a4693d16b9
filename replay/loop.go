package replay

import (
	"fmt"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

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
		for _, p := range e.scale.pools {
			if !p.planned {
				e.q.push(trace.Time(0).Add(p.period), evAutoscale, hpaSync(p))
			}
		}
		if pl := e.scale.plan; pl != nil {
			e.q.push(trace.Time(0).Add(pl.interval), evAutoscale, syncPlanner)
		}
		if a := e.scale.cfg; a.toZero() {
			e.q.push(trace.Time(0).Add(trace.DurationSeconds(a.PollingIntervalSec)), evAutoscale, syncKEDA)
		}
	}
	for e.q.Len() > 0 {
		ev := e.q.pop()
		if ev.kind == evAutoscale && e.allDone() {
			continue // a sync after the last request changes nothing
		}
		if e.part != nil {
			if err := e.part.beat(ev); err != nil {
				return err
			}
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
		case evIngress:
			err = e.ingressed(ev.at, e.workers[ev.arg])
		case evSchedule:
			err = e.schedule(ev.at, e.workers[ev.arg])
		case evStepEnd:
			err = e.stepEnd(ev.at, e.workers[ev.arg])
		case evTransfer:
			err = e.off.transfer(e, ev.at, int(ev.arg))
		case evHandOff:
			err = e.handOff(ev.at, ev.arg)
		case evTimeout:
			err = e.abort(ev.at, ev.arg)
		case evAutoscale:
			err = e.autoscaleEvent(ev.at, ev.arg)
		}
		if err == nil && e.off != nil {
			err = e.off.err
		}
		if err == nil && e.pd != nil {
			err = e.pd.err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkIdle says whether a worker was left with work after the loop.
func (e *engine) checkIdle() error {
	for _, w := range e.workers {
		if w.hasWork() || w.off != nil && w.off.loading > 0 {
			return fmt.Errorf("replay: internal error: worker %s stopped with %d running and %d waiting", w.name, len(w.running), w.waiting.Len())
		}
	}
	if e.pd != nil {
		nonzero := func(n int) bool { return n != 0 }
		if len(e.pd.held) > 0 || slices.ContainsFunc(e.pd.pending, nonzero) || slices.ContainsFunc(e.pd.unbooted, nonzero) || slices.ContainsFunc(e.pd.preHeld, nonzero) ||
			slices.ContainsFunc(e.pd.prealloc, func(q []*reqState) bool { return len(q) > 0 }) {
			return fmt.Errorf("replay: internal error: at the end %d prefill blocks held, %v waiting for decode blocks, %v held back for pre-allocation, %v pre-allocated on the way",
				len(e.pd.held), e.pd.pending, e.pd.unbooted, e.pd.preHeld)
		}
		for d, n := range e.pd.inbound {
			if n != 0 {
				return fmt.Errorf("replay: internal error: decode worker %s stopped with %d requests counted on their way", e.workers[e.pd.prefill+d].name, n)
			}
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

func (e *engine) arrive(now trace.Time, i int32) error {
	var in *trace.Request // nil: a shaper's request, not built (see base)
	var prompt, out int64
	if e.sh != nil {
		prompt, out, _ = e.sh.shape(int(i))
	} else {
		// Columns build a request on demand: into the engine's scratch,
		// kept in the request's state (below) when it is served, rather
		// than a new kilobyte each (12 MB of garbage for the Mooncake
		// trace's 12,031 requests).
		in = peek(e.reqs, int(i), &e.inScratch)
		prompt, out = in.InputTokens.V, in.OutputTokens.V
	}
	sent := now.Add(-e.lat)
	if e.sec != nil {
		e.sec.at(now).Arrivals++
	}
	if e.scale != nil {
		e.scale.arrived()
	}
	if reason := e.rejectReason(prompt, out); reason != "" {
		o := e.rejected(now, in, i, prompt, out, sent, now, reason)
		e.clientNext(now, i)
		return e.emit(o)
	}
	r := e.alloc(ceilDiv(prompt+out, e.cfg.Scheduler.BlockSize))
	if in == &e.inScratch {
		r.inBuf = e.inScratch
		in = &r.inBuf
	}
	r.in, r.idx, r.prompt, r.maxOut = in, i, prompt, out
	if e.pd != nil {
		// Its prefill worker computes one token (disagg.go).
		r.maxOut, r.pdOut = 1, out
	}
	if e.slab != nil {
		r.itl = e.slab.itlList(i) // emitTokens takes it when it fits
	}
	r.shared = 0
	if in != nil {
		r.shared = len(in.HashIDs)
	}
	if e.shared != nil {
		r.shared = int(e.shared[i])
	}
	r.sent, r.arrival = sent, now
	r.deadline = never
	if e.timeout > 0 {
		r.deadline = sent.Add(e.timeout + e.lat)
		e.live[i] = r
		e.q.push(r.deadline, evTimeout, i)
	}
	if e.scale != nil && e.scale.toZero {
		if held, err := e.held(now, r); held || err != nil {
			return err
		}
	}
	return e.dispatch(now, r)
}

// dispatch routes request r at now (it arrived then, or waited at the
// gateway for a ready worker: scaletozero.go) and hands it to its worker.
func (e *engine) dispatch(now trace.Time, r *reqState) error {
	i := r.idx
	r.workerArrival, r.engineQueued = now, now
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
	if e.online != nil {
		// Before r's blocks are hashed (hashChain), which the router
		// does not ask for.
		e.online.arrived(e, r, wi)
	}
	if e.pd != nil && e.pd.sglang {
		// Before its prefill worker counts it: the pair is chosen at
		// once, each by its own pool's counts.
		e.pd.choose(r, e.view.out)
		e.decodeChosen(r)
		e.awaitPrealloc(now, r)
	}
	e.view.sent(r)
	if e.apiSvc > 0 {
		e.ingress(now, w, r)
		return nil
	}
	return e.admit(now, w, r)
}

// rejected counts request i (in, prompt and out tokens, sent and reaching
// the router at arrival) as rejected at now for reason, and returns its
// record: at arrival, or at the gateway (scaletozero.go).
func (e *engine) rejected(now trace.Time, in *trace.Request, i int32, prompt, out int64, sent, arrival trace.Time, reason string) *trace.Request {
	e.stats.Rejected++
	if e.online != nil {
		e.online.reject(i)
	}
	if e.sec != nil {
		e.sec.at(now).Rejected++
	}
	o := e.base(in, i, prompt, out, sent, arrival)
	o.Status = trace.StatusRejected
	o.Error = reason
	o.DoneAtRouter = trace.Some(now)
	if e.scale != nil {
		e.scale.ended(now, arrival, 0)
	}
	return o
}

// admit hands request r to w's scheduler at now.
func (e *engine) admit(now trace.Time, w *worker, r *reqState) error {
	w.waiting.pushBack(r)
	w.unseen = append(w.unseen, r)
	if w.off != nil && e.off.spec.HiCache != nil {
		if err := e.off.prefetch(e, w, r, now); err != nil {
			return err
		}
	}
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
	case e.prefillKV > 0 && ceilDiv(prompt+1, bs) > e.prefillKV:
		// A prefill worker holds the prompt and its one token.
		return fmt.Sprintf("needs %d KV blocks for its %d prompt tokens and the first output token; a prefill worker has %d",
			ceilDiv(prompt+1, bs), prompt, e.prefillKV)
	}
	return ""
}

// wake queues a scheduling event for an idle worker.
func (e *engine) wake(now trace.Time, w *worker) {
	if !w.busy && !w.queued && w.hasWork() {
		w.queued, w.eventAt = true, now
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
	if e.pd != nil && e.pd.sglang && !w.busy && w.id >= e.pd.prefill {
		e.preallocate(w, now)
	}
	if w.busy || !w.hasWork() {
		return nil
	}
	if len(w.unseen) > 0 {
		for _, r := range w.unseen {
			r.engineQueued = now
		}
		clear(w.unseen)
		w.unseen = w.unseen[:0]
	}
	bound := e.window(now, w)
	// The per-step hooks need every step; fast-forward's inner loop
	// serves both schedulers without them (SGLang's steps are then built
	// by build, steady or not). So does the SLA planner's observation of
	// each token a decode worker streams (worker.plan): observed in the
	// inner loop, it cost round-robin's replay on
	// BenchmarkReplayMooncakeRouters 33 million instructions, and even
	// a test of it before the lone-request loop 4 million (registers
	// spilled in the loop).
	inner := e.observe == nil && e.sec == nil && !e.test.noSteadySteps && w.plan == nil
	for steady, first := false, true; ; first = false {
		if steady && inner {
			end, inFlight, err := e.steadySteps(w, now, bound)
			if err != nil || inFlight {
				return err
			}
			now = end
		}
		if !steady || !w.s.decodeStep(w, now) {
			if w.off != nil && !first && (w.waiting.Len() > 0 || e.off.evictionsStore()) {
				// Admission looks the tiers up, and starts
				// loads, and under HiCache's write_back an
				// allocation's evictions start stores: at an
				// event's time only, when every transfer that
				// ended before is accounted for.
				w.queued = true
				e.q.push(now, evSchedule, int32(w.id))
				return nil
			}
			w.build(now)
			steady = w.s.steady(w)
			if w.off != nil && w.off.loading > 0 {
				bound = now // see window
			}
			if e.pd != nil && !e.pd.sglang {
				bound = e.pd.loadsBound(w, bound) // loads it started
			}
		}
		if len(w.sched) == 0 && w.off != nil && (w.off.loading > 0 || w.waiting.Len() > 0 && w.waiting.front().holding) {
			// Every request waits for a load (or for the blocks
			// loads hold): the loads' ends wake w.
			return nil
		}
		if len(w.sched) == 0 && e.pd != nil && e.pd.unstall(w) {
			w.stepStart = w.prevStart // the build that scheduled nothing, undone
			w.build(now)
			steady = w.s.steady(w)
		}
		if len(w.sched) == 0 && e.pd != nil && (e.pd.waitsForSends(w) || e.pd.waitsForLoads(w) || e.pd.waitsForBoot(w) || e.pd.err != nil) {
			if !first {
				// Idle from now, ahead of the events before now:
				// one of them may wake it earlier (a hand-over, a
				// timeout). From an event at now instead.
				w.queued, w.eventAt = true, now
				e.q.push(now, evSchedule, int32(w.id))
			}
			return nil // (an error: the loop returns it)
		}
		if len(w.sched) == 0 {
			return e.stalled(w)
		}
		pr := e.pricingOf(w)
		d := pr.price(&w.batch)
		if d <= 0 {
			return fmt.Errorf("replay: step model returned a non-positive step time %v", d)
		}
		end := now.Add(d)
		e.stats.Steps++
		e.stats.Preemptions += int64(w.preempted)
		e.stats.BusyTime += d
		if e.observe != nil || e.sec != nil {
			e.step = Step{
				Worker: w.id, Start: now, End: end, Batch: &w.batch, Cost: pr.cost,
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
		if w.off != nil && len(w.off.stepLoads) > 0 {
			// HiCache loads from L2 during the step: its end
			// waits for them (hicache.go, stepLoaded).
			w.busy = true
			return e.off.startStepLoads(e, w, now, d)
		}
		if end >= bound || w.completes() || w.off != nil && e.off.stores(w) || e.pd != nil && e.pd.admitsAfter(w) {
			w.busy, w.eventAt = true, end
			e.q.push(end, evStepEnd, int32(w.id))
			return nil
		}
		w.emitTokens(end) // no request leaves: completes() said so, and no timeout falls before end
		now = end
	}
}

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
	return min(e.routerBound(w), w.api.next())
}

// routerBound returns the time before which no request can reach the
// router for w.
func (e *engine) routerBound(w *worker) trace.Time {
	switch {
	case e.cfg.Workload.Mode != ModeOpen || e.pd != nil && (e.apiSvc > 0 || e.timeout > 0 || e.off != nil && e.off.spec.HiCache != nil):
		// (Disaggregated behind decode API servers, a transfer's end
		// is not known until its request leaves the line; with
		// timeouts, an abort may let a prefill worker's waiting
		// request in; with HiCache, a prefill server waiting for a
		// prefetch schedules at its query's end and its deadline:
		// disagg.bound follows none of these.)
		if e.q.Len() == 0 {
			return never
		}
		return e.q.h[0].at
	case e.pd != nil && e.off != nil:
		// A worker waiting for a tier load (a prefill worker's, or a
		// decode worker's preempted request) schedules when it ends,
		// which disagg.bound does not follow: the next transfer
		// event bounds the window too.
		return min(e.pd.bound(e, w), e.off.next())
	case e.pd != nil:
		return e.pd.bound(e, w)
	case e.route != nil:
		if w.arrived < len(w.arrivals) {
			return w.arrivals[w.arrived]
		}
		return never
	}
	return e.nextArrival
}

// completed emits the record of r, which completed at now, sends its
// client's next request and recycles r.
func (e *engine) completed(r *reqState, now trace.Time) error {
	if e.live != nil {
		e.live[r.idx] = nil
	}
	o := e.result(r, now)
	if e.scale != nil {
		e.scale.completed(o)
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
	return e.emit(o)
}

func (e *engine) stepEnd(now trace.Time, w *worker) error {
	if w.off != nil {
		// Blocks computed by the step are offloaded as it ends.
		for _, s := range w.sched {
			if err := e.off.store(e, w, s.r, now); err != nil {
				return err
			}
		}
	}
	e.done = w.finish(now, e.done[:0])
	for _, r := range e.done {
		if r.pdOut > 0 && !r.aborted {
			// Prefilled on a prefill worker: its KV goes to a
			// decode worker, unless its client gave up.
			if e.timeout == 0 || r.lastTok.Add(e.lat).Sub(r.sent) <= e.timeout {
				if err := e.prefilled(now, w, r); err != nil {
					return err
				}
				continue
			}
			w.s.leave(w, r, leaveAtStepEnd)
		}
		// A request the client gave up on, or whose last chunk would
		// reach the client after it gave up, times out.
		if r.aborted || e.timeout > 0 && r.lastTok.Add(e.lat).Sub(r.sent) > e.timeout {
			if err := e.timedOut(r, now); err != nil {
				return err
			}
			continue
		}
		if err := e.completed(r, now); err != nil {
			return err
		}
	}
	if e.pd != nil && e.pd.sglang && w.id >= e.pd.prefill && !w.busy {
		e.preallocate(w, now) // with the room its finished requests left
	}
	e.wake(now, w)
	if e.scale != nil {
		e.drained(now, w)
	}
	return nil
}

// stalled returns the error of a worker that scheduled nothing, with
// nothing running and no load under way: with KV tiers, requests behind
// its queue's front may hold the GPU blocks their finished loads filled
// while the front cannot get the blocks it needs (a preempted request
// put before them, say): no request ends to free blocks, and a
// first-come-first-served scheduler takes no request past the front
// (vLLM's breaks at the first it cannot allocate), so the worker cannot
// go on. Else it is the engine's own error.
func (e *engine) stalled(w *worker) error {
	held, holders := 0, 0
	w.waiting.each(func(r *reqState) {
		if r.holding {
			held += len(r.blocks)
			holders++
		}
	})
	if w.off != nil && holders > 0 && len(w.running) == 0 {
		return fmt.Errorf("replay: worker %s stalls: request %d at its queue's front cannot get the KV blocks it needs (%d free of %d), "+
			"requests behind it (%d) hold %d blocks that their loads from a KV tier filled, and none is running to free any; "+
			"give the workers more KV cache",
			w.name, w.waiting.front().idx, w.s.freeBlocks(), e.kvBlocksOf(w.id), holders, held)
	}
	return fmt.Errorf("replay: internal error: worker %s scheduled nothing with %d running and %d waiting",
		w.name, len(w.running), w.waiting.Len())
}
