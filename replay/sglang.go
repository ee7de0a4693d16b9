package replay

import (
	"cmp"
	"slices"

	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// SGLang's scheduler constants (python/sglang/srt: global_config.py,
// managers/schedule_policy.py, managers/schedule_batch.py).
const (
	// CLIP_MAX_NEW_TOKENS: the admission estimate of a request's future
	// decode tokens is clipped to this.
	sgClipMaxNewTokens = 4096
	// retract_decode_steps: retraction frees memory for this many decode
	// steps of the requests that stay.
	sgRetractDecodeSteps = 20
	// default_init_new_token_ratio, default_min_new_token_ratio_factor,
	// default_new_token_ratio_decay_steps.
	sgInitNewTokenRatio    = 0.7
	sgMinNewTokenRatioFact = 0.14
	sgNewTokenRatioSteps   = 600
	// Above this many waiting requests the lpm policy falls back to
	// FCFS (SchedulePolicy._determine_active_policy).
	sgLPMMaxQueue = 128
	// IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and
	// IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD: a waiting request
	// with at most the first cached is checked against the requests
	// before it in the queue, and sent to the back when it shares at
	// least the second with one of them.
	sgInBatchCheck        = 32
	sgInBatchDeprioritize = 32
)

// sglang is the SGLang scheduler of one worker (Scheduler.
// get_next_batch_to_run over a RadixCache).
//
// Note: a step is a prefill (extend) batch whenever one can be formed, and
// the running requests' decodes wait for it (with EnableMixedChunk they
// join it); only when no prefill is admitted does a decode step run every
// running request. Admission follows PrefillAdder: the waiting queue,
// ordered by longest prefix match (or FCFS), is admitted while the tokens
// free or evictable exceed the new requests' prompts plus their clipped
// max_new_tokens plus, for every running request, its remaining clipped
// max_new_tokens times new_token_ratio; the prefill is cut at
// chunked_prefill_size (one chunked request at a time) and
// max_prefill_tokens. When a decode step finds fewer free tokens than
// running requests, requests are retracted (fewest output tokens first,
// then longest prompt) until the rest have room for
// retract_decode_steps more steps, and new_token_ratio is re-estimated;
// otherwise it decays by new_token_ratio_decay per decode step.
//
// The KV is a token-granular radix tree (kvcache.Radix). A request locks
// its matched prefix; its computed tokens are inserted into the tree
// when the step that computed them ends (cache_unfinished_req: so
// requests in one batch do not share with each other), its decoded tokens
// only when it finishes (cache_finished_req); a retracted request keeps
// its inserted prefix in the tree, unlocked, and frees the rest.
//
// With the overlap scheduler (SGLang's default from v0.4; OverlapSchedule),
// a step is built
// when the step before begins, so a request that reaches the worker while
// a step runs joins the second build after it, not the next: its TTFT
// holds one step more. For the same reason the batch built ahead knows
// nothing of the step before's results: a request that step finished is
// still running to it (a decode step decodes it once more, into one more
// token of the pool), and what it holds is released, and the running
// batch shrinks, only for the build after (see sgDone). With the radix
// cache off and requests that carry ignore_eos, admission is
// add_one_req_ignore_eos's: a request goes in if every request could then
// run to its end, the first of a prefill even when the new_token_ratio
// budget is spent (which stops the prefill after it).
//
// The rules follow SGLang v0.4's scheduler (schedule_policy.py,
// schedule_batch.py, scheduler.py); later versions add features (priority
// scheduling, hierarchical cache, speculative decoding, overlap
// scheduling) not modelled here. Departures: the page size is 1 token
// (SGLang's default); when no request runs and the head of the queue can never
// pass the new-token estimate (a request as large as the whole pool), it
// is admitted anyway rather than stalling the worker forever; a chunk of
// the chunked request that the pool cannot hold shrinks to what it can
// (SGLang fails with "Prefill out of memory"); a decode that cannot
// get a token even after retraction waits a step (SGLang fails); and
// under the overlap scheduler the finished requests a build still carries
// are priced and given their slot but not counted against
// max_running_requests, the decode's memory check or add_one_req_ignore_eos's
// states, and when no request is left running the worker is taken as
// idle, every result processed (SGLang's next build would still decode
// the finished ones once).
type sglang struct {
	tree        *kvcache.Radix
	empty       *kvcache.Cache // Step.KV: SGLang has no block cache
	bs          int64          // tokens per block, the unit of freeBlocks and evictions
	radix       bool           // radix cache on (else every token is private)
	page        int64          // page_size: the radix cache holds and matches whole pages
	lpm         bool
	chunk       int64      // chunked_prefill_size
	maxPrefill  int64      // max_prefill_tokens
	maxRun      int        // max_running_requests
	mixed       bool       // enable_mixed_chunk
	overlap     bool       // the overlap scheduler (OverlapSchedule)
	cutoff      trace.Time // overlap: a request that reached the worker after this waits a step
	ignoreEOS   bool       // every request runs to its max_new_tokens (ignore_eos)
	states      []sgState  // scratch: add_one_req_ignore_eos's req_states, by tokens left
	statesBuilt bool

	ratio, minRatio, decay float64 // new_token_ratio and its floor and decay

	chunked *reqState // the request whose prefill is chunked, if any
	// Overlap: doneLast holds the requests that finished as the last
	// step ended, which the step built now does not know of; doneCarried
	// those that finished a step earlier, which the step built now
	// carries and the next build releases (sgDone).
	doneLast, doneCarried []sgDone
	// full is running_batch.batch_is_full: no prefill admits new
	// requests until it is cleared, when an extend step's batch loses a
	// request or continues a chunked prefill, or the running batch
	// shrinks (shrunk) by the next decode step's update_running_batch.
	full    bool
	shrunk  bool
	extend  bool        // the step built last is an extend (prefill) step
	pending []*reqState // extended in the step in flight: inserted into the tree when it ends

	order []*reqState // scratch: the waiting queue in policy order
	batch []*reqState // scratch: decode batch
	admit []sgAdmit   // scratch: requests admitted by a prefill
}

// sgMaxRunning is SGLang's default max_running_requests for a KV pool of
// tokens and a model context length (v0.4, model_runner.init_memory_pool
// and tp_worker): the request-to-token pool holds
// min(max(⌊tokens/context_len·512⌋, 2048), 4096) + 1 requests, and the
// scheduler runs at most that many, and at most tokens/2. An unknown
// context length (0) is taken as at least a quarter of the pool, which
// gives the pool's floor of 2,048 requests.
func sgMaxRunning(tokens, contextLen int64) int {
	reqs := int64(2048)
	if contextLen > 0 {
		reqs = min(max(int64(float64(tokens)/float64(contextLen)*512), 2048), 4096)
	}
	return int(min(tokens/2, reqs+1))
}

// sgReq is a request's SGLang state while it is on a worker.
type sgReq struct {
	keys   []kvcache.Run      // token keys of prompt and output
	node   *kvcache.RadixNode // locked: end of the prefix held in the tree
	held   int64              // tokens held in the tree through node
	prefix int64              // lpm: prefix match when the queue was last ordered (−1: deprioritised)
	taken  bool               // admitted by the prefill being built
}

// An sgDone is a request that finished but whose result the overlap
// scheduler has not yet processed when it builds the next batch
// (v0.4.0.post1 scheduler.py event_loop_overlap: get_next_batch_to_run
// builds batch k+1 before process_batch_result of batch k marks its
// requests finished and frees them; the same order through v0.5). The
// batch built then still holds it: a decode step decodes it once more
// into one more pool slot ("Free the one delayed token" in
// process_batch_result_decode), and the pool gets its tokens back, and
// update_running_batch's filter_batch shrinks the running batch (which
// clears batch_is_full), only for the build after. It keeps what
// release needs, as the request's own state is recycled once it leaves.
type sgDone struct {
	keys     []kvcache.Run      // token keys (radix cache on)
	computed int64              // tokens it holds
	held     int64              // of which held in the tree through node
	node     *kvcache.RadixNode // locked prefix, or nil
	context  int64              // its context, when decoded once more
	token    bool               // decoded once more: holds one more slot
}

type sgAdmit struct {
	r      *reqState
	prefix int64
	node   *kvcache.RadixNode
	n      int64 // tokens to compute
	load   int64 // tokens loaded from HiCache's L2 (hicache.go)
}

// EngineSGLang names SGLang's scheduler (SchedulerConfig.Engine), and
// PolicyLPM and PolicyFCFS its schedule policies (SGLangConfig.
// SchedulePolicy).
const (
	EngineSGLang = "sglang"
	PolicyLPM    = "lpm"
	PolicyFCFS   = "fcfs"
)

// SGLang's defaults of its server arguments (server_args.py).
const (
	sgChunkedPrefillSize = 8192
	sgMaxPrefillTokens   = 16384
)

// An SGLangConfig holds SGLang's server arguments, under its names; it is
// part of SchedulerConfig, and other engines ignore it. In a configuration
// as written 0 or absent takes SGLang's default; the effective
// configuration (Config.Effective) has every default filled in.
type SGLangConfig struct {
	// SchedulePolicy orders SGLang's waiting queue: "lpm" (default:
	// longest prefix match first) or "fcfs".
	SchedulePolicy string `yaml:"schedule_policy,omitempty"`
	// ChunkedPrefillSize caps the prefill tokens of one step (default 8192).
	ChunkedPrefillSize int64 `yaml:"chunked_prefill_size,omitempty"`
	// MaxPrefillTokens caps the prompt tokens admitted by one step
	// (default 16384).
	MaxPrefillTokens int64 `yaml:"max_prefill_tokens,omitempty"`
	// MaxRunningRequests caps the running requests (default: derived
	// from the KV pool as SGLang derives it; see sgMaxRunning).
	MaxRunningRequests int `yaml:"max_running_requests,omitempty"`
	// ContextLength is the model's context length (SGLang's
	// --context-length; opaltrace replay takes the model's
	// max_position_embeddings), from which SGLang sizes its request pool;
	// 0: unknown.
	ContextLength int64 `yaml:"context_length,omitempty"`
	// EnableMixedChunk runs the decodes in the prefill step instead of
	// stalling them.
	EnableMixedChunk bool `yaml:"enable_mixed_chunk,omitempty"`
	// OverlapSchedule models SGLang's overlap scheduler, which SGLang
	// runs by default from v0.4 (--disable-overlap-schedule turns it
	// off): the next batch is built while the GPU runs the current one,
	// so a request that arrives during a step misses the batch already
	// built and waits one step more. The replay leaves it off unless
	// set; package deploy sets it for a recorded SGLang run of v0.4 or
	// later (or of no recorded version) that did not disable it.
	OverlapSchedule bool `yaml:"overlap_schedule,omitempty"`
	// IgnoreEOS says the clients' requests carry ignore_eos (SGLang's
	// bench_serving sends it unless --disable-ignore-eos): each runs to
	// its max_new_tokens, and with the radix cache off SGLang admits
	// such a request only if every running request can then run to its
	// end without retraction (PrefillAdder.add_one_req_ignore_eos),
	// instead of the new_token_ratio estimate.
	IgnoreEOS bool `yaml:"ignore_eos,omitempty"`
	// DisableRadixCache turns SGLang's prefix cache off.
	DisableRadixCache bool `yaml:"disable_radix_cache,omitempty"`
	// ScheduleConservativeness scales the initial new_token_ratio
	// (default 1: 0.7).
	ScheduleConservativeness float64 `yaml:"schedule_conservativeness,omitempty"`
	// PageSize is SGLang's --page-size: tokens per KV page (default 1).
	// Above 1 the radix cache matches and caches whole pages only.
	PageSize int64 `yaml:"page_size,omitempty"`

	// HiCache: SGLang's hierarchical cache (hicache.go), under its
	// server arguments' names; package deploy turns them into an
	// Offload on the node's links.
	EnableHierarchicalCache bool `yaml:"enable_hierarchical_cache,omitempty"`
	// HiCacheRatio sizes the host pool (L2) as this many times the
	// device pool (default 2); HiCacheSize, in GB per GPU, overrides it.
	HiCacheRatio float64 `yaml:"hicache_ratio,omitempty"`
	HiCacheSize  float64 `yaml:"hicache_size,omitempty"`
	// HiCacheWritePolicy: write_through (default), write_through_selective
	// or write_back.
	HiCacheWritePolicy string `yaml:"hicache_write_policy,omitempty"`
	// HiCacheStorageBackend turns the L3 tier on: mooncake or hf3fs (a
	// store every worker shares, over the NIC; its size kv_store_gib),
	// file or nixl (the node's NVMe).
	HiCacheStorageBackend string `yaml:"hicache_storage_backend,omitempty"`
	// HiCacheStoragePrefetchPolicy says when a queued request stops
	// waiting for its L3 prefetch: best_effort (default), wait_complete
	// or timeout.
	HiCacheStoragePrefetchPolicy string `yaml:"hicache_storage_prefetch_policy,omitempty"`
	// HiCacheStorageBackendExtraConfig is SGLang's JSON of extra storage
	// settings, of which the prefetch ones are modelled:
	// prefetch_threshold (tokens, default 256), prefetch_timeout_base
	// (s, default 1) and prefetch_timeout_per_ki_token (s, default 0.25).
	HiCacheStorageBackendExtraConfig string `yaml:"hicache_storage_backend_extra_config,omitempty"`
	// HiCacheStorageQuerySec is not SGLang's: the simulator's time, in
	// seconds, the prefetch thread spends on one L3 prefetch operation's
	// storage query (hashing the pages, batch_exists, the TP all-reduce
	// of the hit count) past the L3 links' round trip, the thread taking
	// one operation at a time; a request under wait_complete or timeout
	// is not scheduled before its query ends. Default 0: the round trip
	// alone.
	HiCacheStorageQuerySec float64 `yaml:"hicache_storage_query_s,omitempty"`
}

// HiCache write and prefetch policies, and storage backends (SGLang's
// names).
const (
	WriteThroughSelective = "write_through_selective"
	PrefetchBestEffort    = "best_effort"
	PrefetchWaitComplete  = "wait_complete"
	PrefetchTimeout       = "timeout"
)

// HiCacheStorageBackends are the L3 backends modelled, and whether each
// is the node's disk (else a store shared over the network).
var HiCacheStorageBackends = map[string]bool{"mooncake": false, "hf3fs": false, "file": true, "nixl": true}

// sglangDefaults fills SGLang's settings left at 0; the request cap
// depends on the KV pool, s.KVCacheTokens.
func sglangDefaults(s *SchedulerConfig) {
	g := &s.SGLangConfig
	if g.SchedulePolicy == "" {
		g.SchedulePolicy = PolicyLPM
	}
	if g.ChunkedPrefillSize == 0 {
		g.ChunkedPrefillSize = sgChunkedPrefillSize
	}
	if g.MaxPrefillTokens == 0 {
		g.MaxPrefillTokens = sgMaxPrefillTokens
	}
	if g.MaxRunningRequests == 0 {
		g.MaxRunningRequests = sgMaxRunning(s.KVCacheTokens, g.ContextLength)
	}
	if g.ScheduleConservativeness == 0 {
		g.ScheduleConservativeness = 1
	}
	if g.PageSize == 0 {
		g.PageSize = 1
	}
	if g.EnableHierarchicalCache {
		if g.HiCacheRatio == 0 && g.HiCacheSize == 0 {
			g.HiCacheRatio = 2
		}
		if g.HiCacheWritePolicy == "" {
			g.HiCacheWritePolicy = WriteThrough
		}
		if g.HiCacheStorageBackend != "" && g.HiCacheStoragePrefetchPolicy == "" {
			g.HiCacheStoragePrefetchPolicy = PrefetchBestEffort
		}
	}
}

// sglangValidate checks SGLang's settings.
func sglangValidate(s SchedulerConfig, bad func(field, format string, args ...any)) {
	g := s.SGLangConfig
	switch g.SchedulePolicy {
	case "", PolicyLPM, PolicyFCFS:
	default:
		bad("scheduler.schedule_policy", "unknown policy %q (want %s or %s)", g.SchedulePolicy, PolicyLPM, PolicyFCFS)
	}
	if g.ChunkedPrefillSize < 0 {
		bad("scheduler.chunked_prefill_size", "negative (%d)", g.ChunkedPrefillSize)
	}
	if g.MaxPrefillTokens < 0 {
		bad("scheduler.max_prefill_tokens", "negative (%d)", g.MaxPrefillTokens)
	}
	if g.MaxRunningRequests < 0 {
		bad("scheduler.max_running_requests", "negative (%d)", g.MaxRunningRequests)
	}
	if g.ContextLength < 0 {
		bad("scheduler.context_length", "negative (%d)", g.ContextLength)
	}
	if sc := g.ScheduleConservativeness; !(sc >= 0) || sc > 100 {
		bad("scheduler.schedule_conservativeness", "%v is not a number in [0, 100]", sc)
	}
	if g.PageSize < 0 {
		bad("scheduler.page_size", "negative (%d)", g.PageSize)
	}
	if !(g.HiCacheRatio >= 0) || g.HiCacheRatio > 1e6 {
		bad("scheduler.hicache_ratio", "%v is not a number ≥ 0", g.HiCacheRatio)
	}
	if !(g.HiCacheSize >= 0) || g.HiCacheSize > 1e9 {
		bad("scheduler.hicache_size", "%v is not a size in GB ≥ 0", g.HiCacheSize)
	}
	switch g.HiCacheWritePolicy {
	case "", WriteThrough, WriteThroughSelective, WriteBack:
	default:
		bad("scheduler.hicache_write_policy", "unknown policy %q (want %s, %s or %s)", g.HiCacheWritePolicy, WriteThrough, WriteThroughSelective, WriteBack)
	}
	if _, ok := HiCacheStorageBackends[g.HiCacheStorageBackend]; !ok && g.HiCacheStorageBackend != "" {
		bad("scheduler.hicache_storage_backend", "unknown backend %q (want mooncake, hf3fs, file or nixl)", g.HiCacheStorageBackend)
	}
	switch g.HiCacheStoragePrefetchPolicy {
	case "", PrefetchBestEffort, PrefetchWaitComplete, PrefetchTimeout:
	default:
		bad("scheduler.hicache_storage_prefetch_policy", "unknown policy %q (want %s, %s or %s)", g.HiCacheStoragePrefetchPolicy, PrefetchBestEffort, PrefetchWaitComplete, PrefetchTimeout)
	}
	hi := g.HiCacheRatio != 0 || g.HiCacheSize != 0 || g.HiCacheWritePolicy != "" || g.HiCacheStorageBackend != "" ||
		g.HiCacheStoragePrefetchPolicy != "" || g.HiCacheStorageBackendExtraConfig != "" || g.HiCacheStorageQuerySec != 0
	if hi && !g.EnableHierarchicalCache {
		bad("scheduler.enable_hierarchical_cache", "the hicache_* settings need enable_hierarchical_cache: true")
	}
	if g.EnableHierarchicalCache && g.DisableRadixCache {
		bad("scheduler.enable_hierarchical_cache", "HiCache is a radix cache: not with disable_radix_cache")
	}
}

// newSGLangScheduler returns a worker's SGLang scheduler over a pool of
// blocks·BlockSize tokens; s has its defaults (sglangDefaults).
func newSGLangScheduler(s SchedulerConfig, blocks int64, _ *testSwitches) scheduler {
	g := &sglang{
		tree:       kvcache.NewRadix(blocks * s.BlockSize),
		empty:      kvcache.New(0),
		bs:         s.BlockSize,
		radix:      !s.DisableRadixCache,
		lpm:        s.SchedulePolicy != PolicyFCFS,
		chunk:      s.ChunkedPrefillSize,
		maxPrefill: s.MaxPrefillTokens,
		maxRun:     s.MaxRunningRequests,
		mixed:      s.EnableMixedChunk,
		overlap:    s.OverlapSchedule,
		ignoreEOS:  s.IgnoreEOS,
		page:       max(s.PageSize, 1),
	}
	init := min(sgInitNewTokenRatio*s.ScheduleConservativeness, 1)
	g.ratio = init
	g.minRatio = min(init*sgMinNewTokenRatioFact, 1)
	g.decay = (init - g.minRatio) / sgNewTokenRatioSteps
	return g
}

func (g *sglang) keys(r *reqState) []kvcache.Run {
	if len(r.sg.keys) == 0 {
		var tb int64
		var ids []int64
		if r.in != nil { // nil: a shaper's request, without hash ids
			ids = r.in.HashIDs
			if bs, ok := r.in.BlockSize.Get(); ok {
				tb = bs
			}
		}
		r.sg.keys = kvcache.TokenKeys(nil, ids, tb, r.prompt, r.maxOut, uint64(r.idx)+1)
	}
	return r.sg.keys
}

// match returns r's longest page-aligned prefix in the tree, leaving a
// token to compute, and the node where it ends (match_prefix: the key is
// cut to whole pages, and pages match whole).
func (g *sglang) match(r *reqState) (int64, *kvcache.RadixNode) {
	limit := (r.numTokens() - 1) / g.page * g.page
	m, node := g.tree.Match(g.keys(r), limit)
	if a := m / g.page * g.page; a != m {
		m, node = g.tree.Match(g.keys(r), a)
	}
	return m, node
}

// aligned is n rounded down to whole pages.
func (g *sglang) aligned(n int64) int64 { return n / g.page * g.page }

// flush inserts what the last step computed for the requests it extended
// into the tree, each request then holding (locking) all of it.
func (g *sglang) flush() {
	if len(g.pending) > 0 && g.chunked != nil {
		g.full = false // get_next_batch_to_run, after an extend with a chunked request
	}
	for _, r := range g.pending {
		upTo := g.aligned(r.computed) // a partial page stays private
		if !g.radix || upTo <= r.sg.held {
			continue
		}
		n := g.tree.Insert(g.keys(r), r.sg.held, upTo)
		g.tree.Lock(n)
		if r.sg.node != nil {
			g.tree.Unlock(r.sg.node)
		}
		r.sg.node, r.sg.held = n, upTo
	}
	clear(g.pending)
	g.pending = g.pending[:0]
}

// release gives back what r holds: with the radix cache its computed
// tokens go to the tree (insert) when insert is set, else the private ones
// are freed; its prefix is unlocked.
func (g *sglang) release(r *reqState, insert bool) {
	var keys []kvcache.Run
	if g.radix && insert {
		keys = g.keys(r)
	}
	g.releaseHeld(keys, r.computed, r.sg.held, r.sg.node)
	r.sg.node, r.sg.held = nil, 0
}

// releaseHeld gives back computed tokens of which held are in the tree
// through node: with keys (radix cache on, insert) the rest go into the
// tree, else they are freed; node is unlocked.
func (g *sglang) releaseHeld(keys []kvcache.Run, computed, held int64, node *kvcache.RadixNode) {
	if upTo := g.aligned(computed); keys != nil && upTo > held {
		g.tree.Insert(keys, held, upTo)
		g.tree.FreePrivate(computed - upTo)
	} else {
		g.tree.FreePrivate(computed - held)
	}
	if node != nil {
		g.tree.Unlock(node)
	}
}

// releaseDone releases the finished requests of done (cache_finished_req
// as process_batch_result reaches them), with the slot of the decode
// that carried one, and reports whether there were any.
func (g *sglang) releaseDone(done []sgDone) bool {
	for _, d := range done {
		g.releaseHeld(d.keys, d.computed, d.held, d.node)
		if d.token {
			g.tree.FreePrivate(1)
		}
	}
	return len(done) > 0
}

// leave implements scheduler: a request leaving a waiting queue holds
// nothing (retraction released it).
func (g *sglang) leave(w *worker, r *reqState, from leaving) {
	if from != leaveWaiting {
		g.finished(r, from == leaveAtStepEnd)
	} else if w.off != nil {
		w.off.o.dropPrefetch(w, r)
	}
}

// finished releases a request that finished or was aborted
// (cache_finished_req). atStepEnd says it leaves as the step in flight
// ends (else between steps: a client abort).
func (g *sglang) finished(r *reqState, atStepEnd bool) {
	g.flush()
	if g.chunked == r {
		g.chunked = nil
	}
	if g.overlap && atStepEnd {
		// The next build does not know yet (sgDone).
		d := sgDone{computed: r.computed, held: r.sg.held, node: r.sg.node, context: r.computed}
		if g.radix {
			d.keys = g.keys(r)
		}
		g.doneLast = append(g.doneLast, d)
		r.sg.node, r.sg.held = nil, 0
		return
	}
	g.release(r, true)
	if atStepEnd && g.extend {
		g.full = false // the extend batch shrank
	} else {
		g.shrunk = true
	}
}

// build builds w's next step at now into w.sched and w.batch.
func (g *sglang) build(w *worker, now trace.Time) {
	if w.off != nil {
		w.off.now = now
		if len(w.off.unissued) > 0 {
			w.off.o.receive(w, now)
		}
	}
	g.flush()
	// Overlap (event_loop_overlap): the batch that runs now was built
	// when the step before began, from the requests received by then.
	// An idle worker builds at once.
	g.cutoff = now
	overlapped := g.overlap && len(w.running) > 0
	if overlapped {
		g.cutoff = w.prevStart
	}
	// The results of the step before the last were processed while the
	// last one ran; the last one's only if the worker was idle (with
	// nothing running the loop processes it before it builds again).
	if g.releaseDone(g.doneCarried) {
		g.shrunk = true
	}
	clear(g.doneCarried)
	g.doneCarried, g.doneLast = g.doneLast, g.doneCarried[:0]
	if !overlapped && g.releaseDone(g.doneCarried) {
		g.shrunk = true
		clear(g.doneCarried)
		g.doneCarried = g.doneCarried[:0]
	}
	if w.remote > 0 {
		g.prebuilt(w, now)
	}
	g.extend = g.prefill(w, now)
	if !g.extend {
		g.decode(w, now)
	}
	if (!g.extend || g.mixed) && len(w.sched) > 0 {
		// The running batch decodes the finished requests it does
		// not know of once more (a slot each while the pool has one).
		for i := range g.doneCarried {
			d := &g.doneCarried[i]
			if d.token = g.tree.Alloc(1); d.token {
				w.batch.Decode = append(w.batch.Decode, d.context)
			}
		}
	}
}

// settle releases, on a worker with nothing running, the requests that
// finished in its last steps: an idle SGLang event loop has processed
// their results (the next build would release them first thing).
func (g *sglang) settle(w *worker) {
	if len(w.running) > 0 {
		return
	}
	for _, done := range []*[]sgDone{&g.doneCarried, &g.doneLast} {
		if g.releaseDone(*done) {
			g.shrunk = true
		}
		clear(*done)
		*done = (*done)[:0]
	}
}

// prebuilt takes in the waiting requests whose prompt's KV a prefill
// worker sent (disaggregation, disagg.go) as SGLang's decode server does
// (disaggregation/decode.py, get_new_prebuilt_batch and
// process_batch_result_prebuilt, v0.5): in queue order while fewer than
// max_running_requests run, each taking its prompt's tokens in the pool
// (evicting cached ones if it must), its first token, the one the prefill
// server computed, streamed at once without a forward pass; it decodes
// from this step on. One that does not fit waits. Under disaggregation
// their tokens were allocated before their prefill began (its
// PreallocQueue: engine.preallocate) and are theirs already.
func (g *sglang) prebuilt(w *worker, now trace.Time) {
	w.waiting.filter(func(r *reqState) bool {
		if !r.remote || len(w.running) >= g.maxRun {
			return true
		}
		if r.pdHeld {
			r.pdHeld = false // pre-allocated (engine.preallocate)
		} else {
			if free := g.tree.Free(); free < r.prompt {
				g.tree.Evict(r.prompt - free)
			}
			if !g.tree.Alloc(r.prompt) {
				return true
			}
		}
		r.remote = false
		w.remote--
		r.computed, r.out = r.prompt, 1
		w.firstToken(r, now)
		w.running = append(w.running, r)
		return false
	})
}

// running returns the running batch: w.running without the chunked request.
func (g *sglang) running(w *worker) []*reqState {
	g.batch = g.batch[:0]
	for _, r := range w.running {
		if r != g.chunked {
			g.batch = append(g.batch, r)
		}
	}
	return g.batch
}

// prefill builds a prefill batch (get_new_batch_prefill and PrefillAdder)
// and reports whether it did.
func (g *sglang) prefill(w *worker, now trace.Time) bool {
	running := g.running(w)
	bs := len(running)
	if bs == 0 {
		g.full = false
	}
	if (g.full || w.waiting.Len() == 0) && g.chunked == nil {
		return false
	}
	if bs >= g.maxRun {
		g.full = true
		return false
	}
	g.orderQueue(w)

	var mixedBs int64
	if g.mixed {
		mixedBs = int64(bs)
	}
	totalOff := float64(mixedBs) // rem_total_token_offset
	curOff := float64(mixedBs)   // cur_rem_token_offset
	for _, r := range running {
		totalOff += float64(min(r.maxOut-r.out, sgClipMaxNewTokens)) * g.ratio
	}
	remInput := g.maxPrefill - mixedBs
	remChunk := g.chunk - mixedBs
	avail := func() float64 { return float64(g.tree.Free() + g.tree.Evictable()) }
	charge := func(extend, maxNew int64) {
		totalOff += float64(extend + maxNew)
		curOff += float64(extend)
		remInput -= extend
		remChunk -= extend
	}
	g.admit = g.admit[:0]
	g.states = g.states[:0]
	g.statesBuilt = false
	if c := g.chunked; c != nil {
		// add_chunked_req: the chunked request goes first.
		extend := c.numTokens() - c.computed
		truncated := extend > remChunk
		// SGLang allocates the chunk without a budget check and fails
		// with "Prefill out of memory" when the pool cannot hold it;
		// here the chunk shrinks to what the pool holds.
		extend = min(extend, remChunk, g.tree.Free()+g.tree.Evictable())
		truncated = truncated || extend < c.numTokens()-c.computed
		if extend > 0 {
			g.admit = append(g.admit, sgAdmit{r: c, n: extend})
			maxNew := int64(0)
			if !truncated {
				maxNew = min(c.maxOut, sgClipMaxNewTokens)
				g.chunked = nil
			}
			charge(extend, maxNew)
		}
	}
	for _, r := range g.order {
		if bs+len(g.admit) >= g.maxRun {
			g.full = true
			break
		}
		if r.workerArrival > g.cutoff && r.workerArrival < now {
			continue // overlap: not received when this batch was built
		}
		if r.remote {
			continue // its KV is taken in by prebuilt
		}
		if r.pdPre {
			continue // its decode server has not pre-allocated it yet
		}
		if w.off != nil && !w.off.o.prefetchReady(w, r, now, g.cutoff) {
			continue // its L3 prefetch holds it in the queue
		}
		var prefix int64
		node := g.tree.Root()
		if g.radix {
			prefix, node = g.match(r)
		}
		extend := r.numTokens() - prefix
		maxNew := min(r.maxOut, sgClipMaxNewTokens)
		total := float64(extend + maxNew)
		force := bs == 0 && len(g.admit) == 0 && extend <= g.tree.Free()+g.tree.Evictable()
		exact := !g.radix && g.ignoreEOS // add_one_req_ignore_eos: no ratio pre-check
		if exact {
			if !force && !g.fitsToEnd(r, running, avail()-curOff) {
				g.full = true
				break
			}
		} else {
			if total >= avail()-totalOff && !force {
				g.full = true
				break
			}
			if extend > remInput && len(g.admit) != 0 {
				break
			}
		}
		g.tree.Lock(node)
		if !exact && total > avail()-totalOff && !force {
			g.tree.Unlock(node)
			g.full = true
			break
		}
		if force && float64(extend) > avail() {
			// Its prefix, locked now, was counted evictable: it
			// does not fit after all, and waits for room (the
			// KV its prefill worker holds until sent, under
			// disaggregation).
			g.tree.Unlock(node)
			g.full = true
			break
		}
		if extend > remChunk && remChunk <= 0 {
			g.tree.Unlock(node)
			break
		}
		var load int64
		if w.off != nil {
			load = w.off.o.admitHost(w, r, prefix)
			extend -= load
		}
		if extend <= remChunk {
			g.admit = append(g.admit, sgAdmit{r, prefix, node, extend, load})
			charge(extend, maxNew)
		} else {
			g.admit = append(g.admit, sgAdmit{r, prefix, node, remChunk, load})
			g.chunked = r
			charge(remChunk, 0)
		}
		r.sg.taken = true
		if avail()-totalOff <= 0 || avail()-curOff <= 0 {
			g.full = true
			break
		}
		if remInput <= 0 || remChunk <= 0 {
			break
		}
	}
	if len(g.admit) == 0 {
		return false
	}
	w.waiting.filter(func(r *reqState) bool { return !r.sg.taken })

	for _, a := range g.admit {
		r := a.r
		if r.sg.taken {
			r.sg.taken = false
			r.sg.node, r.sg.held = a.node, a.prefix
			r.computed = a.prefix + a.load
			if !r.scheduled {
				r.cached = a.prefix + a.load
			}
			w.running = append(w.running, r)
		}
		if !g.tree.Alloc(a.n) {
			panic("replay: sglang: prefill allocation failed after admission")
		}
		w.add(r, a.n, now)
		g.pending = append(g.pending, r)
	}
	if g.mixed {
		for _, r := range running {
			if g.tree.Alloc(1) {
				w.add(r, 1, now)
			}
		}
	}
	return true
}

// orderQueue puts the waiting queue in policy order into g.order, and
// sorts the queue itself that way (SGLang sorts its waiting_queue in
// place).
func (g *sglang) orderQueue(w *worker) {
	g.order = g.order[:0]
	w.waiting.each(func(r *reqState) { g.order = append(g.order, r) })
	if !g.lpm || !g.radix || len(g.order) > sgLPMMaxQueue {
		return
	}
	// In-batch prefix caching: of the waiting requests that share an
	// uncached prefix, the first goes on, the others wait for it to be
	// cached (SchedulePolicy._compute_prefix_matches).
	inBatch := kvcache.NewRadix(1 << 62)
	for _, r := range g.order {
		k, n := g.keys(r), r.numTokens()-1
		r.sg.prefix, _ = g.tree.Match(k, n)
		if r.sg.prefix > sgInBatchCheck {
			continue
		}
		if m, _ := inBatch.Match(k, n); m >= sgInBatchDeprioritize {
			r.sg.prefix = -1
			continue
		}
		inBatch.Alloc(n)
		inBatch.Insert(k, 0, n)
	}
	slices.SortStableFunc(g.order, func(a, b *reqState) int {
		return cmp.Compare(b.sg.prefix, a.sg.prefix) // longest first
	})
	w.waiting.filter(func(*reqState) bool { return false })
	for _, r := range g.order {
		w.waiting.pushBack(r)
	}
}

// steady reports whether the step just built is a steady decode step of
// w (see worker.steady): every running request decodes, nothing was
// retracted, no request is chunked, and the next build will admit nothing
// (the queue is empty, or the batch is full, which only a request leaving
// clears). Until a request completes or arrives, the next steps are the
// same decode one token further, each one as decodeAlloc builds it.
func (g *sglang) steady(w *worker) bool {
	return !g.extend && g.chunked == nil && !g.shrunk && len(g.doneCarried) == 0 && w.preempted == 0 && len(w.running) > 0 &&
		len(w.sched) == len(w.running) && (g.full || w.waiting.Len() == 0)
}

// decodeAlloc is a decode step's allocation for a batch of n requests
// when the pool has their n tokens free: new_token_ratio decays and each
// takes a slot. It reports false, changing nothing, when the pool lacks
// them (decode must retract; fast-forward's inner loop must first let
// decode evict).
func (g *sglang) decodeAlloc(n int64) bool {
	if g.tree.Free() < n {
		return false
	}
	g.ratio = max(g.ratio-g.decay, g.minRatio)
	g.tree.Alloc(n)
	return true
}

// decodeStep implements scheduler: SGLang's steps are all built by build.
func (g *sglang) decodeStep(*worker, trace.Time) bool { return false }

// steadyStart and steadyAlloc implement scheduler: every steady step
// takes a pool slot per request (decodeAlloc).
func (g *sglang) steadyStart(*worker) int64 { return 0 }

func (g *sglang) steadyAlloc(w *worker, j int64) (next int64, ok bool) {
	return j + 1, g.decodeAlloc(int64(len(w.running)))
}

// stepEnded implements scheduler: what the step extended goes into the
// tree.
func (g *sglang) stepEnded(*worker) { g.flush() }

// freeBlocks implements scheduler: free token slots, in whole blocks.
func (g *sglang) freeBlocks() int64 { return g.tree.Free() / g.bs }

// evictions implements scheduler: tokens evicted from the tree, in
// blocks, rounded up.
func (g *sglang) evictions() int64 { return ceilDiv(g.tree.Evictions, g.bs) }

// describe implements scheduler: the KV is the radix cache.
func (g *sglang) describe(st *Step) { st.KV, st.Radix = g.empty, g.tree }

// decode builds a decode step of the running batch, retracting first if
// its tokens do not fit (update_running_batch).
func (g *sglang) decode(w *worker, now trace.Time) {
	batch := g.running(w)
	if len(batch) == 0 {
		return
	}
	if g.shrunk {
		g.full, g.shrunk = false, false
	}
	need := int64(len(batch))
	if g.tree.Free() < need {
		g.tree.Evict(need) // check_decode_mem evicts the batch's whole need
	}
	allocated := g.decodeAlloc(need)
	if !allocated {
		batch = g.retract(w, batch)
	}
	for _, r := range batch {
		if r.computed != r.numTokens()-1 {
			panic("replay: sglang: a running request is not ready to decode")
		}
		if !allocated && !g.tree.Alloc(1) {
			continue // no memory even for the last request: it waits
		}
		w.add(r, 1, now)
	}
}

// retract takes requests out of the decode batch until the rest have
// room for retract_decode_steps steps, the fewest output tokens first and
// among those the longest prompt (ScheduleBatch.retract_decode), and
// returns the batch that stays.
func (g *sglang) retract(w *worker, batch []*reqState) []*reqState {
	// sorted_indices.sort(key=(len(output_ids), -len(origin_input_ids)),
	// reverse=True), popped from the end.
	slices.SortStableFunc(batch, func(a, b *reqState) int {
		return cmp.Or(cmp.Compare(b.out, a.out), cmp.Compare(a.prompt, b.prompt))
	})
	for first := true; first || g.tree.Free() < int64(len(batch))*sgRetractDecodeSteps; first = false {
		if len(batch) == 1 {
			break
		}
		r := batch[len(batch)-1]
		batch = batch[:len(batch)-1]
		g.release(r, false)
		r.computed = 0
		r.preemptions++
		w.preempted++
		w.running = slices.DeleteFunc(w.running, func(x *reqState) bool { return x == r })
		w.waiting.pushBack(r)
		if residual := int64(len(batch))*sgRetractDecodeSteps - g.tree.Free(); residual > 0 {
			g.tree.Evict(residual)
		}
	}
	var out, maxOut int64
	for _, r := range batch {
		out += r.out
		maxOut += r.maxOut
	}
	g.ratio = min(1, float64(out+sgRetractDecodeSteps*int64(len(batch)))/float64(maxOut))
	g.full, g.shrunk = false, false
	return batch
}

// filter keeps, in order, the queued requests for which keep is true.
func (d *deque) filter(keep func(*reqState) bool) {
	n := d.size
	kept := 0
	for i := range n {
		r := d.buf[(d.head+i)%len(d.buf)]
		if keep(r) {
			d.buf[(d.head+kept)%len(d.buf)] = r
			kept++
		}
	}
	for i := kept; i < n; i++ {
		d.buf[(d.head+i)%len(d.buf)] = nil
	}
	d.size = kept
}

// An sgState is a request's entry of add_one_req_ignore_eos's req_states:
// the tokens it has left to decode and the tokens it holds.
type sgState struct{ left, occ float64 }

// stateOf is r's entry, and whether it has tokens left (SGLang lists only
// those): max_new_tokens − its output, with new_token_ratio in place of 1
// for a request without ignore_eos.
func (g *sglang) stateOf(r *reqState) (sgState, bool) {
	ratio := 1.0
	if !g.ignoreEOS {
		ratio = g.ratio
	}
	left := float64(r.maxOut)*ratio - float64(r.out)
	return sgState{left, float64(r.prompt + r.out)}, left > 0
}

// fitsToEnd is add_one_req_ignore_eos's check that r may be admitted:
// with the running requests and those admitted so far sorted by tokens
// left, the pool (curRem, less r's prompt) must hold every request still
// running at each point where one finishes, each grown by the steps until
// then, counting the tokens of those already finished as freed. The
// entries are listed once per prefill (r, the running batch, the admitted
// ones, then sorted) and later candidates inserted before the first entry
// with at least as many tokens left (or, as SGLang's loop leaves its
// index, before the last one).
func (g *sglang) fitsToEnd(r *reqState, running []*reqState, curRem float64) bool {
	st, ok := g.stateOf(r)
	if !g.statesBuilt {
		if ok {
			g.states = append(g.states, st)
		}
		for _, x := range running {
			if s, ok := g.stateOf(x); ok {
				g.states = append(g.states, s)
			}
		}
		for _, a := range g.admit {
			if s, ok := g.stateOf(a.r); ok {
				g.states = append(g.states, s)
			}
		}
		slices.SortStableFunc(g.states, func(a, b sgState) int {
			return cmp.Compare(a.left, b.left)
		})
		g.statesBuilt = true
	} else if ok {
		i := 0
		for i = range g.states {
			if st.left <= g.states[i].left {
				break
			}
		}
		g.states = slices.Insert(g.states, i, st)
	}
	cur := curRem - float64(r.prompt)
	var freed float64
	n := len(g.states)
	for i, s := range g.states {
		steps := s.left
		if i+1 < n {
			steps = g.states[i+1].left
		}
		if cur+freed-steps*float64(n-i) <= 0 {
			return false
		}
		freed += s.occ
	}
	return true
}
