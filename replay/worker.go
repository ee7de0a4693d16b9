package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// A worker is one serving instance with a vLLM v1 scheduler.
//
// Note: the step follows vLLM v1's Scheduler.schedule. Running requests
// go first, in order, each taking min(its remaining tokens, the budget
// left), which covers unfinished chunked prefills and one-token decodes
// alike, until the token budget is spent. A spent budget leaves the rest
// of the running requests unscheduled for this step; it never preempts.
// Preemption happens only when KV blocks cannot be allocated: the last
// running request loses its blocks and goes to the front of the waiting
// queue, to be recomputed; if the request being scheduled is itself the
// last, it is the one preempted. Then, only if nothing was preempted,
// waiting requests are admitted FCFS while the budget, max_num_seqs and
// the free blocks allow; a request first takes its prefix-cache hit (full
// blocks, at most numTokens−1 tokens) and then a chunk of the rest. The
// first waiting request that does not fit stops admission (no
// overtaking). Hashes of full blocks are committed when the block is
// scheduled, as vLLM's allocate_slots does, so a request admitted later in
// the same step can hit them.
type worker struct {
	id     int
	name   string
	kv     *kvcache.Cache
	bs     int64   // tokens per KV block
	budget int64   // max_num_batched_tokens
	maxSeq int     // max_num_seqs
	prefix bool    // prefix caching on
	stream int64   // stream interval (tokens per chunk after the first)
	sg     *sglang // SGLang's scheduler instead of vLLM's (sglang.go); nil: vLLM

	running []*reqState
	waiting deque
	busy    bool // a step is in flight
	queued  bool // an evSchedule for this worker is in the queue

	// The step in flight, reused from step to step.
	sched     []scheduled
	batch     model.Batch
	stepStart trace.Time
	preempted int // preemptions while building the step

	hits []int32 // scratch: prefix-hit blocks
	// scratch of steadySteps: step durations, and in seconds
	durs []time.Duration
	secs []float64

	// Open loop with a load-blind router: the arrival times of the
	// requests routed here, in order, and how many have arrived.
	arrivals []trace.Time
	arrived  int
}

// A scheduled entry is one request's share of a step.
type scheduled struct {
	r *reqState
	n int64 // tokens computed for it in this step
}

func newWorker(id int, name string, s SchedulerConfig, blocks int64) *worker {
	w := &worker{
		id:     id,
		name:   name,
		bs:     s.BlockSize,
		budget: s.MaxNumBatchedTokens,
		maxSeq: s.MaxNumSeqs,
		prefix: *s.EnablePrefixCaching,
		stream: s.StreamInterval,
	}
	if s.Engine == EngineSGLang {
		// SGLang's KV is its radix cache; the block cache stays empty.
		w.sg = newSGLang(s, blocks*s.BlockSize)
		w.kv = kvcache.New(0)
	} else {
		w.kv = kvcache.New(blocks)
	}
	return w
}

func (w *worker) hasWork() bool { return len(w.running) > 0 || w.waiting.Len() > 0 }

func (w *worker) hasher(r *reqState) kvcache.BlockHasher {
	h := kvcache.BlockHasher{
		PromptTokens: r.prompt,
		EngineBlock:  w.bs,
		Unique:       uint64(r.idx) + 1,
		SharedIDs:    r.shared,
	}
	if r.in == nil {
		return h // a shaper's request: no hash ids
	}
	if bs, ok := r.in.BlockSize.Get(); ok && len(r.in.HashIDs) > 0 {
		h.HashIDs, h.TraceBlock = r.in.HashIDs, bs
	}
	return h
}

// build builds the next step's batch at time now into w.sched and w.batch.
func (w *worker) build(now trace.Time) {
	w.sched = w.sched[:0]
	w.batch.Prefill = w.batch.Prefill[:0]
	w.batch.Decode = w.batch.Decode[:0]
	w.preempted = 0
	w.stepStart = now
	if w.sg != nil {
		w.sg.build(w, now)
		return
	}
	budget := w.budget

	// Running requests, in order.
	for i := 0; i < len(w.running) && budget > 0; {
		r := w.running[i]
		n := min(r.numTokens()-r.computed, budget)
		ok := true
		for !w.grow(r, n) {
			victim := w.running[len(w.running)-1]
			w.running = w.running[:len(w.running)-1]
			w.preempt(victim)
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		w.add(r, n, now)
		budget -= n
		i++
	}

	// Waiting requests, FCFS, unless this step preempted.
	for w.preempted == 0 && w.waiting.Len() > 0 && budget > 0 && len(w.running) < w.maxSeq {
		r := w.waiting.front()
		hits := w.hits[:0]
		if w.prefix {
			hits = w.match(r, hits)
		}
		w.hits = hits
		done := int64(len(hits)) * w.bs
		n := min(r.numTokens()-done, budget)
		need := ceilDiv(done+n, w.bs) - int64(len(hits))
		for _, b := range hits {
			if w.kv.Ref(b) == 0 {
				need++ // a free cached block leaves the free queue too
			}
		}
		if need > w.kv.NumFree() {
			break
		}
		w.waiting.popFront()
		for _, b := range hits {
			w.kv.Acquire(b)
		}
		r.blocks = append(r.blocks, hits...)
		r.computed = done
		if !r.scheduled {
			r.cached = done
		}
		if !w.grow(r, n) {
			panic("replay: allocation failed after the free-block check")
		}
		w.running = append(w.running, r)
		w.add(r, n, now)
		budget -= n
	}
}

// match returns in hits the blocks of r's longest cached prefix: full
// blocks only, at most numTokens−1 tokens, so at least one token is
// computed to produce the next output. It leaves r's hash chain at the
// last hit.
func (w *worker) match(r *reqState, hits []int32) []int32 {
	h := w.hasher(r)
	prev := kvcache.Root
	maxBlocks := (r.numTokens() - 1) / w.bs
	for k := range maxBlocks {
		x, private := h.Hash(prev, k)
		var b int32
		var ok bool
		if private && k < int64(len(r.ghost)) && w.kv.Holds(r.ghost[k], x) {
			// Only r itself can have computed this block. Before
			// its first preemption it committed it privately, and
			// that is the earliest copy, the one an index would
			// return.
			b, ok = r.ghost[k], true
		} else if !private || r.preemptions > 0 {
			b, ok = w.kv.Lookup(x)
		}
		if !ok {
			break
		}
		hits = append(hits, b)
		prev = x
	}
	r.hashed, r.lastHash = int64(len(hits)), prev
	return hits
}

// grow allocates the blocks r needs to compute n more tokens and commits
// the hashes of the blocks those tokens fill. It reports false, changing
// nothing, when there are not enough free blocks.
func (w *worker) grow(r *reqState, n int64) bool {
	total := r.computed + n
	need := ceilDiv(total, w.bs) - int64(len(r.blocks))
	if need > 0 {
		var ok bool
		if r.blocks, ok = w.kv.Allocate(r.blocks, need); !ok {
			return false
		}
	}
	if w.prefix {
		full := total / w.bs
		if r.hashed < full {
			h := w.hasher(r)
			for k := r.hashed; k < full; k++ {
				if r.preemptions == 0 && h.Private(k) && !eagerPrivate {
					// Its hash is recorded only if r is
					// preempted (preempt), the one case it is
					// asked for; and a private block's hash
					// does not depend on the chain.
					w.kv.MarkPrivate(r.blocks[k])
					continue
				}
				var private bool
				r.lastHash, private = h.Hash(r.lastHash, k)
				if private && r.preemptions == 0 {
					w.kv.CommitPrivate(r.blocks[k], r.lastHash)
				} else {
					w.kv.Commit(r.blocks[k], r.lastHash)
				}
			}
			r.hashed = full
		}
	}
	return true
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
	w.sched = append(w.sched, scheduled{r, n})
}

// preempt frees r's blocks and puts it at the front of the waiting queue
// to be recomputed; its generated tokens stay generated.
func (w *worker) preempt(r *reqState) {
	if r.preemptions == 0 && w.prefix {
		// Record the hashes of its private blocks, so that it can hit
		// them again (match) while they stay cached.
		h := w.hasher(r)
		for k := range r.hashed {
			if h.Private(k) {
				x, _ := h.Hash(kvcache.Root, k)
				w.kv.CommitPrivate(r.blocks[k], x)
			}
		}
	}
	w.kv.Release(r.blocks)
	if r.preemptions == 0 {
		// Keep the table of privately committed blocks; blocks
		// computed after this are indexed like shared ones.
		r.blocks, r.ghost = r.ghost[:0], r.blocks
	} else {
		r.blocks = r.blocks[:0]
	}
	r.computed, r.hashed, r.lastHash = 0, 0, kvcache.Root
	r.preemptions++
	w.preempted++
	w.waiting.pushFront(r)
}

// steady reports whether the step just built is a steady decode step:
// every running request decodes one token, nothing was preempted, and no
// waiting request can be admitted (there is none, or max_num_seqs are
// running). The next step of a steady worker, if no request completes in
// between, is the same batch one token further, which decodeStep builds
// without the general path.
func (w *worker) steady() bool {
	if w.sg != nil {
		return w.sg.steady(w)
	}
	return len(w.batch.Prefill) == 0 && len(w.sched) == len(w.running) && w.preempted == 0 &&
		(w.waiting.Len() == 0 || len(w.running) >= w.maxSeq)
}

// decodeStep builds the next step of a steady worker, as build would. When
// a request cannot get the block it needs, build must preempt: it reports
// false, and the blocks it gave the requests before that one are the ones
// build would give them first, so build, called next, finds them there and
// continues identically.
func (w *worker) decodeStep(now trace.Time) bool {
	for _, r := range w.running {
		// grow has work only when the token opens a block or fills
		// one (whose hash it commits); multiplications spare it the
		// divisions on every other token.
		total := r.computed + 1
		if total <= int64(len(r.blocks))*w.bs && (!w.prefix || total < (r.hashed+1)*w.bs) {
			continue
		}
		if !w.grow(r, 1) {
			return false
		}
	}
	w.preempted = 0
	w.stepStart = now
	for i, r := range w.running {
		w.batch.Decode[i] = r.computed
		r.computed++
	}
	return true
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
	if w.sg != nil {
		w.sg.flush()
	}
	kept := w.running[:0]
	for _, r := range w.running {
		if r.out == r.maxOut || r.aborted {
			if w.sg != nil {
				w.sg.leave(r, true)
			}
			w.kv.Release(r.blocks)
			r.blocks = r.blocks[:0]
			done = append(done, r)
			continue
		}
		kept = append(kept, r)
	}
	clear(w.running[len(kept):])
	w.running = kept
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
			r.firstTok, r.lastChunk = now, now
			if r.maxOut > 1 {
				if n := numChunks(r.maxOut, w.stream) - 1; int64(cap(r.itl)) >= n {
					r.itl = r.itl[:0] // a recycled state's (Options.Transient)
				} else {
					r.itl = make([]float64, 0, n)
				}
			}
		case w.stream == 1 || (r.out-1)%w.stream == 0 || r.out == r.maxOut:
			r.itl = append(r.itl, now.Sub(r.lastChunk).Seconds())
			r.lastChunk = now
		}
		r.lastTok = now
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
