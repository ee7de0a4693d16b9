package replay

import "math/rand/v2"

// llmD is llm-d's inference scheduler (the Gateway API inference
// extension's endpoint picker) with its default profile: the weighted sum
// of three scorers, each in [0, 1], and the highest total wins, ties
// broken at random (max-score picker):
//   - prefix-cache-scorer: the fraction of the request's blocks, from the
//     start, that the approximate index says the server holds (the index
//     records the servers it sent requests to, least recently used blocks
//     evicted beyond lru_capacity_tokens per server);
//   - queue-scorer: (max − q)/(max − min) of the servers' waiting queues,
//     1 for all when they are equal;
//   - kv-cache-utilization-scorer: 1 − the server's KV usage.
//
// Queue and KV usage are scraped metrics (Cluster.Load), as stale as the
// view. Its score is the chosen server's weighted total.
type llmD struct {
	wp, wq, wk float64
	index      *prefixIndex
	rng        *rand.Rand
	match      []int
	ties       []int
}

func newLLMD(cfg *Config, slots int, _ int64, rng *rand.Rand) Router {
	rc := cfg.RouterConfig
	return &llmD{
		wp: *rc.PrefixWeight, wq: *rc.QueueWeight, wk: *rc.KVUsageWeight,
		index: newPrefixIndex(slots, rc.LRUCapacityTokens), rng: rng,
		match: make([]int, slots),
	}
}

func (r *llmD) resetWorker(w int) { r.index.dropWorker(w) }

// Route scores the ready workers and collects those tied for the best in
// the loop that scores them (pickTie picks one).
//
// Note: the loads come in one call (Cluster.Loads), and the totals are
// not kept: a call and a copy of the load per worker, a slice of totals
// and a second pass over them (pickMax's) were some 90 of the 185
// instructions a worker cost (BenchmarkReplayMooncakeRouters/llm_d, 16
// workers).
func (r *llmD) Route(q *Routed, c Cluster) int {
	ready, loads := c.Ready(), c.Loads()
	r.index.matchAll(q.HashIDs, r.match)
	minQ := loads[ready[0]].Waiting
	maxQ := minQ
	for _, w := range ready[1:] {
		l := loads[w].Waiting
		minQ = min(minQ, l)
		maxQ = max(maxQ, l)
	}
	// In locals: the loop stores to ties, which the compiler cannot
	// tell from r's fields.
	wp, wq, wk, match := r.wp, r.wq, r.wk, r.match
	ids, spread, span := float64(len(q.HashIDs)), maxQ > minQ, float64(maxQ-minQ)
	ties, best := r.ties[:0], 0.0
	for _, w := range ready {
		l := &loads[w]
		var prefix float64
		if len(q.HashIDs) > 0 {
			prefix = float64(match[w]) / ids
		}
		queue := 1.0
		if spread {
			queue = float64(maxQ-l.Waiting) / span
		}
		total := wp*prefix + wq*queue + wk*(1-l.KVUsage())
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
	r.index.insert(w, q.HashIDs, q.BlockSize)
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
