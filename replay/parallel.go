package replay

import (
	"errors"
	"runtime"
	"sync"

	"github.com/opaltrace/opaltrace/trace"
)

// A replay whose workers cannot affect one another runs each group of
// workers' event loop on its own goroutine (a part), and merges what the
// parts emit into the order a single loop emits it.
//
// Note: workers are independent when every request's worker and arrival
// time are known before the replay starts (the open loop with a
// load-blind router, so routed in advance) and nothing links them while it
// runs: no autoscaler, no KV tiers (a node's links and the remote store are
// shared), no per-step observer (it sees steps in the order of the one
// loop). The closed loop and sessions are never split: a client's next
// request waits for the completion of the one before, which ran on another
// worker. A part then holds the events of its workers and the arrivals
// routed to them (part 0 the rejected ones too), and the fast-forward
// window of a worker looks at that worker alone (window), so each part
// processes its workers' events exactly as the one loop does, in the same
// order.
//
// The one loop emits records in the order of its events: (time, kind, then
// the worker for step ends, else the push order). An arrival's push order
// is its place in the arrival order, which among equal times is request
// index order (a stable sort); a timeout is pushed by its request's
// arrival and falls a fixed time after it, so timeouts at one instant are
// in request index order as well. Each emitted record thus has a key
// (time, kind, worker or request index) that no other part's record has,
// and records of one event are emitted together by one part. The merge
// repeatedly emits the least head among the parts, once every part that
// has nothing buffered has said its next record comes later (low). Every
// counter of Stats is a sum over workers or events, End a maximum, and the
// per-second table a sum of integer counts and integer time-weighted sums
// (seconds), so they merge exactly.

// Parts: a batch of records travels from a part to the merge every
// batchRecords records, or every beatEvents events with the part's
// progress (low) so that the merge is not held up by a part that emits
// little; a part runs at most partBacklog batches ahead of the merge.
// Small batches keep few transient records in flight between a part and
// the merge, each with an ITL list: on a million Azure requests, batches
// of 256 and a backlog of 8 allocated 222 MB against 170 MB for these and
// 138 MB for the one loop (BenchmarkReplayAzureMillion/discard with
// OPALTRACE_BENCH_REQUESTS=300000).
const (
	batchRecords = 64
	beatEvents   = 1024
	partBacklog  = 4
)

// parts returns the number of goroutines the replay's workers are split
// among: 1, the one loop, when they can affect one another.
func (e *engine) parts() int {
	if e.test.parts != 0 {
		return min(e.test.parts, len(e.workers))
	}
	if e.cfg.Workload.Mode != ModeOpen || e.route == nil || e.off != nil || e.scale != nil ||
		e.observe != nil || e.test.checkSteady != nil || e.apiSvc > 0 || e.pd != nil {
		return 1
	}
	return max(1, min(maxProcs(), len(e.workers)))
}

// maxProcs is how many goroutines run at once.
func maxProcs() int { return runtime.GOMAXPROCS(0) }

// A part is the event loop of one group of workers.
type part struct {
	e     *engine
	out   chan partBatch
	stop  <-chan struct{} // closed when the merge stops early
	cur   event           // the event being processed
	beats int
	recs  []keyed
	// each batch after batchLen records or beatLen events
	batchLen, beatLen int

	// With transient records (Options.Transient), the merge hands back
	// each batch once it has emitted its records (back), whose records
	// the part then reuses with their ITL lists' memory: a request state
	// keeps its own list, as in the one loop, and a record gets a copy.
	transient bool
	pool      []*trace.Request
	spare     []float64
	mu        sync.Mutex // guards back
	back      [][]keyed  // batches emitted, handed back by the merge
}

// A keyed record carries its event's place in the one loop's order.
type keyed struct {
	at   trace.Time
	kind eventKind
	tie  int32 // worker for a step end, request index for an arrival or timeout
	rec  *trace.Request
}

func (a *keyed) before(b *keyed) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.tie < b.tie
}

// A partBatch is what a part sends the merge: records in its order, the
// time before which it will emit nothing more (low), and, last, done with
// the error its loop returned.
type partBatch struct {
	recs []keyed
	low  trace.Time
	done bool
	err  error
}

var errMergeStopped = errors.New("replay: merge stopped")

// beat is called by the part's loop before each event.
func (p *part) beat(ev event) error {
	p.cur = ev
	if p.beats++; p.beats >= p.beatLen {
		return p.send(false, nil)
	}
	return nil
}

// emit keeps a record of the current event for the merge.
func (p *part) emit(r *trace.Request) error {
	p.recs = append(p.recs, keyed{at: p.cur.at, kind: p.cur.kind, tie: p.cur.arg, rec: r})
	if len(p.recs) >= p.batchLen {
		return p.send(false, nil)
	}
	return nil
}

// send passes the records kept so far to the merge; done says the loop
// ended, with err.
func (p *part) send(done bool, err error) error {
	b := partBatch{recs: p.recs, low: p.cur.at, done: done, err: err}
	if done {
		b.low = never
	}
	p.recs, p.beats = nil, 0
	select {
	case p.out <- b:
		return nil
	case <-p.stop:
		return errMergeStopped
	}
}

// record returns a record to fill: one handed back by the merge, when
// records are transient and there is one, whose ITL list's memory it
// keeps in spare.
func (p *part) record() *trace.Request {
	p.spare = nil
	if len(p.pool) == 0 && p.transient {
		p.mu.Lock()
		back := p.back
		p.back = nil
		p.mu.Unlock()
		for _, b := range back {
			for _, k := range b {
				p.pool = append(p.pool, k.rec)
			}
		}
		if len(back) > 0 && p.recs == nil {
			b := back[0]
			clear(b)
			p.recs = b[:0]
		}
	}
	if n := len(p.pool); n > 0 {
		r := p.pool[n-1]
		p.pool = p.pool[:n-1]
		p.spare = r.ITLSec[:0]
		return r
	}
	return new(trace.Request)
}

// runParts runs the replay as k parts and merges them into e: records
// emitted in the one loop's order, stats and per-second statistics summed.
func (e *engine) runParts(k int) error {
	stop := make(chan struct{})
	parts := make([]*part, k)
	for g := range parts {
		sub := *e // shares the read-only inputs, the workers and live (each part touches its own entries)
		sub.q = eventQueue{}
		sub.stats = Stats{}
		sub.free, sub.done, sub.order, sub.next = nil, nil, nil, 0
		// Records outlive the part's next request: the merge emits them
		// later.
		sub.reuse = false
		if e.sec != nil {
			sub.sec = &seconds{workers: e.sec.workers, block: e.sec.block}
		}
		p := &part{e: &sub, out: make(chan partBatch, partBacklog), stop: stop, transient: e.reuse, batchLen: batchRecords, beatLen: beatEvents}
		if e.test.partBatch > 0 {
			p.batchLen, p.beatLen = e.test.partBatch, e.test.partBatch
		}
		sub.part, sub.emit = p, p.emit
		parts[g] = p
	}
	for _, i := range e.order {
		g := 0 // rejected at arrival
		if w := e.route[i]; w >= 0 {
			g = int(w) % k
		}
		parts[g].e.order = append(parts[g].e.order, i)
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			run := p.e.run
			if w := e.test.wrapPart; w != nil {
				run = func() error { return w(p.e.run) }
			}
			if err := run(); !errors.Is(err, errMergeStopped) {
				p.send(true, err) // fails only when the merge stopped
			}
		})
	}
	err := e.merge(parts)
	close(stop) // a part still running stops at its next batch
	wg.Wait()
	for _, p := range parts {
		e.addStats(&p.e.stats)
		if e.sec != nil {
			e.sec.add(p.e.sec)
		}
	}
	return err
}

// merge emits the parts' records in the one loop's order until every part
// is done.
func (e *engine) merge(parts []*part) error {
	type queue struct {
		batch []keyed // as received
		recs  []keyed // of batch, not yet emitted
		low   trace.Time
		done  bool
	}
	qs := make([]queue, len(parts))
	for {
		best := -1
		for g := range qs {
			if len(qs[g].recs) > 0 && (best < 0 || qs[g].recs[0].before(&qs[best].recs[0])) {
				best = g
			}
		}
		wait := -1
		for g := range qs {
			if q := &qs[g]; len(q.recs) == 0 && !q.done && (best < 0 || q.low <= qs[best].recs[0].at) {
				wait = g
				break
			}
		}
		if wait >= 0 {
			b := <-parts[wait].out
			q := &qs[wait]
			q.batch, q.recs, q.low, q.done = b.recs, b.recs, b.low, b.done
			if b.err != nil {
				return b.err
			}
			continue
		}
		if best < 0 {
			return nil
		}
		q := &qs[best]
		r := q.recs[0].rec
		q.recs = q.recs[1:]
		if err := e.emit(r); err != nil {
			return err
		}
		if p := parts[best]; len(q.recs) == 0 && p.transient {
			p.mu.Lock()
			p.back = append(p.back, q.batch) // emit kept none of them
			p.mu.Unlock()
		}
	}
}

// addStats adds a part's counts to e's.
func (e *engine) addStats(s *Stats) {
	t := &e.stats
	t.Completed += s.Completed
	t.Rejected += s.Rejected
	t.TimedOut += s.TimedOut
	t.Steps += s.Steps
	t.Events += s.Events
	t.Preemptions += s.Preemptions
	t.PromptTokens += s.PromptTokens
	t.CachedTokens += s.CachedTokens
	t.OutputTokens += s.OutputTokens
	t.BusyTime += s.BusyTime
	t.End = max(t.End, s.End)
}
