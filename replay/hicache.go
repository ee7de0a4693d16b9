package replay

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// SGLang's HiCache (mem_cache/hiradix_cache.py, managers/
// cache_controller.py) on the offload's tiers: the GPU radix cache is L1,
// the host tier L2 (hicache_ratio or hicache_size), the disk or remote
// tier L3 (hicache_storage_backend), a tier block a page.
//
// Note: what is modelled, after SGLang's code.
//   - Writes: under write_through the pages a step computes are written
//     to L2 as the step ends (insert → write_backup at hit count 1);
//     under write_through_selective a request's prompt pages are written
//     when it finishes (the second insert of its nodes reaches the hit
//     count of 2); under write_back only the pages the radix cache evicts
//     are. A page whose L2 write completed is written on to L3
//     (writing_check → write_backup_storage), except under write_back,
//     whose blocking path does not.
//   - L2 hits: a request's device match (page-aligned) continues in L2
//     pages; at admission (init_load_back, at least load_back_threshold
//     tokens) they are loaded to the GPU during the prefill step, layer
//     by layer: layer i computes once its KV has arrived, so the step
//     ends at max(compute, load + compute/layers).
//   - L3 prefetch: when the scheduler receives a request (its first
//     build after the request reached the worker: _prefetch_kvcache
//     from _add_request_to_queue) whose prompt past its L1+L2 match is
//     at least prefetch_threshold tokens, an operation is issued whatever
//     L3 holds; its storage query takes the prefetch thread's time
//     (StorageQuery, one operation after another) and a round trip of
//     the L3 path, and revokes it if L3 holds fewer than prefetch_threshold tokens of it,
//     else those pages are fetched into L2, from the query's end, while
//     the request waits. When
//     the scheduler reaches it (check_prefetch_progress), best_effort
//     takes the pages fetched so far (none at the build that issued it);
//     wait_complete and timeout never take it at the build that issued
//     the operation nor before its query ends, then wait_complete skips
//     it until all pages are in, timeout until they are or base +
//     per-page time has passed; the fetched pages join L2 and load as L2
//     hits.
//
// Departures: the query is one round trip and one StorageQuery
// whatever the pages (SGLang hashes them in Python and asks batch_exists
// per batch of pages, then all-reduces the hit count over the TP group,
// in one prefetch thread per rank: HiCacheController.
// prefetch_thread_func); which pages L3 holds is decided when the
// operation is issued, though their fetch starts only when its query
// ends; a retracted request is not queried again;
// SGLang's L2 evicts only pages the GPU no longer holds, here
// L2 is LRU over all its pages; write_back's eviction waits for its writes
// in SGLang, here they run in the background; a prefetch's progress is
// counted in pages, not in the backend's batches; generated tokens are
// never offloaded (a trace's output tokens are never shared).

// hiLoadBackThreshold is HiRadixCache.load_back_threshold: a smaller L2
// hit is not loaded.
const hiLoadBackThreshold = 10

// Transfer kinds (xfer.kind).
const (
	xferStore    = iota // a store into a tier
	xferLoad            // vLLM: a waiting request's load
	xferStepLoad        // SGLang: a load of L2 pages during a step
	xferPrefetch        // SGLang: an L3 prefetch into L2
)

// A hiPrefetch is a queued request's L3 prefetch operation: issued when
// the scheduler receives the request, its storage query (hashes and
// batch_exists) ends at queryEnd; revoked, no page is fetched (the query
// found fewer than prefetch_threshold tokens), else its pages are.
type hiPrefetch struct {
	id       int64      // its transfer (not revoked)
	node     int        // its node's fabric
	tier     int        // the L3 tier read
	keys     []uint64   // pages fetched, in order
	start    trace.Time // when the scheduler issued it
	queryEnd trace.Time // when its storage query ends
	deadline trace.Time // timeout policy: when the scheduler stops waiting
	done     bool       // every page arrived
	revoked  bool       // the query found too few pages: nothing to fetch
	skipped  trace.Time // when the scheduler first skipped its request; never: not yet
}

// hiStorage returns the L3 tier of ow (tierDisk or tierRemote), or -1.
func (ow *offWorker) hiStorage() int {
	for _, t := range []int{tierDisk, tierRemote} {
		if ow.tiers[t] != nil {
			return t
		}
	}
	return -1
}

// pageKeys returns the keys of r's first m whole prompt pages (or more,
// or all there are, if fewer), as tierKeys.
func (o *offload) pageKeys(w *worker, r *reqState, m int64) []uint64 {
	P := o.spec.BlockTokens
	n := min(m, r.prompt/P)
	if int64(len(r.tierKeys)) >= n {
		return r.tierKeys
	}
	r.tierKeys = kvcache.PageKeysAt(r.tierKeys[:0], w.s.(*sglang).keys(r), 0, P, n*P)
	return r.tierKeys
}

// hostRun returns how many tokens, from token from (page-aligned) up to
// limit, continue in whole pages that w's L2 holds ready, touching them;
// w.off.hits holds their slots.
func (o *offload) hostRun(w *worker, r *reqState, from, limit int64) int64 {
	P := o.spec.BlockTokens
	o.expose(w, r)
	keys := o.pageKeys(w, r, o.lookupBlocks(r))
	host := w.off.tiers[tierHost]
	hits := w.off.hits[:0]
	for p := from / P; p < int64(len(keys)) && (p+1)*P <= limit; p++ {
		s, ok := host.Hit(keys[p])
		if !ok {
			break
		}
		hits = append(hits, s)
	}
	w.off.hits = hits
	return int64(len(hits)) * P
}

// prefetch is _prefetch_kvcache for r reaching w's queue at now: the
// scheduler issues the operation when it receives r, at its next build
// (receive).
func (o *offload) prefetch(e *engine, w *worker, r *reqState, now trace.Time) error {
	if w.off.hiStorage() >= 0 {
		w.off.unissued = append(w.off.unissued, r)
	}
	return nil
}

// receive issues, at the build at now, the L3 prefetch operations of the
// requests that reached w's queue since the last build: SGLang's
// scheduler (managers/scheduler.py) calls _prefetch_kvcache from
// _add_request_to_queue as recv_requests hands it a request, at the top
// of the loop iteration that then builds a batch (get_new_batch_prefill).
//
// Note: this and issue are written for SGLang 0.5.2 (the Mooncake
// documentation's runs) but read from later upstream sources
// (sgl-project/sglang at 350cb87, with one 0.5.x-era excerpt of
// _prefetch_kvcache): the v0.5.2 tag itself was not available to read.
// The flow below is the same in every version read.
func (o *offload) receive(w *worker, now trace.Time) {
	ow := w.off
	for _, r := range ow.unissued {
		if err := o.issue(o.e, w, r, now); err != nil && o.err == nil {
			o.err = err
		}
	}
	clear(ow.unissued)
	ow.unissued = ow.unissued[:0]
}

// issue is _prefetch_kvcache and HiRadixCache.prefetch_from_storage for
// r at now (see receive's note on the version read): when the prompt past its L1 and L2 match
// (fill_ids[matched_len:], whole pages) is at least prefetch_threshold
// tokens, an operation is issued, whatever L3 holds: what it holds is
// only known when the controller's prefetch thread has hashed the pages
// and asked the backend (HiCacheController.prefetch_thread_func,
// _storage_hit_query: batch_exists), which here takes one round trip of
// the L3 path (2 × its links' latency) after the prefetch thread's
// StorageQuery, the thread querying one operation at a time. A query that finds fewer than
// prefetch_threshold tokens revokes the operation (prefetch_revoke_queue,
// seen at the next build's check_revoked_prefetch); otherwise its pages
// are fetched into L2 while r waits (prefetch_io_aux_func). Host memory
// for the fetch is taken at once, or no operation is issued.
func (o *offload) issue(e *engine, w *worker, r *reqState, now trace.Time) error {
	ow := w.off
	t := ow.hiStorage()
	g := w.s.(*sglang)
	P := o.spec.BlockTokens
	h := o.spec.HiCache
	m, _ := g.match(r)
	m += o.hostRun(w, r, m, r.numTokens())
	if tail := (r.numTokens() - m) / P * P; tail == 0 || tail < h.PrefetchThreshold {
		return nil
	}
	keys := o.pageKeys(w, r, o.lookupBlocks(r))
	host, st := ow.tiers[tierHost], ow.tiers[t]
	var fetch []uint64
	slots := ow.hits[:0]
	for p := m / P; p < int64(len(keys)); p++ {
		s, ok := st.Find(keys[p])
		if !ok || host.Has(keys[p]) {
			break
		}
		fetch = append(fetch, keys[p])
		slots = append(slots, s)
	}
	ow.hits = slots
	var rtt time.Duration
	for _, l := range o.storagePath(ow, t) {
		rtt += 2 * o.nodes[ow.node].f.Link(l).Latency
	}
	// The prefetch thread takes the operations one at a time: this one's
	// query starts when those before it have ended theirs.
	busy := max(now, ow.queryFree).Add(h.StorageQuery)
	ow.queryFree = busy
	pf := &hiPrefetch{node: ow.node, tier: t, start: now, queryEnd: busy.Add(max(rtt, time.Nanosecond)), deadline: never, skipped: never}
	if int64(len(fetch))*P < h.PrefetchThreshold || len(fetch) == 0 {
		pf.revoked = true
		r.pf = pf
		ow.loading++ // (the request waits for it as for a load)
		if h.PrefetchPolicy != PrefetchBestEffort {
			e.q.push(pf.queryEnd, evSchedule, int32(w.id))
		}
		return nil
	}
	// Host memory for all of it, or no prefetch (prefetch_from_storage).
	for i, k := range fetch {
		if _, _, ok := host.Insert(k); !ok {
			for _, k := range fetch[:i] {
				host.Remove(k)
			}
			return nil
		}
	}
	for _, s := range slots {
		st.PinAt(s)
	}
	pf.keys = fetch
	if h.PrefetchPolicy != PrefetchBestEffort {
		e.q.push(pf.queryEnd, evSchedule, int32(w.id))
	}
	if h.PrefetchPolicy == PrefetchTimeout {
		pf.deadline = now.Add(h.PrefetchTimeoutBase + time.Duration(len(fetch))*h.PrefetchTimeoutPerPage)
		e.q.push(pf.deadline, evSchedule, int32(w.id))
	}
	r.pf = pf
	ow.loading++
	// The fetch follows the query (prefetch_thread_func hands the
	// operation to prefetch_io_aux_func only once _storage_hit_query has
	// returned): its pages are sent from queryEnd.
	if err := o.startAfter(e, w, now, pf.queryEnd.Sub(now), &xfer{w: w, r: r, tier: t, keys: fetch, slots: slices.Clone(slots), kind: xferPrefetch}, int64(len(fetch))*o.blockBytes, o.storagePath(ow, t)); err != nil {
		return err
	}
	pf.id = o.nextID
	return nil
}

// storagePath is the path from L3 tier t into host memory.
func (o *offload) storagePath(ow *offWorker, t int) []int {
	n := o.nodes[ow.node]
	if t == tierDisk {
		return []int{n.nvme, n.dram}
	}
	return []int{n.net, n.dram}
}

// prefetchReady is check_prefetch_progress for waiting request r at the
// build at now, which stands for SGLang's build at cutoff (overlap: the
// one before): it reports false while the policy has r wait for its
// prefetch, else ends the prefetch, keeping the pages that arrived in L2.
// Under wait_complete and timeout an operation cannot end at the build
// that issued it, nor before its query has ended (can_terminate_prefetch:
// with no hash values yet the operation is not complete, and a revoked
// one leaves only at a check_revoked_prefetch after its query);
// best_effort ends it at once with what has arrived.
func (o *offload) prefetchReady(w *worker, r *reqState, now, cutoff trace.Time) bool {
	pf := r.pf
	if pf == nil {
		return true
	}
	policy := o.spec.HiCache.PrefetchPolicy
	if policy != PrefetchBestEffort && (cutoff <= pf.start || cutoff < pf.queryEnd) {
		pf.skipped = min(pf.skipped, now)
		return false
	}
	if pf.revoked {
		o.endPrefetch(w, r, 0, now)
		return true
	}
	if !pf.done {
		switch policy {
		case PrefetchWaitComplete:
			pf.skipped = min(pf.skipped, now)
			return false
		case PrefetchTimeout:
			if now < pf.deadline {
				pf.skipped = min(pf.skipped, now)
				return false
			}
		}
	}
	got := int64(len(pf.keys))
	if !pf.done {
		f := o.nodes[pf.node].f
		o.advance(o.e, pf.node, now)
		if left, ok := f.Remaining(pf.id); ok {
			got = int64(math.Floor((float64(len(pf.keys))*float64(o.blockBytes) - left) / float64(o.blockBytes)))
			got = max(min(got, int64(len(pf.keys))), 0)
		}
	}
	o.endPrefetch(w, r, got, now)
	return true
}

// endPrefetch ends r's prefetch at now with its first got pages in L2.
func (o *offload) endPrefetch(w *worker, r *reqState, got int64, now trace.Time) {
	pf := r.pf
	host := w.off.tiers[tierHost]
	for i, k := range pf.keys {
		if int64(i) < got {
			host.Complete(k)
		} else {
			host.Remove(k)
		}
	}
	r.pfTok = got * o.spec.BlockTokens
	r.pfTier = int8(pf.tier)
	r.pfIO = now.Sub(pf.start)
	if pf.skipped != never {
		r.kvWait += now.Sub(pf.skipped)
	}
	r.pf = nil
	w.off.loading--
}

// dropPrefetch ends the prefetch of r, leaving the queue, with nothing kept.
func (o *offload) dropPrefetch(w *worker, r *reqState) {
	if i := slices.Index(w.off.unissued, r); i >= 0 {
		w.off.unissued = slices.Delete(w.off.unissued, i, i+1)
	}
	if r.pf != nil {
		o.endPrefetch(w, r, 0, r.pf.start)
	}
}

// prefetched handles the end of prefetch x's transfer at now.
func (o *offload) prefetched(e *engine, x *xfer, id int64, now trace.Time) {
	st := x.w.off.tiers[x.tier]
	for _, s := range x.slots {
		st.UnpinAt(s)
	}
	if pf := x.r.pf; pf != nil && pf.id == id {
		pf.done = true
		e.wake(now, x.w)
	}
}

// admitHost is init_load_back for request r admitted with a device match
// of prefix tokens: it returns the tokens it loads from L2 (0 below
// load_back_threshold or when the pool cannot hold them), with their
// GPU slots taken and their load queued for the step being built.
func (o *offload) admitHost(w *worker, r *reqState, prefix int64) int64 {
	g := w.s.(*sglang)
	P := o.spec.BlockTokens
	n := o.hostRun(w, r, prefix, (r.numTokens()-1)/P*P)
	if n < hiLoadBackThreshold {
		return 0
	}
	keys := o.pageKeys(w, r, o.lookupBlocks(r))[prefix/P : (prefix+n)/P]
	host := w.off.tiers[tierHost]
	// Pinned first: the allocation may evict from the radix cache, and
	// under write_back that writes pages to L2, evicting from it.
	slots := slices.Clone(w.off.hits) // (hostRun's)
	for _, s := range slots {
		host.PinAt(s)
	}
	if !g.tree.Alloc(n) {
		for _, s := range slots {
			host.UnpinAt(s)
		}
		return 0
	}
	w.off.stepLoads = append(w.off.stepLoads, &xfer{w: w, r: r, tier: tierHost, keys: keys, slots: slots, kind: xferStepLoad})
	if !r.scheduled {
		st := min(r.pfTok, n)
		r.tierHit[tierHost] += n - st
		if st > 0 {
			r.tierHit[r.pfTier] += st
		}
	}
	return n
}

// startStepLoads starts at now the L2 loads of the step w built, whose
// compute takes d: the step ends when the last load has arrived and the
// layers after it are computed (stepLoaded).
func (o *offload) startStepLoads(e *engine, w *worker, now trace.Time, d time.Duration) error {
	ow := w.off
	ow.stepLeft, ow.stepStart, ow.stepCompute = len(ow.stepLoads), now, d
	ow.loading++
	for i, x := range ow.stepLoads {
		x.r.loadStart = now
		var links [3]int
		if err := o.start(e, w, now, x, int64(len(x.keys))*o.blockBytes, o.path(links[:0], ow, tierHost, true)); err != nil {
			return err
		}
		ow.stepLoads[i] = nil
	}
	ow.stepLoads = ow.stepLoads[:0]
	return nil
}

// stepLoaded handles the end, at at, of load x of the step in flight.
func (o *offload) stepLoaded(e *engine, x *xfer, at trace.Time) {
	ow := x.w.off
	for _, s := range x.slots {
		ow.tiers[tierHost].UnpinAt(s)
	}
	r := x.r
	r.loadEnd = at
	ow.stepLeft--
	if ow.stepLeft > 0 {
		return
	}
	ow.loading--
	layer := time.Duration(math.Ceil(float64(ow.stepCompute) / float64(o.spec.HiCache.Layers)))
	end := max(ow.stepStart.Add(ow.stepCompute), at.Add(layer))
	// Every prefill of the step waits for its end: the stall past the
	// compute is their wait for KV.
	if stall := end.Sub(ow.stepStart.Add(ow.stepCompute)); stall > 0 {
		for _, s := range x.w.sched {
			if s.r.out == 0 { // (a decode of mixed chunks has its first token)
				s.r.kvWait += stall
				s.r.kvStall += stall
			}
		}
	}
	e.q.push(end, evStepEnd, int32(x.w.id))
}

// writeBack stores the pages of an edge the radix cache of w evicts
// (write_back), at the time of the step being built.
func (o *offload) writeBack(w *worker, key []kvcache.Run, start int64) {
	ow := w.off
	var n int64
	for _, r := range key {
		n += r.Len
	}
	ow.wb = kvcache.PageKeysAt(ow.wb[:0], key, start, o.spec.BlockTokens, start+n)
	if len(ow.wb) == 0 {
		return
	}
	if err := o.storeTo(o.e, w, tierHost, ow.wb, 0, 0, 0, ow.now); err != nil && o.err == nil {
		o.err = err
	}
}

// stored handles the end of store x: its blocks hit from now on, and
// under HiCache's write-through policies what reached L2 goes on to L3.
func (o *offload) stored(e *engine, x *xfer, now trace.Time) error {
	tr := x.w.off.tiers[x.tier]
	for i, k := range x.keys {
		tr.CompleteAt(x.slots[i], k)
	}
	if x.runN > 0 {
		tr.CompleteRun(x.run)
	}
	if o.spec.HiCache == nil || x.tier != tierHost || o.spec.WritePolicy == WriteBack {
		return nil
	}
	if t := x.w.off.hiStorage(); t >= 0 {
		return o.storeTo(e, x.w, t, x.keys, x.runFirst, x.runN, x.owner, now)
	}
	return nil
}

// hiValidate reports an Offload SGLang's scheduler cannot run with.
func (o *Offload) hiValidate(s SchedulerConfig) error {
	if o.HiCache == nil {
		return fmt.Errorf("replay: SGLang's scheduler takes KV tiers as HiCache (enable_hierarchical_cache), not vLLM's offloading")
	}
	if o.BlockTokens != s.PageSize {
		return fmt.Errorf("replay: HiCache pages of %d tokens, the radix cache's of %d", o.BlockTokens, s.PageSize)
	}
	if o.HostBlocks == 0 {
		return fmt.Errorf("replay: HiCache without a host pool")
	}
	return nil
}
