package replay

import (
	"fmt"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

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

// abort handles the timeout of request i at now, when the server learns
// that its client gave up: a request still waiting or on an idle worker
// leaves at once; one in the step in flight leaves when the step ends
// (finish hands it back as done), as engines abort between steps.
func (e *engine) abort(now trace.Time, i int32) error {
	r := e.live[i]
	if r == nil {
		return nil // completed before its deadline
	}
	if r.worker == noWorker {
		// Held at the gateway for want of a ready worker
		// (scaletozero.go): it leaves the line.
		e.dropHeld(r, now)
		return e.timedOut(r, now)
	}
	if r.pdWait {
		// In its decode worker's queue, its blocks not allocated, its
		// KV still on its prefill worker: both let it go now.
		d := e.workers[e.pd.to[i]]
		if !d.waiting.remove(r) {
			return fmt.Errorf("replay: internal error: request %d waiting for decode blocks is not in %s's queue", i, d.name)
		}
		d.remote--
		e.pd.pending[r.worker]--
		r.pdWait, r.remote, r.aborted = false, false, true
		e.wake(now, d)
		return e.handOver(now, r)
	}
	if r.loadLeft > 0 || e.pd != nil && e.pd.moving[i] == r {
		r.aborted = true // leaves when its load (or KV transfer: handOff) ends (loaded)
		return nil
	}
	w := e.workers[r.worker]
	if w.api.remove(r) {
		// Still at the API server: it leaves the line now, and the
		// server's later hand-overs keep their times (ingress.go).
		if err := e.timedOut(r, now); err != nil {
			return err
		}
		if e.scale != nil {
			e.drained(now, w)
		}
		return nil
	}
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
	if e.pd != nil {
		e.pd.uncount(r.idx) // timed out before its hand-over
		if r.pdPre || r.pdHeld {
			e.dropPrealloc(now, r)
		}
	}
	e.live[r.idx] = nil
	if e.sec != nil {
		e.sec.at(now).TimedOut++
	}
	o := e.base(r.in, r.idx, r.prompt, r.wants(), r.sent, r.arrival)
	o.Status = trace.StatusTimeout
	o.Error = fmt.Sprintf("client gave up after %g s", e.timeout.Seconds())
	o.OutputTokens = trace.Some(r.out)
	o.OutputTokensSource = trace.OutputServerUsage
	o.DoneAtRouter = trace.Some(now)
	if e.scale != nil {
		e.scale.ended(now, r.arrival, r.out)
	}
	if r.worker == noWorker {
		// It never left the gateway (scaletozero.go): no router or
		// worker counted it.
		idx := r.idx
		if e.online != nil {
			e.online.reject(idx)
		}
		e.recycle(r)
		e.sendNext(now, idx)
		return e.emit(o)
	}
	o.Worker = e.workers[r.worker].name
	if r.prefilledPD && r.worker != r.pdFrom {
		o.PrefillWorker = e.workers[r.pdFrom].name // it reached its decode worker
	}
	if r.scored {
		o.RouterScore = trace.Some(r.score)
	}
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
	idx := r.idx
	e.release(r)
	if e.scale != nil && e.pd != nil {
		// The decode worker it was on its way to may drain now.
		e.drained(now, e.workers[e.pd.to[idx]])
	}
	// The client gave up one latency ago; its next request reaches the
	// router now.
	e.sendNext(now, idx)
	return e.emit(o)
}
