package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A worker is one serving instance: the requests it runs and queues, and
// the engine scheduler (vllm.go, sglang.go) that decides each step and
// owns the KV cache.
type worker struct {
	id     int
	name   string
	s      scheduler
	stream int64      // stream interval (tokens per chunk after the first)
	off    *offWorker // its KV tiers (offload.go); nil: none
	// plan, when set, observes the chunks w streams to clients, as
	// Dynamo's frontend does for its SLA planner (planner.go's
	// streamedObs): the decode pool's workers, not the prefill pool's,
	// whose token the client does not get from them.
	plan *planner

	running []*reqState
	waiting deque
	// unseen are the requests handed to the scheduler since its last
	// scheduling pass. Both engines take new requests in only between
	// steps, at the top of their loop, and stamp them there: vLLM's
	// EngineCore.run_busy_loop drains its input queue before each step
	// (_process_input_queue; Scheduler.add_request records the QUEUED
	// event, v1/core/sched/scheduler.py, v0.8–0.19), SGLang's
	// event_loop calls recv_requests before get_next_batch_to_run
	// (scheduler.py, v0.4–0.5; queue_time_start in
	// handle_generate_request). So a request reaching a busy worker is
	// queued, as the engines count it, when the step in flight ends
	// (reqState.engineQueued), and its queue time (vLLM's
	// request_queue_time_seconds: scheduled − queued) does not include
	// the rest of that step.
	unseen []*reqState
	// remote counts the waiting requests whose prompt's KV a prefill
	// worker computed and the decode worker has not taken yet: under
	// vLLM those waiting for their blocks (reqState.pdWait), under
	// SGLang those whose KV arrived (disagg.go).
	remote int
	busy   bool // a step is in flight
	queued bool // an evSchedule for this worker is in the queue
	// eventAt is the time of w's queued step end (busy) or scheduling
	// (queued): disagg.bound reads it off the prefill workers.
	eventAt trace.Time

	// The step in flight, reused from step to step.
	sched     []scheduled
	batch     model.Batch
	stepStart trace.Time
	prevStart trace.Time // the step before's (SGLang's overlap scheduler built this one then)
	preempted int        // preemptions while building the step

	// scratch of steadySteps: step durations, and in seconds
	durs []time.Duration
	secs []float64

	// Open loop with a load-blind router: the arrival times of the
	// requests routed here, in order, and how many have arrived.
	arrivals []trace.Time
	arrived  int

	// api is the worker's API server: the requests routed here that it
	// has not yet handed to the scheduler (ingress.go).
	api apiServer

	// onPrefilled, when set, is told of each request whose prompt is
	// computed (its first token): the KV event a cache-aware router is
	// fed by (routerView.prefilled).
	onPrefilled func(w *worker, r *reqState, at trace.Time)
}

// A scheduled entry is one request's share of a step.
type scheduled struct {
	r *reqState
	n int64 // tokens computed for it in this step
}

func newWorker(id int, name string, s SchedulerConfig, blocks int64, t *testSwitches) *worker {
	spec, ok := schedulerFor(s.Engine)
	if !ok {
		panic("replay: unknown engine " + s.Engine + " after validation")
	}
	return &worker{id: id, name: name, s: spec.new(s, blocks, t), stream: s.StreamInterval}
}

func (w *worker) hasWork() bool { return len(w.running) > 0 || w.waiting.Len() > 0 }

// build builds the next step's batch at time now into w.sched and w.batch.
func (w *worker) build(now trace.Time) {
	w.sched = w.sched[:0]
	w.batch.Prefill = w.batch.Prefill[:0]
	w.batch.Decode = w.batch.Decode[:0]
	w.preempted = 0
	w.prevStart, w.stepStart = w.stepStart, now
	w.s.build(w, now)
}

// add puts n tokens of r into the step's batch.
func (w *worker) add(r *reqState, n int64, now trace.Time) {
	if !r.scheduled {
		r.scheduled = true
		r.gpuStart = now
	}
	if r.out > 0 && n == 1 && r.computed == r.numTokens()-1 {
		w.batch.Decode = append(w.batch.Decode, r.computed)
	} else {
		w.batch.Prefill = append(w.batch.Prefill, model.PrefillChunk{Tokens: n, Context: r.computed})
	}
	r.computed += n
	if i := len(w.sched); i < cap(w.sched) {
		// Mostly the request the last step's batch had there: stored
		// only if it is not (a pointer stored while the collector
		// marks is a write barrier, some 160 instructions; the
		// autoscaled Mooncake replay's batches made 39,000).
		w.sched = w.sched[:i+1]
		s := &w.sched[i]
		if s.r != r {
			s.r = r
		}
		s.n = n
		return
	}
	w.sched = append(w.sched, scheduled{r, n})
}

// completes reports whether the step built completes a request when it
// ends.
func (w *worker) completes() bool {
	for _, s := range w.sched {
		if r := s.r; r.computed == r.numTokens() && r.out+1 == r.maxOut {
			return true
		}
	}
	return false
}

// finish ends the step at time now: every request whose sequence is now
// fully computed emits one token, and those that reach their output length
// (or whose client gave up) leave. It appends them to done, in running
// order.
func (w *worker) finish(now trace.Time, done []*reqState) []*reqState {
	w.emitTokens(now)
	w.s.stepEnded(w)
	// The requests that stay, moved up in place: only those after one
	// that left are stored again (a pointer stored while the collector
	// marks is a write barrier; keeping every one cost 23,000 on the
	// autoscaled Mooncake replay).
	kept := 0
	for i, r := range w.running {
		if r.out == r.maxOut || r.aborted {
			if r.pdOut == 0 || r.aborted {
				w.s.leave(w, r, leaveAtStepEnd)
			} // else its KV is sent before it frees its blocks (disagg.go)
			done = append(done, r)
			continue
		}
		if kept != i {
			w.running[kept] = r
		}
		kept++
	}
	clear(w.running[kept:])
	w.running = w.running[:kept]
	w.busy = false
	return done
}

// emitTokens gives a token, at now, to every request of the step whose
// sequence is now fully computed, and streams the chunks that completes.
// Alone it ends a step that completes no request (fast-forward).
func (w *worker) emitTokens(now trace.Time) {
	for _, s := range w.sched {
		r := s.r
		if r.computed != r.numTokens() {
			continue // a chunk of a prefill that is not finished
		}
		r.out++
		switch {
		case r.out == 1:
			w.firstToken(r, now)
		case w.stream == 1 || (r.out-1)%w.stream == 0 || r.out == r.maxOut:
			gap := stepSeconds(now.Sub(r.lastChunk))
			r.itl = append(r.itl, gap)
			r.lastChunk = now
			if w.plan != nil {
				m := r.out - 1 // tokens after the first: the chunk holds those since the last multiple of stream
				w.plan.laterChunk(now, gap, m-(m-1)/w.stream*w.stream)
			}
		}
		r.lastTok = now
	}
}

// firstToken records r's first token, which it has at now.
func (w *worker) firstToken(r *reqState, now trace.Time) {
	r.firstTok, r.lastChunk, r.lastTok = now, now, now
	if w.plan != nil {
		w.plan.firstToken(now, r)
	}
	if w.onPrefilled != nil {
		w.onPrefilled(w, r, now)
	}
	if r.maxOut > 1 {
		if n := numChunks(r.maxOut, w.stream) - 1; int64(cap(r.itl)) >= n {
			r.itl = r.itl[:0] // a recycled state's (Options.Transient)
		} else {
			r.itl = make([]float64, 0, n)
		}
	}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// numChunks is the number of chunks a stream of out tokens is sent in at
// stream interval k: the first token alone, then k tokens a chunk, the
// last chunk holding the rest.
func numChunks(out, k int64) int64 {
	if out <= 0 {
		return 0
	}
	return 1 + ceilDiv(out-1, k)
}

// chunkTokens returns the tokens of each chunk of a stream of out tokens
// at stream interval k.
func chunkTokens(out, k int64) []int32 {
	n := numChunks(out, k)
	c := make([]int32, n)
	for i := range c {
		c[i] = int32(k)
	}
	if n > 0 {
		c[0] = 1
	}
	if n > 1 {
		c[n-1] = int32(out - 1 - (n-2)*k)
	}
	return c
}
