package replay

import "github.com/opaltrace/opaltrace/trace"

// A worker's API server takes the requests routed to it one after another
// before they reach its scheduler: ClientConfig.APIServerRequestSec is
// its serial time per request, and a request that arrives while it is
// busy with others waits its turn (a FIFO single server), so a burst
// reaches the scheduler spread out, one service time apart.
//
// Why: both engines ingest requests in one process. vLLM's API server
// (vllm/v1/engine/async_llm.py, AsyncLLM.add_request, v0.8.x) runs on one
// asyncio loop and, for each request, processes its inputs (tokenising
// the prompt: processor.process_inputs) before it hands the request to
// the engine core; SGLang's TokenizerManager (v0.4.0,
// python/sglang/srt/managers/tokenizer_manager.py, generate_request →
// _tokenize_one_request → send_to_scheduler) is one process that
// tokenises each request and sends it to the scheduler over ZMQ. A
// request's TTFT and E2E include its wait; its WorkerArrival (and so
// QueueSec) is when the scheduler got it.
//
// Note: the hand-over times are fixed when a request joins the line, so
// a request that times out while in it leaves at once without moving the
// others' (the server had done their work regardless). With a service
// time of 0 (the default) requests reach the scheduler as they reach the
// router, by the path they always took.

// An apiServer is the line of the requests an API server hands to one
// worker. The server may front several workers (the data-parallel ranks
// of one engine server, Config.Client.APIServerRanks): it serves their
// requests in one line (engine.apiFree), each worker's in hand-over order.
//
// Note: the router picks a request's rank when it arrives, before its turn
// at the API server, where SGLang's data-parallel controller and vLLM's
// DP client pick it after; for a round-robin dispatch that is the same
// choice, and a load-aware one sees the ranks up to one API server line
// earlier than the engine's did.
type apiServer struct {
	reqs []*reqState  // in hand-over order; nil: timed out while in line
	at   []trace.Time // when each is handed over
	head int          // first entry not yet handed over
}

// empty reports whether no request is in the line.
func (a *apiServer) empty() bool {
	for _, r := range a.reqs[a.head:] {
		if r != nil {
			return false
		}
	}
	return true
}

// next returns the time of the next hand-over, never when none is due.
func (a *apiServer) next() trace.Time {
	if a.head < len(a.at) {
		return a.at[a.head]
	}
	return never
}

// remove takes r out of the line, reporting whether it was in it.
func (a *apiServer) remove(r *reqState) bool {
	for k := a.head; k < len(a.reqs); k++ {
		if a.reqs[k] == r {
			a.reqs[k] = nil
			return true
		}
	}
	return false
}

// ingress puts request r, which reached the router at now for w, in the
// line of w's API server: it is handed to the scheduler one service time
// after both it arrived and the server finished the request before it
// (for any of the workers it fronts).
func (e *engine) ingress(now trace.Time, w *worker, r *reqState) {
	a := &w.api
	if a.head == len(a.reqs) {
		a.reqs, a.at, a.head = a.reqs[:0], a.at[:0], 0
	}
	free := &e.apiFree[e.apiServerOf(w.id)]
	*free = max(*free, now).Add(e.apiSvc)
	a.reqs = append(a.reqs, r)
	a.at = append(a.at, *free)
	e.q.push(*free, evIngress, int32(w.id))
}

// apiServerOf returns the API server of worker slot w: consecutive
// workers apiRanks to a server, or, with a prefill pool whose servers
// have ranks of their own (apiPrefillRanks), the prefill slots that many
// to a server and the decode slots after them apiRanks to a server.
func (e *engine) apiServerOf(w int) int {
	switch {
	case e.apiPrefillRanks == 0:
		return w / e.apiRanks
	case w < e.apiPrefillSlots:
		return w / e.apiPrefillRanks
	}
	return e.apiDecodeFirst + (w-e.apiPrefillSlots)/e.apiRanks
}

// ingressed hands the head of w's API server's line, due at now, to w's
// scheduler (nothing when it timed out while in line).
func (e *engine) ingressed(now trace.Time, w *worker) error {
	a := &w.api
	r := a.reqs[a.head]
	a.reqs[a.head] = nil
	a.head++
	if r == nil {
		return nil
	}
	if e.pd != nil && e.pd.moving[r.idx] == r {
		// A decode request behind vLLM's proxy: its KV load starts
		// now (disagg.go), unless its client gave up meanwhile; its
		// queue times stay the prefill worker's.
		if r.aborted {
			return e.handOver(now, r) // no transfer was started
		}
		if !e.pd.sglang {
			e.awaitBlocks(now, r)
			return nil
		}
		return e.startTransfer(now, r, r.prompt)
	}
	r.workerArrival, r.engineQueued = now, now
	return e.admit(now, w, r)
}
