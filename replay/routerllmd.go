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
	total      []float64
	ties       []int
	// loads holds each ready server's Cluster.Load for one Route:
	// asked once, not once per scorer (each a call through the
	// Cluster and, with an oracle view, a read of the worker's state).
	loads []WorkerLoad
}

func newLLMD(cfg *Config, slots int, _ int64, rng *rand.Rand) Router {
	rc := cfg.RouterConfig
	return &llmD{
		wp: *rc.PrefixWeight, wq: *rc.QueueWeight, wk: *rc.KVUsageWeight,
		index: newPrefixIndex(slots, rc.LRUCapacityTokens), rng: rng,
		match: make([]int, slots), total: make([]float64, slots), loads: make([]WorkerLoad, slots),
	}
}

func (r *llmD) resetWorker(w int) { r.index.dropWorker(w) }

func (r *llmD) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	r.index.matchAll(q.HashIDs, r.match)
	minQ, maxQ := 0, 0
	for k, w := range ready {
		r.loads[w] = c.Load(w)
		l := r.loads[w].Waiting
		if k == 0 || l < minQ {
			minQ = l
		}
		if k == 0 || l > maxQ {
			maxQ = l
		}
	}
	for _, w := range ready {
		l := r.loads[w]
		var prefix float64
		if len(q.HashIDs) > 0 {
			prefix = float64(r.match[w]) / float64(len(q.HashIDs))
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-l.Waiting) / float64(maxQ-minQ)
		}
		r.total[w] = r.wp*prefix + r.wq*queue + r.wk*(1-l.KVUsage())
	}
	best := pickMax(r.total, ready, r.rng, &r.ties)
	q.Score, q.Scored = r.total[best], true
	r.index.insert(best, q.HashIDs, q.BlockSize)
	return best
}

// pickMax returns the index among ready of the largest of v, a random
// one of those tied.
func pickMax(v []float64, ready []int, rng *rand.Rand, ties *[]int) int {
	*ties = (*ties)[:0]
	for _, i := range ready {
		x := v[i]
		switch {
		case len(*ties) == 0 || x > v[(*ties)[0]]:
			*ties = append((*ties)[:0], i)
		case x == v[(*ties)[0]]:
			*ties = append(*ties, i)
		}
	}
	if len(*ties) == 1 {
		return (*ties)[0]
	}
	return (*ties)[rng.IntN(len(*ties))]
}
