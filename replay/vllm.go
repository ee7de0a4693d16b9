package replay

import (
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// EngineVLLM names vLLM v1's scheduler (SchedulerConfig.Engine), the
// default.
const EngineVLLM = "vllm"

// vLLM's defaults of its engine arguments (vllm/config.py).
const (
	vllmMaxNumBatchedTokens = 8192
	vllmMaxNumSeqs          = 256
	vllmBlockSize           = 16
)

// vllmDefaults fills vLLM's own settings. They are the worker settings
// every configuration carries (DefaultConfig), so withDefaults sets them
// for every engine already and there is nothing left here; the entry
// stays so that the table says where an engine's defaults go.
func vllmDefaults(*SchedulerConfig) {}

// A vllm is one worker's vLLM v1 scheduler over a block KV cache.
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
type vllm struct {
	kv     *kvcache.Cache
	bs     int64 // tokens per KV block
	budget int64 // max_num_batched_tokens
	maxSeq int   // max_num_seqs
	prefix bool  // prefix caching on
	// eager records every private block's hash when it fills
	// (testSwitches.eagerPrivate).
	eager bool
	// lazy, when set, indexes shared blocks only once a sharer comes
	// to the worker (prefixlazy.go).
	lazy *lazyIndex

	// stuck: the last build left the waiting front for want of free
	// blocks (steady).
	stuck bool

	peek []int32 // scratch: admitRemote's hits
	// due holds, during steadySteps, the step at which each running
	// request next needs grow (steadyStart, steadyAlloc).
	due  []int64
	last lastMatch
	// noResume looks every prefix up from its start
	// (testSwitches.noMatchResume); resumed counts the blocks match
	// did not look up again (for tests).
	noResume bool
	resumed  int64
	// checkResume, when set, is given at every match that could
	// resume whether the cache dropped a hash since the last, how many of the hits found last it keeps (those the cache
	// did not evict since), and what resuming, resuming with every hit
	// found last, and starting over find (testSwitches.checkMatchResume).
	checkResume func(dropped bool, kept int, resumed, all, full []int32)
	// checkBlocked, when set, is given at every decision on the
	// waiting front that match precedes what blockedFront said and
	// whether the front did not fit; the front is then looked up
	// whatever blockedFront says (testSwitches.checkBlockedFront).
	checkBlocked func(said, blocked bool)
	// loadRemote, on a decode worker of a disaggregated replay, takes a
	// request waiting for its KV's blocks, which admitRemote found room
	// for, and starts its load (engine.loadRemote).
	loadRemote func(w *worker, r *reqState, hits []int32, fresh int64, now trace.Time)
}

// A lastMatch is what match found for the request it looked up last:
// the waiting queue's front, which is looked up again at every step that
// cannot admit it.
type lastMatch struct {
	idx         int32 // the request's place in the input, plus 1 (0: none)
	preemptions int64
	maxBlocks   int64
	drops       uint64 // the cache's Drops then
	hits        []int32
	// blocked says the request did not fit, asking for n tokens, when
	// the cache's Releases, Renumbers and Tail were releases,
	// renumbers and tail, and the lowest free-queue position of a free
	// hit first (block, hitsKept, blockedFront).
	blocked             bool
	n                   int64
	releases, renumbers uint64
	first, tail         int64
}

// hitsKept reports whether m's hits, those of a request that did not fit,
// are all still cached: the free queue's head has not reached the first
// of them that was free, nor where blocks released since were queued.
func (m *lastMatch) hitsKept(kv *kvcache.Cache) bool {
	return m.blocked && kv.Renumbers() == m.renumbers && kv.Head() < min(m.first, m.tail)
}

func newVLLM(s SchedulerConfig, blocks int64, t *testSwitches) scheduler {
	return newVLLMOn(s, kvcache.New(blocks), t)
}

// newVLLMOn returns a vLLM scheduler over kv, a new (or Reset) cache.
func newVLLMOn(s SchedulerConfig, kv *kvcache.Cache, t *testSwitches) *vllm {
	return &vllm{
		kv:     kv,
		bs:     s.BlockSize,
		budget: s.MaxNumBatchedTokens,
		maxSeq: s.MaxNumSeqs,
		prefix: *s.EnablePrefixCaching,
		eager:  t.eagerPrivate,

		noResume:     t.noMatchResume,
		checkResume:  t.checkMatchResume,
		checkBlocked: t.checkBlockedFront,
	}
}

// blockHasher returns the hasher of r's blocks of bs tokens.
func blockHasher(r *reqState, bs int64) kvcache.BlockHasher {
	h := kvcache.BlockHasher{
		PromptTokens: r.prompt,
		EngineBlock:  bs,
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

func (v *vllm) build(w *worker, now trace.Time) {
	budget := v.budget
	v.stuck = false

	// Running requests, in order.
	for i := 0; i < len(w.running) && budget > 0; {
		r := w.running[i]
		n := min(r.numTokens()-r.computed, budget)
		if total := r.computed + n; total <= int64(len(r.blocks))*v.bs && (!v.prefix || total < (r.hashed+1)*v.bs) {
			// grow has nothing to do (decodeStep's test): no block
			// to open, no hash to commit. Most of a step's running
			// requests decode: on the autoscaled Mooncake replay,
			// whose batches are larger, the calls cost 10 M
			// instructions.
			w.add(r, n, now)
			budget -= n
			i++
			continue
		}
		ok := true
		for !v.grow(r, n) {
			victim := w.running[len(w.running)-1]
			w.running = w.running[:len(w.running)-1]
			v.preempt(w, victim)
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

	// Waiting requests, FCFS, unless this step preempted. A front that
	// did not fit is remembered (block) and not looked up again while it
	// still cannot (blockedFront), with the prefix cache on and no KV
	// tiers to load from.
	remember := v.prefix && w.off == nil
	for w.preempted == 0 && w.waiting.Len() > 0 && budget > 0 && len(w.running) < v.maxSeq {
		r := w.waiting.front()
		if r.holding {
			// Its load completed: it holds the blocks of its
			// computed tokens (offload.go).
			n := min(r.numTokens()-r.computed, budget)
			if ceilDiv(r.computed+n, v.bs)-int64(len(r.blocks)) > v.kv.NumFree() {
				break
			}
			w.waiting.popFront()
			r.holding = false
			if !r.scheduled {
				r.cached = r.computed
			}
			if !v.grow(r, n) {
				panic("replay: allocation failed after the free-block check")
			}
			w.running = append(w.running, r)
			w.add(r, n, now)
			budget -= n
			continue
		}
		if r.pdWait {
			// Its KV waits on its prefill worker for blocks here.
			if !v.admitRemote(w, r, now) {
				break
			}
			continue
		}
		still := remember && v.blockedFront(r, budget)
		if still && v.checkBlocked == nil {
			v.stuck = true
			break
		}
		var hits []int32
		if v.prefix {
			hits = v.match(r)
		}
		done := int64(len(hits)) * v.bs
		if w.off != nil {
			switch v.admitLoad(w, r, hits, done, now) {
			case loadNoRoom:
				goto unskip
			case loadDelayed:
				w.off.skipped = append(w.off.skipped, w.waiting.popFront())
				continue
			case loadStarted:
				continue
			}
		}
		n := min(r.numTokens()-done, budget)
		need := ceilDiv(done+n, v.bs) - int64(len(hits))
		// A free cached block leaves the free queue too. They are
		// counted only when it matters: when r fits even if every
		// hit is free, or cannot fit with none, the count cannot
		// change the answer, and else a run of hits at a time
		// (kvcache.Cache.FreeAmong; the count was 50 million
		// instructions of the autoscaled Mooncake trace, a fifth of
		// its cost beyond round-robin, block by block).
		if free := v.kv.NumFree(); need+int64(len(hits)) > free {
			if f, _ := v.kv.FreeAmong(hits, free-need); need+f > free {
				if remember {
					v.block(n)
				}
				if v.checkBlocked != nil {
					v.checkBlocked(still, true)
				}
				v.stuck = w.off == nil
				break
			}
		}
		if v.checkBlocked != nil {
			v.checkBlocked(still, false)
		}
		w.waiting.popFront()
		v.kv.AcquireAll(hits)
		v.reserve(r)
		r.blocks = append(r.blocks, hits...)
		r.computed = done
		if !r.scheduled {
			r.cached = done
		}
		if !v.grow(r, n) {
			panic("replay: allocation failed after the free-block check")
		}
		w.running = append(w.running, r)
		w.add(r, n, now)
		budget -= n
	}
unskip:
	if w.off != nil {
		w.off.unskip(w)
	}
}

// match returns the blocks of r's longest cached prefix: full blocks
// only, at most numTokens−1 tokens, so at least one token is computed to
// produce the next output. It marks the hits' hashes as committed
// (r.hashed). The slice is v.last's, until the next match.
//
// Note: a preempted request waiting for room walks its whole sequence at
// every step; that was most of what autoscaling's smaller fleets cost
// beyond round-robin (5.6 million blocks looked up for 16,328 matches on
// Mooncake). The hits it found stay the answer up to the first of them
// the cache evicted since (kvcache.Cache.Kept: the cache only gained
// hashes otherwise, and lookups return the earliest copy), so match
// resumes there. Resuming only while the cache dropped no hash at all
// walked every match after a drop from the start (240 of 1,422 repeated
// matches on the first 4,000 Mooncake requests autoscaled,
// TestMatchResumeSameResults); keeping hits across drops, with bulk
// lookups, took the autoscaled trace's matches from 160 to 79 million
// instructions.
//
// Note: the hits are found in v.last's own slice, kept hits and all,
// where they were found in a scratch slice and v.last given a copy (and
// a resumed match a copy of v.last's first), each hit's id written once
// more than now. Cache-aware routers make four times round-robin's
// hits: on BenchmarkReplayMooncakeRouters/llm_d the copies were 1.0
// million instructions and 111,000 of memmove's 567,000 last-level cache
// misses (callgrind's cache simulation, 1 MiB of last level).
func (v *vllm) match(r *reqState) []int32 {
	c := r.hashChain(v.bs)
	maxBlocks := (r.numTokens() - 1) / v.bs
	m := &v.last
	same := m.idx == r.idx+1 && m.preemptions == r.preemptions && m.maxBlocks == maxBlocks
	if same && v.checkResume != nil {
		kept := v.kv.Kept(m.hits, m.drops)
		if m.hitsKept(v.kv) && kept < len(m.hits) {
			panic("replay: hitsKept, but the cache evicted a hit since")
		}
		v.checkResume(m.drops != v.kv.Drops(), kept, v.walk(r, c, slices.Clone(m.hits[:kept]), maxBlocks),
			v.walk(r, c, slices.Clone(m.hits), maxBlocks), v.walk(r, c, nil, maxBlocks))
	}
	hits := m.hits[:0]
	if same && !v.noResume {
		// Kept scans the hits for one evicted since; when r did not
		// fit, the free queue's positions tell at once that none was.
		kept := len(m.hits)
		if !m.hitsKept(v.kv) {
			kept = v.kv.Kept(m.hits, m.drops)
		}
		hits = m.hits[:kept]
		v.resumed += int64(kept)
	}
	hits = v.walk(r, c, hits, maxBlocks)
	r.hashed = int64(len(hits))
	*m = lastMatch{idx: r.idx + 1, preemptions: r.preemptions, maxBlocks: maxBlocks, drops: v.kv.Drops(), hits: hits}
	return hits
}

// admitRemote allocates the blocks of waiting request r, whose prompt a
// prefill worker computed, and starts its KV load, as vLLM's scheduler
// does for a request its KV connector loads (allocate_slots for the
// external tokens, the request then WAITING_FOR_REMOTE_KVS, skipped until
// the load ends): blocks for the whole prompt, those this
// worker's prefix cache holds taken as hits (the connector loads only the
// rest: get_num_new_matched_tokens). It reports false, leaving r at the
// front, when they do not fit: FCFS, nothing behind it is admitted.
func (v *vllm) admitRemote(w *worker, r *reqState, now trace.Time) bool {
	var hits []int32
	if v.prefix {
		// At most the prompt but its last token, as any lookup.
		v.peek = v.kv.LookupChain(v.peek[:0], r.hashChain(v.bs), 0, (r.prompt-1)/v.bs)
		hits = v.peek
	}
	// The whole prompt's slots: the load writes every prompt token's
	// KV (the last one's is computed again, in its slot).
	fresh := ceilDiv(r.prompt, v.bs) - int64(len(hits))
	// A free cached block leaves the free queue too.
	free := v.kv.NumFree()
	if n, _ := v.kv.FreeAmong(hits, free-fresh); fresh+n > free {
		return false
	}
	w.waiting.popFront()
	w.remote--
	v.loadRemote(w, r, hits, fresh, now)
	return true
}

// block records that the request match looked up last does not fit,
// asking for n tokens.
func (v *vllm) block(n int64) {
	m := &v.last
	// The lowest position of every free hit, not only of those build's
	// FreeAmong counted before it stopped: while none is evicted, match
	// finds the same hits (blockedFront), and sets r.hashed as it did.
	_, m.first = v.kv.FreeAmong(m.hits, math.MaxInt64)
	m.blocked, m.n = true, n
	m.releases, m.renumbers, m.tail = v.kv.Releases(), v.kv.Renumbers(), v.kv.Tail()
}

// blockedFront reports whether r, the waiting queue's front, which match
// looked up last and found not to fit, still does not fit with budget
// tokens left in the step, without looking it up again: when no block was
// released since, the free queue's head has not reached its free hits,
// it asks for at least as many tokens, and the block after its hits is
// still not cached.
//
// Note: then the hits are the same blocks (a free one leaves the cache
// only by eviction, at the head; a held one only after a release), so
// r needs at least the blocks it needed, and every block taken out of
// the free queue since took a free block from the count of those it
// could have, or one of its free hits out of both: it fits no better.
// A fleet whose caches are full, as the autoscaled one, asked this of
// a blocked front at every step, with Kept's scan of its hits and
// FreeAmong's of their runs: with blockedFront (and hitsKept) the
// autoscaled Mooncake replay took 764.7 million instructions where it
// took 790.3 (BenchmarkReplayMooncakeRouters/autoscale, callgrind).
func (v *vllm) blockedFront(r *reqState, budget int64) bool {
	m := &v.last
	if m.idx != r.idx+1 || m.preemptions != r.preemptions || !m.hitsKept(v.kv) || v.kv.Releases() != m.releases {
		return false
	}
	maxBlocks := (r.numTokens() - 1) / v.bs
	k := int64(len(m.hits))
	if m.maxBlocks != maxBlocks || min(r.numTokens()-k*v.bs, budget) < m.n {
		return false
	}
	// The next block's hash not cached since: the hits end there.
	// (walk appends to m.hits's spare room at most; m keeps its length.)
	return k >= maxBlocks || len(v.walk(r, r.hashChain(v.bs), m.hits, k+1)) == int(k)
}

// walk appends to hits, r's blocks found so far, the blocks that follow
// them in the cache, up to the first it misses or maxBlocks.
func (v *vllm) walk(r *reqState, c *kvcache.Chain, hits []int32, maxBlocks int64) []int32 {
	k := int64(len(hits))
	// Shared blocks are hashed and looked up together, a group of
	// 32 at a time (kvcache.Cache.LookupChain), up to the first
	// miss. The hashes are identities, computed the same however far
	// ahead, and the lookups stop at the first miss either way: what
	// walk finds is what looking up each block's hash finds.
	if shared := min(maxBlocks, c.Shared()); k < shared {
		n := len(hits)
		if hits = v.kv.LookupChain(hits, c, k, shared); int64(len(hits)-n) < shared-k {
			return hits
		}
		k = shared
	}
	for ; k < maxBlocks; k++ {
		x, private := c.Hash(k)
		var b int32
		var ok bool
		if private && k < int64(len(r.ghost)) && v.kv.Holds(r.ghost[k], x) {
			// Only r itself can have computed this block. Before
			// its first preemption it committed it privately, and
			// that is the earliest copy, the one an index would
			// return.
			b, ok = r.ghost[k], true
		} else if !private || r.preemptions > 0 {
			b, ok = v.kv.Lookup(x)
		}
		if !ok {
			break
		}
		hits = append(hits, b)
	}
	return hits
}

// grow allocates the blocks r needs to compute n more tokens and commits
// the hashes of the blocks those tokens fill. It reports false, changing
// nothing, when there are not enough free blocks.
func (v *vllm) grow(r *reqState, n int64) bool {
	total := r.computed + n
	need := ceilDiv(total, v.bs) - int64(len(r.blocks))
	if need > 0 && !v.allocate(r, need) {
		return false
	}
	if v.prefix {
		full := total / v.bs
		if r.hashed < full {
			c := r.hashChain(v.bs)
			k := r.hashed
			switch {
			case !v.eager:
				// A private block is Anonymous (allocate):
				// Release learns from r.hashed that it is
				// cached, and its hash is recorded only if r is
				// preempted (preempt), the one case it is asked
				// for. Past its prompt's blocks (decoding) none
				// is indexed: indexed is at most prompt/bs.
				//
				// Note: so too once r has been preempted (its
				// shared blocks all indexed as they fill, its
				// private ones when it is preempted again),
				// where every block was indexed as it filled, a
				// decode step's at a time, each from wherever
				// the free queue's head was: blocks of one group
				// that lay on no line of ids, an index entry
				// each, all of one key and so in one probe run,
				// which every insertion of the key walked to its
				// end and every lookup of a member along. On
				// BenchmarkReplayMooncakeRouters/autoscale,
				// whose smaller fleets preempt, insertions
				// walked 6.0 slots on average (round-robin 0.4)
				// and lookups 5.0; named at a preemption, the
				// blocks take consecutive ids (Name), a group
				// an entry, and the walks are 1.1 and 1.9 slots
				// (the project's code 618.3 → 577.0 million
				// instructions, callgrind; CPU time 0.94×,
				// `scripts/enginework --time 8 --iterations 40
				// --against 66c5229 autoscale`). The outputs are
				// the same (TestPrivateBlocksSameResults: as with
				// every block indexed as it fills).
				if k*v.bs < r.prompt {
					if n := min(full, v.indexed(r)); k < n {
						v.kv.CommitAll(r.blocks[k:n], c.Hashes(k, n))
					}
				}
			case r.preemptions > 0:
				// Every block indexed, private ones too (eager):
				// a run of hashes a group at a time (CommitAll).
				v.kv.CommitAll(r.blocks[k:full], c.Hashes(k, full))
			default:
				for ; k < full; k++ {
					x, private := c.Hash(k)
					if private {
						v.kv.CommitPrivate(r.blocks[k], x)
					} else {
						v.kv.Commit(r.blocks[k], x)
					}
				}
			}
			r.hashed = full
		}
	}
	return true
}

// allocate appends n fresh blocks to r's block table, reporting false,
// changing nothing, when there are not enough free blocks. A block that
// will be private is Anonymous (kvcache.Cache): no one asks for its id,
// unless r is preempted (preempt names it then); without prefix caching
// no block's id is ever asked for.
func (v *vllm) allocate(r *reqState, n int64) bool {
	named := n
	switch {
	case !v.prefix:
		named = 0
	case !v.eager:
		named = 0
		if int64(len(r.blocks))*v.bs < r.prompt {
			// Else r holds its prompt's blocks, all that can be
			// indexed (indexed is at most prompt/bs): it decodes.
			named = min(max(v.indexed(r)-int64(len(r.blocks)), 0), n)
		}
	}
	v.reserve(r)
	blocks, ok := v.kv.AllocateNamed(r.blocks, n, named)
	if len(blocks) <= cap(r.blocks) {
		// In the table's room (reserve made it): only its length is
		// stored, not the slice (its pointer stored while the
		// collector marks is a write barrier, some 160 instructions:
		// 78,000 on the autoscaled Mooncake replay).
		r.blocks = r.blocks[:len(blocks)]
	} else {
		r.blocks = blocks
	}
	return ok
}

// reserve makes r's block table as long as it can grow, the prompt's and
// every output token's blocks, at once, instead of doubling as it fills.
//
// Note: each doubling was a copy into fresh memory, a page fault per page
// (growslice clears the room it adds): on the 4-worker Mooncake replay,
// 850 tables grew from their prefix hits on, and with this AllocateNamed
// took some 500 page faults where it took 850 (perf record -e
// page-faults). A table is recycled with its request's state
// (engine.release), so it grows only when a longer request takes it.
func (v *vllm) reserve(r *reqState) {
	if n := int(ceilDiv(r.prompt+r.maxOut, v.bs)); cap(r.blocks) < n {
		r.blocks = kvcache.Grow(r.blocks, n-len(r.blocks))
	}
}

// preempt frees r's blocks and puts it at the front of the waiting queue
// to be recomputed; its generated tokens stay generated.
func (v *vllm) preempt(w *worker, r *reqState) {
	if r.preemptions == 0 && v.prefix {
		// Record the hashes of its private blocks, so that it can hit
		// them again (match) while they stay cached.
		v.kv.Name(r.blocks)
		c := r.hashChain(v.bs)
		if v.lazy != nil {
			// Index the shared blocks no sharer has asked for
			// yet: from now on r commits every block as it fills.
			for k := v.lazy.visible(r); k < min(c.Shared(), r.hashed); k++ {
				x, _ := c.Hash(k)
				v.kv.Commit(r.blocks[k], x)
			}
			v.lazy.preempted(r, c.Shared())
		}
		for k := c.Shared(); k < r.hashed; k++ {
			x, _ := c.Hash(k)
			v.kv.CommitPrivate(r.blocks[k], x)
		}
	} else if v.prefix && !v.eager {
		// Preempted before: its private blocks filled since are
		// Anonymous and not indexed (grow). Named and indexed now,
		// so that it can hit them again (walk looks a preempted
		// request's private blocks up in the index). No other
		// request has their hashes, and r made one copy of each
		// since its last preemption, so each is indexed after the
		// copies r made before, as when they filled.
		v.kv.Name(r.blocks)
		c := r.hashChain(v.bs)
		if s := c.Shared(); s < r.hashed {
			v.kv.CommitAll(r.blocks[s:r.hashed], c.Hashes(s, r.hashed))
		}
	}
	v.kv.Release(r.blocks, r.hashed)
	if r.preemptions == 0 {
		// Keep the table of privately committed blocks; blocks
		// computed after this are indexed like shared ones.
		r.blocks, r.ghost = r.ghost[:0], r.blocks
	} else {
		r.blocks = r.blocks[:0]
	}
	r.computed, r.hashed = 0, 0
	r.preemptions++
	w.preempted++
	w.waiting.pushFront(r)
}

// steady: no waiting request can be admitted either (there is none,
// max_num_seqs are running, or the front did not fit: stuck).
//
// Note: a front that did not fit for want of free blocks cannot fit
// before a request leaves (a release): the steady steps after only take
// blocks out of the free queue, for decodes, each from the count of
// those the front could have, or one of its free hits out of both (as
// blockedFront's note has it), and they commit only blocks of generated
// tokens, which no other request shares, so its hits do not grow; and
// fast-forward stops before a step that completes a request, or that
// preempts one. Without tiers only: a front that waits for a load may
// be admitted when it ends. On the autoscaled Mooncake replay, whose
// smaller fleets keep requests waiting, those steps were built, priced
// and streamed one at a time: 704.7 million instructions of the
// project's code, 660.0 with them fast-forwarded
// (BenchmarkReplayMooncakeRouters/autoscale, scripts/enginework), the
// same outputs.
func (v *vllm) steady(w *worker) bool {
	return len(w.batch.Prefill) == 0 && len(w.sched) == len(w.running) && w.preempted == 0 &&
		(w.waiting.Len() == 0 || len(w.running) >= v.maxSeq || v.stuck)
}

// decodeStep: when a request cannot get the block it needs, build must
// preempt: it reports false, and the blocks it gave the requests before
// that one are the ones build would give them first, so build, called
// next, finds them there and continues identically.
func (v *vllm) decodeStep(w *worker, now trace.Time) bool {
	for _, r := range w.running {
		// grow has work only when the token opens a block or fills
		// one (whose hash it commits); multiplications spare it the
		// divisions on every other token.
		total := r.computed + 1
		if total <= int64(len(r.blocks))*v.bs && (!v.prefix || total < (r.hashed+1)*v.bs) {
			continue
		}
		if !v.grow(r, 1) {
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

// steadyStart: blocks are allocated, and hashes committed, only at the
// steps whose token opens or fills a block. It returns the first step at
// which some running request needs grow (growAt), and keeps each one's
// in v.due for steadyAlloc.
func (v *vllm) steadyStart(w *worker) int64 {
	due := v.due[:0]
	next := int64(1) << 62
	for _, r := range w.running {
		at := v.growAt(r)
		due = append(due, at)
		next = min(next, at)
	}
	v.due = due
	return max(next, 0)
}

// steadyAlloc grows, at step j, the running requests whose token needs
// it (v.due), in order, as decodeStep does, and returns the next step at
// which one does.
//
// Note: one pass over the steps the requests are due at, kept since
// steadyStart (a request's changes only when it grows): a call per
// request to test whether it was due, and a second pass for the next
// step, cost a batch a call per request whenever one of them was due (on
// the autoscaled Mooncake replay 1.33 million calls for 470,000 grows,
// 34 M instructions); the step worked out from each request's blocks at
// each pass, 17 M more.
func (v *vllm) steadyAlloc(w *worker, j int64) (next int64, ok bool) {
	next = int64(1) << 62
	running := w.running
	due := v.due[:len(running)]
	for i, at := range due {
		if at <= j {
			r := running[i]
			if !v.grow(r, j+1) {
				return 0, false
			}
			at = v.growAt(r)
			due[i] = at
		}
		next = min(next, at)
	}
	return max(next, j), true
}

// growAt returns the step, counted from the start of steadySteps, at
// which r needs grow: its next token opens a block, or fills one whose
// hash it commits (r.computed stays as it was at the start).
func (v *vllm) growAt(r *reqState) int64 {
	at := int64(len(r.blocks))*v.bs - r.computed
	if v.prefix {
		at = min(at, (r.hashed+1)*v.bs-r.computed-1)
	}
	return at
}

func (v *vllm) stepEnded(*worker) {}

func (v *vllm) leave(_ *worker, r *reqState, _ leaving) {
	var run kvcache.FreeRun
	n := len(r.blocks)
	if n > 0 {
		if v.lazy != nil && r.preemptions == 0 {
			run = v.kv.ReleaseRun(r.blocks, r.hashed)
		} else {
			v.kv.Release(r.blocks, r.hashed)
		}
		r.blocks = r.blocks[:0]
	}
	if v.lazy != nil {
		v.lazy.left(v, r, run, n)
	}
}

// indexed returns how many of r's leading blocks are indexed when they
// fill: its shared blocks, or with lazy indexing, while r has not been
// preempted, those a sharer on this worker has asked for so far (a
// preemption makes them all visible: lazyIndex.preempted).
func (v *vllm) indexed(r *reqState) int64 {
	s := r.hashChain(v.bs).Shared()
	if v.lazy != nil {
		s = min(s, v.lazy.visible(r))
	}
	return s
}

// promote indexes r's shared blocks from … to−1 (lazyIndex.raise), which
// it holds, when it has them, without ids: r is running, or waiting, not
// preempted yet.
func (v *vllm) promote(r *reqState, from, to int64) {
	if from < int64(len(r.blocks)) {
		v.kv.Name(r.blocks[from:min(to, int64(len(r.blocks)))])
	}
	c := r.hashChain(v.bs)
	for k := from; k < min(to, r.hashed); k++ {
		x, _ := c.Hash(k)
		v.kv.Commit(r.blocks[k], x)
	}
}

func (v *vllm) freeBlocks() int64 { return v.kv.NumFree() }

func (v *vllm) evictions() int64 { return v.kv.Evictions }

func (v *vllm) describe(st *Step) { st.KV = v.kv }
