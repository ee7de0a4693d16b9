package replay

import (
	"fmt"
	"slices"
)

// An opalWorker is Opal's LLMWorkerVLLMScheduler (vllm_worker.py): a
// waiting list, a running list, a persistent batch, GPU blocks counted,
// and its KV tiers (opaltiers.go). Its loop (run) is _vllm_scheduling_loop.
type opalWorker struct {
	s  *opalSim
	c  *OpalCompat
	id int
	p  *simProc

	waiting   []*opalReq
	running   []*opalReq
	completed []*opalReq
	batch     *opalBatch

	totalBlocks, freeBlocks int64
	kvcInFlight             int64
	tiers                   []*opalTier

	gpuBusy            float64
	steps, preemptions int64
	// waitNext: the next build waits Opal's 1 ms (after a completion,
	// when the batch is rebuilt every step).
	waitNext bool
	// idle: the loop sleeps for want of work. Only then does an arrival
	// wake it, as Opal interrupts its scheduler only in that sleep: a
	// loop parked in the IO of a KV store must wait for the IO.
	idle bool
}

// An opalBatch is BatchMetadata: the requests of the persistent batch and
// the token total of the step that built it.
type opalBatch struct {
	prefill, decode []*opalReq
	total           int64
}

func (b *opalBatch) empty() bool { return len(b.prefill)+len(b.decode) == 0 }
func (b *opalBatch) seqs() int   { return len(b.prefill) + len(b.decode) }

func newOpalWorker(s *opalSim, id int, shared []*opalDevice) *opalWorker {
	w := &opalWorker{s: s, c: s.cfg, id: id}
	w.totalBlocks = s.cfg.gpuBlocks()
	w.freeBlocks = w.totalBlocks
	for i, t := range s.cfg.Tiers {
		d := shared[i]
		if d == nil {
			d = s.device(t)
		}
		w.tiers = append(w.tiers, newOpalTier(d, !s.cfg.Quirks.NoTierEviction))
	}
	return w
}

func (w *opalWorker) start() { w.p = w.s.env.spawn(w.run) }

// arrive is _check_new_requests taking r from the worker's queue.
func (w *opalWorker) arrive(r *opalReq) {
	r.workerArrival = w.s.env.now
	r.phase = opalWaiting
	w.waiting = append(w.waiting, r)
	if w.p != nil && w.idle {
		w.p.wake()
	}
}

// run is _vllm_scheduling_loop.
func (w *opalWorker) run(p *simProc) {
	for w.s.err == nil {
		if len(w.waiting) > 0 || len(w.running) > 0 {
			w.step(p)
			continue
		}
		w.idle = true
		p.park()
		w.idle = false
	}
}

// step is _scheduler_step.
func (w *opalWorker) step(p *simProc) {
	q := w.c.Quirks
	if w.batch == nil || w.batch.empty() || !q.PersistentBatch {
		// Opal builds a new batch after its 1 ms wait; rebuilding a
		// running batch every step (PersistentBatch off) waits only
		// where Opal would have rebuilt it.
		wait := w.batch == nil || w.batch.empty() || w.waitNext
		w.waitNext = false
		w.batch = w.build(p, w.batch, wait)
		if w.batch.empty() {
			p.sleep(0)
			return
		}
	}
	t := w.batchTime(w.batch)
	p.sleep(t)
	w.gpuBusy += t
	w.steps++
	w.update(w.batch)
	done := w.moveCompleted()
	if done > 0 {
		w.handleCompleted(p)
		if q.PersistentBatch {
			w.batch = w.build(p, w.batch, true)
		} else {
			w.waitNext = true
		}
	}
}

// blocksNeeded is _calculate_blocks_needed.
func (w *opalWorker) blocksNeeded(r *opalReq, add int64) int64 {
	bs := w.c.BlockSize
	cur := r.processed + r.generated
	return ceilDiv(cur+add, bs) - ceilDiv(cur, bs)
}

// chunk is schedule_prefill_chunk.
func (w *opalWorker) chunk(r *opalReq) int64 {
	size := w.c.MaxNumBatchedTokens
	if !w.c.ChunkedPrefill {
		size = w.c.MaxModelLen
	}
	return min(max(0, r.in-r.processed), size)
}

func (w *opalWorker) budget() int64 {
	if !w.c.ChunkedPrefill {
		return w.c.MaxModelLen * int64(w.c.MaxNumSeqs)
	}
	return w.c.MaxNumBatchedTokens
}

// build is _build_batch: rebuild b (nil: a new batch), after Opal's 1 ms
// wait when wait is set, resuming its decodes and prefills, preempting what no longer
// fits, then admitting READY waiting requests, looking the new ones up in
// the tiers.
func (w *opalWorker) build(p *simProc, b *opalBatch, wait bool) *opalBatch {
	if wait {
		p.sleep(0.001)
	}
	if b == nil {
		b = &opalBatch{}
	}
	b.total = 0
	budget := w.budget()
	var preempt []*opalReq
	// Phase 1: decodes, one token each.
	for _, r := range b.decode {
		need := w.blocksNeeded(r, 1)
		if b.total+1 <= budget && need <= w.freeBlocks {
			r.allocated += need
			w.freeBlocks -= need
			b.total++
			r.batchTok = 1
			continue
		}
		if !w.c.Quirks.BudgetPreemption && need <= w.freeBlocks {
			r.batchTok = 0 // no budget left: it sits this step out
			continue
		}
		preempt = append(preempt, r)
	}
	// Phase 2: continuing prefills.
	for _, r := range b.prefill {
		n := min(w.chunk(r), budget-b.total)
		if n <= 0 {
			if !w.c.Quirks.BudgetPreemption {
				r.batchTok = 0
				continue
			}
			preempt = append(preempt, r)
			continue
		}
		need := w.blocksNeeded(r, n)
		if need <= w.freeBlocks {
			r.allocated += need
			w.freeBlocks -= need
			b.total += n
			r.batchTok = n
			continue
		}
		preempt = append(preempt, r)
	}
	// Phase 3: preempt, progress lost, to the front of the queue.
	for _, r := range preempt {
		b.prefill = remove(b.prefill, r)
		b.decode = remove(b.decode, r)
		w.freeBlocks += r.allocated
		r.allocated = 0
		w.running = remove(w.running, r)
		r.phase = opalWaiting
		r.processed, r.generated = 0, 0
		r.storedChunks = 0
		r.preemptions++
		w.preemptions++
		w.waiting = slices.Insert(w.waiting, 0, r)
	}
	// Phase 4: admit READY waiting requests, FIFO.
	initial := b.seqs()
	scanned := 0
	for _, r := range slices.Clone(w.waiting) {
		scanned++
		if initial > 0 && scanned > w.c.LookaheadReqs {
			break
		}
		if r.phase == opalWaiting {
			r.startProc = w.s.env.now
			if !r.lookupDone {
				r.prefixTokens = w.lookup(p, r)
				r.lookupDone = true
			}
			if prefix := r.prefixTokens; prefix > 0 {
				kvcBlocks := ceilDiv(prefix, w.c.BlockSize)
				if !w.canIssueFetch() || kvcBlocks > w.freeBlocks {
					continue
				}
				w.freeBlocks -= kvcBlocks
				r.allocated = kvcBlocks
				w.kvcInFlight += kvcBlocks
				r.phase = opalFetchKVC
				w.s.env.spawn(func(q *simProc) { w.retrieve(q, r, prefix) })
			} else {
				r.phase = opalReady
				r.ready = w.s.env.now
			}
			if r.phase != opalReady {
				continue
			}
		}
		if r.phase != opalReady {
			continue
		}
		if b.seqs() >= w.c.MaxNumSeqs {
			break
		}
		if r.processed >= r.in { // the whole prompt came from the tiers
			need := w.blocksNeeded(r, 0)
			if !w.canAdd(b, 0, need) {
				break
			}
			r.allocated += need
			w.freeBlocks -= need
			b.prefill = append(b.prefill, r)
			r.batchTok = 0
			w.admit(r)
			continue
		}
		n := min(w.chunk(r), budget-b.total)
		if n <= 0 {
			break
		}
		need := w.blocksNeeded(r, n)
		if !w.canAdd(b, n, need) {
			break
		}
		r.allocated += need
		w.freeBlocks -= need
		b.prefill = append(b.prefill, r)
		b.total += n
		r.batchTok = n
		w.admit(r)
	}
	return b
}

func (w *opalWorker) admit(r *opalReq) {
	w.waiting = remove(w.waiting, r)
	w.running = append(w.running, r)
	r.gpuStart = w.s.env.now
}

// canAdd is _can_add_to_batch.
func (w *opalWorker) canAdd(b *opalBatch, n, need int64) bool {
	return b.seqs() < w.c.MaxNumSeqs && b.total+n <= w.budget() && need <= w.freeBlocks
}

// canIssueFetch is _can_issue_kvc_fetch: fewer than max_kvc_ready_requests
// waiting requests hold fetched or in-flight KV.
func (w *opalWorker) canIssueFetch() bool {
	n := 0
	for _, r := range w.waiting {
		if r.phase == opalFetchKVC || r.phase == opalReady && r.allocated > 0 {
			n++
		}
	}
	return n < w.c.MaxKVCReadyRequests
}

// batchTime is _calculate_batch_time: the longest prefill chunk against
// the decode batch, each request's chunk as the batch recorded it.
func (w *opalWorker) batchTime(b *opalBatch) float64 {
	c := w.c
	var pre, sum float64
	for _, r := range b.prefill {
		n := r.batchTok
		if !c.Quirks.StaleChunk {
			n = min(n, max(0, r.in-r.processed))
		}
		t := c.prefillSec(r.processed+n, r.processed)
		pre = max(pre, t)
		sum += t
	}
	ctx := make([]int64, 0, len(b.decode))
	for _, r := range b.decode {
		if r.batchTok > 0 {
			ctx = append(ctx, r.in+r.generated)
		}
	}
	if c.Quirks.MaxPricing {
		return max(pre, c.decodeSec(ctx, true))
	}
	if len(ctx) == 0 {
		return sum
	}
	return sum + c.decodeSec(ctx, true)
}

// update is _update_request_states_and_stats.
func (w *opalWorker) update(b *opalBatch) {
	now := w.s.env.now
	var toDecode []*opalReq
	for _, r := range b.prefill {
		if r.batchTok == 0 && r.processed < r.in {
			continue // sat this step out (BudgetPreemption off)
		}
		r.stamp(now)
		if r.phase == opalReady {
			r.phase = opalPrefill
		}
		r.processed += r.batchTok
		if !w.c.Quirks.StaleChunk {
			r.processed = min(r.processed, r.in)
		}
		if !w.c.Quirks.StoreAtCompletion {
			w.writeThrough(r)
		}
		if r.processed >= r.in {
			r.prefillDone = now
			r.decodeStamps = r.decodeStamps[:0]
			r.phase = opalDecode
			toDecode = append(toDecode, r)
		}
	}
	for _, r := range b.decode {
		if r.batchTok == 0 {
			continue
		}
		r.stamp(now)
		r.decodeStamps = append(r.decodeStamps, now)
		r.generated += r.batchTok
		if r.generated >= r.out {
			r.phase = opalCompleted
		}
	}
	for _, r := range toDecode {
		b.prefill = remove(b.prefill, r)
		b.decode = append(b.decode, r)
		r.batchTok = 1
	}
}

func (r *opalReq) stamp(now float64) {
	if !r.hasStamp {
		r.firstStamp, r.hasStamp = now, true
	}
	r.lastDecodeSeen = now
}

// moveCompleted is _move_completed_requests; it returns how many
// completed.
func (w *opalWorker) moveCompleted() int {
	n := 0
	kept := w.running[:0]
	for _, r := range w.running {
		if r.phase != opalCompleted {
			kept = append(kept, r)
			continue
		}
		n++
		w.completed = append(w.completed, r)
		w.batch.decode = remove(w.batch.decode, r)
		w.batch.total -= r.batchTok
		r.decodeDone = w.s.env.now
	}
	clear(w.running[len(kept):])
	w.running = kept
	return n
}

// handleCompleted is _handle_completed_requests: after 1 ms, each
// completed request's prompt is stored in the tiers (the loop waits for
// it), its blocks freed, and it goes back to the router.
func (w *opalWorker) handleCompleted(p *simProc) {
	done := w.completed
	w.completed = nil
	p.sleep(0.001)
	for _, r := range done {
		if w.c.Quirks.StoreAtCompletion {
			w.store(p, r.keys, r.chunkTok)
		}
		w.freeBlocks += r.allocated
		r.allocated = 0
		w.s.collect(r, r.lastDecodeSeen-r.firstStamp)
	}
}

// retrieve is _async_kvc_retrieve: fetch the prefix of prefix tokens
// from the tiers, then the request is READY with it computed.
func (w *opalWorker) retrieve(p *simProc, r *opalReq, prefix int64) {
	got := w.fetch(p, r, prefix)
	r.processed = got
	if blocks := ceilDiv(got, w.c.BlockSize); blocks != r.allocated {
		// Opal asserts this; without eviction it always holds.
		w.freeBlocks -= blocks - r.allocated
		w.kvcInFlight += blocks - r.allocated
		r.allocated = blocks
		if w.freeBlocks < 0 {
			w.s.fail(fmt.Errorf("opal compat: worker %d: request %d fetched more KV than it reserved", w.id, r.idx))
		}
	}
	w.kvcInFlight -= r.allocated
	r.hitTokens = got
	r.phase = opalReady
	r.ready = w.s.env.now
}

// remove returns l without r, keeping the order.
func remove(l []*opalReq, r *opalReq) []*opalReq {
	if i := slices.Index(l, r); i >= 0 {
		return slices.Delete(l, i, i+1)
	}
	return l
}
