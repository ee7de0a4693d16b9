package replay

import "github.com/opaltrace/opaltrace/trace"

// An eventKind orders simultaneous events. At one instant the engine first
// completes the KV transfers that end then (so that a transfer started at
// that instant finds the links as they are), then ends the steps that
// finish then (their tokens, completions, and the next
// requests of closed-loop clients; a request that completes at its
// client's deadline is not timed out), then aborts timed-out requests,
// then delivers arrivals, then the requests
// the API servers hand over (ingress.go), and only then
// lets idle or just-finished workers build their next batch, so a batch
// built at time t sees every request that arrived by t.
type eventKind uint8

const (
	evTransfer  eventKind = iota // KV transfers of a node complete (offload.go)
	evStepEnd                    // a worker's forward pass ends
	evTimeout                    // a client gave up on a request: the server aborts it
	evHandOff                    // a prompt's KV reached its decode worker (disagg.go)
	evArrival                    // a request reaches the router
	evIngress                    // a worker's API server hands a request to its scheduler (ingress.go)
	evSchedule                   // a worker builds its next batch
	evAutoscale                  // the autoscaler's sync (autoscale.go), after all else at its instant
)

// An event is one entry of the engine's queue. It is a small value, so the
// queue allocates nothing once grown.
//
// Note: simultaneous step ends of different workers are ordered by worker
// index, not by insertion order. Their order decides the order of emitted
// completions and, in the closed loop, which client's next request is sent
// first; with fast-forward (schedule runs many steps of one worker inline
// and queues only the last step's end) the insertion order of a step end
// depends on where its window began, so it must not decide anything.
type event struct {
	at   trace.Time
	kind eventKind
	seq  uint64 // insertion order: the last tie-breaker, so order is total
	arg  int32  // worker index, or request index for arrivals
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if (a.kind == evStepEnd || a.kind == evTransfer) && a.arg != b.arg {
		return a.arg < b.arg
	}
	return a.seq < b.seq
}

// An eventQueue is a binary min-heap of events ordered by (time, kind,
// sequence number). The sequence counter lives here, not in a global.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) Len() int { return len(q.h) }

// any reports whether some event in the queue satisfies f.
func (q *eventQueue) any(f func(*event) bool) bool {
	for i := range q.h {
		if f(&q.h[i]) {
			return true
		}
	}
	return false
}

func (q *eventQueue) push(at trace.Time, kind eventKind, arg int32) {
	q.seq++
	q.h = append(q.h, event{at: at, kind: kind, seq: q.seq, arg: arg})
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.h[i].before(&q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.h[r].before(&q.h[l]) {
			m = r
		}
		if !q.h[m].before(&q.h[i]) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
