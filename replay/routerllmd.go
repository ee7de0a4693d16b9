package replay

import (
	"math/rand/v2"
	"slices"
)

// llmD is llm-d's inference scheduler (the Gateway API inference
// extension's endpoint picker) with its default profile: the weighted sum
// of three scorers, each in [0, 1], and the highest total wins, ties
// broken at random (max-score picker):
//   - prefix-cache-scorer: the fraction of the prompt's hashed blocks
//     that the approximate index says the server holds (below);
//   - queue-scorer: (max − q)/(max − min) of the servers' waiting queues,
//     1 for all when they are equal;
//   - kv-cache-utilization-scorer: 1 − the server's KV usage.
//
// Queue and KV usage are scraped metrics (Cluster.Load), as stale as the
// view. Its score is the chosen server's weighted total.
//
// The prefix-cache-scorer, as the extension's code has it (plugins
// multi/prefix and approximateprefix, autoTune on):
//   - it hashes the prompt's first blocks of prefix_block_tokens (the
//     server's KV block, autoTune) up to max_prefix_blocks of them (256:
//     4,096 tokens with vLLM's 16-token blocks), whole blocks only, each
//     hash chained to the one before;
//   - a server's match is how many of the leading hashes that some
//     server holds it holds itself (matchLongestPrefix walks the hashes
//     until one no server holds, adding one for every server that holds
//     each), not the leading run it holds alone;
//   - the server picked gets all the prompt's hashes, in prompt order,
//     into its LRU of lru_capacity_tokens (its num_gpu_blocks, autoTune),
//     so that within one request the first block is the least recently
//     used and goes first.
//
// Note: a hash block here is known by the trace's block it ends in (equal
// block ids are equal prefixes; the index is at the trace's granularity,
// prefixIndex): a trace block stands for the hash blocks that end in it,
// and is held, inserted and evicted with them as one (on the Mooncake
// trace, 512-token blocks: 32 hash blocks of 16 tokens each, the
// first 8 of a prompt's ids hashed at most).
type llmD struct {
	wp, wq, wk float64
	index      *prefixIndex
	rng        *rand.Rand
	hashTokens int64 // tokens per hash block
	maxBlocks  int64 // hash blocks per prompt, at most
	match      []int
	prefix     []float64 // per slot: the prefix score of the request routed
	ties       []int
	// Scratch: the trace blocks a request's hash blocks end in, in
	// prompt order (reversed in place for the insertion that ends
	// Route), with how many end in each.
	ids, weights []int64
}

func newLLMD(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	rc := cfg.RouterConfig
	if rc.PrefixScorer == LLMDPrecise {
		return newLLMDPrecise(cfg, slots, kvTokens, rng)
	}
	l := newLLMDScorer(rc, slots, rc.LRUCapacityTokens, rng)
	l.maxBlocks = rc.MaxPrefixBlocks
	return l
}

// newLLMDScorer returns an llmD with rc's weights and key block, and a
// prefix index of capTokens a worker (0: unbounded): the approximate
// scorer's router, or the precise scorer's weights, picker and mirror.
func newLLMDScorer(rc RouterConfig, slots int, capTokens int64, rng *rand.Rand) *llmD {
	return &llmD{
		wp: *rc.PrefixWeight, wq: *rc.QueueWeight, wk: *rc.KVUsageWeight,
		index: newPrefixIndex(slots, capTokens), rng: rng,
		hashTokens: max(rc.PrefixBlockTokens, 1),
		match:      make([]int, slots), prefix: make([]float64, slots),
	}
}

func (r *llmD) resetWorker(w int) { r.index.dropWorker(w) }

// hashed sets r.ids and r.weights to the trace blocks that q's hashed
// blocks end in, and how many end in each, and returns how many blocks
// it hashes (the scorer's total).
func (r *llmD) hashed(q *Routed) int64 {
	g, tb := r.hashTokens, q.BlockSize
	n := min(q.Prompt/g, r.maxBlocks)
	r.ids, r.weights = r.ids[:0], r.weights[:0]
	if tb <= 0 {
		return n
	}
	if tb%g != 0 {
		r.hashedAny(q.HashIDs, g, tb, n)
		return n
	}
	// Trace block j holds hash blocks j·per … (j+1)·per − 1 whole: the
	// common case, without hashedAny's two divisions an id. (What hashed
	// costs in a replay is mostly the first load of q's ids, cold since
	// the trace was read: 1.7 ms of the 10 ms llm_d's routing takes on
	// BenchmarkReplayMooncakeRouters/llm_d, pprof, either way.)
	per := tb / g
	k := min(int64(len(q.HashIDs)), (n+per-1)/per)
	r.ids = append(r.ids, q.HashIDs[:k]...)
	for j := range k {
		r.weights = append(r.weights, min(per, n-j*per))
	}
	return n
}

// hashedAny is hashed for any hash and trace blocks: hash block k (tokens
// kg … (k+1)g − 1) ends in trace block ⌊((k+1)g − 1)/tb⌋, so those ending
// in trace block j are the blocks whose end, (k+1)g, is in
// (j·tb, (j+1)·tb]; n of them are hashed.
func (r *llmD) hashedAny(ids []int64, g, tb, n int64) {
	for j, id := range ids {
		lo, hi := min(int64(j)*tb/g, n), min((int64(j)+1)*tb/g, n)
		if lo == n {
			break
		}
		if hi > lo {
			r.ids = append(r.ids, id)
			r.weights = append(r.weights, hi-lo)
		}
	}
}

// Route scores the ready workers (pick) on the fraction of the prompt's
// hashed blocks the index says each holds, and inserts the prompt's
// blocks for the one chosen.
func (r *llmD) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	total := r.hashed(q)
	r.index.matchShared(r.ids, r.weights, r.match)
	prefix, match := r.prefix, r.match[:len(r.prefix)]
	if total > 0 {
		blocks := float64(total)
		for _, w := range ready {
			prefix[w] = float64(match[w]) / blocks
		}
	} else {
		for _, w := range ready {
			prefix[w] = 0
		}
	}
	w := r.pick(q, ready, c.Loads())
	// The index takes an insertion's last id as its least recently used
	// (a radix tree's leaves go first); llm-d's LRU, its first. (r.ids
	// is a copy of q's ids: reversing it leaves the trace as it was.)
	slices.Reverse(r.ids)
	r.index.insert(w, r.ids, q.BlockSize)
	return w
}

// pick weighs the ready workers' prefix scores (r.prefix, by worker) with
// their queue and KV-usage scores, collects those tied for the best total
// in the loop that scores them (pickTie picks one), and sets q's score to
// the chosen worker's total.
//
// Note: the loads come in one call (Cluster.Loads), and the totals are
// not kept: a call and a copy of the load per worker, a slice of totals
// and a second pass over them (pickMax's) were some 90 of the 185
// instructions a worker cost (BenchmarkReplayMooncakeRouters/llm_d, 16
// workers).
func (r *llmD) pick(q *Routed, ready []int, loads []WorkerLoad) int {
	minQ := loads[ready[0]].Waiting
	maxQ := minQ
	for _, w := range ready[1:] {
		l := loads[w].Waiting
		minQ = min(minQ, l)
		maxQ = max(maxQ, l)
	}
	// In locals: the loop stores to ties, which the compiler cannot
	// tell from r's fields.
	wp, wq, wk, prefix := r.wp, r.wq, r.wk, r.prefix
	spread, span := maxQ > minQ, float64(maxQ-minQ)
	ties, best := r.ties[:0], 0.0
	for _, w := range ready {
		l := &loads[w]
		queue := 1.0
		if spread {
			queue = float64(maxQ-l.Waiting) / span
		}
		total := wp*prefix[w] + wq*queue + wk*(1-l.KVUsage())
		switch {
		case len(ties) == 0 || total > best:
			ties, best = append(ties[:0], w), total
		case total == best:
			ties = append(ties, w)
		}
	}
	r.ties = ties
	w := pickTie(ties, r.rng)
	q.Score, q.Scored = best, true
	return w
}

// pickTie returns one of the workers tied for the best score, at random
// when there are several: the ready workers whose score equals the
// largest, in order, as the routers collect them while scoring (a later
// worker with a larger score starts the ties again, an equal one joins
// them; a NaN joins none, and one first stays alone).
func pickTie(ties []int, rng *rand.Rand) int {
	if len(ties) == 1 {
		return ties[0]
	}
	return ties[rng.IntN(len(ties))]
}
