package replay

import "math/rand/v2"

// dynamoKV is NVIDIA Dynamo's KV router: for each worker a cost
//
//	overlap_score_weight · prefill blocks + active blocks
//
// where prefill blocks are the prompt's tokens not covered by the
// worker's cached prefix, in the engine's blocks, and active blocks are
// the blocks of the requests the router has outstanding there plus this
// request's (its own count, Outstanding.Blocks); the cheapest worker
// wins, ties at random (router temperature 0). The cached prefix comes
// from the workers' KV events (a stored event when a prompt is computed),
// delivered on the view's ticks, into an index that mirrors each worker's
// KV capacity, least recently used blocks evicted first.
//
// Note: the events carry no removals (the engine's caches do not report
// evictions yet): the mirror evicts by its own LRU at the worker's
// capacity. Its score is the chosen worker's cost.
type dynamoKV struct {
	weight float64
	bs     int64 // engine tokens per block
	index  *prefixIndex
	rng    *rand.Rand
	match  []int
	ties   []int
}

func newDynamoKV(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	return &dynamoKV{
		weight: *cfg.RouterConfig.OverlapScoreWeight, bs: cfg.Scheduler.BlockSize,
		index: newPrefixIndex(slots, kvTokens), rng: rng,
		match: make([]int, slots),
	}
}

func (r *dynamoKV) resetWorker(w int) { r.index.dropWorker(w) }

func (r *dynamoKV) kvStored(w int, ids []int64, blockSize int64) {
	r.index.insert(w, ids, blockSize)
}

// Route picks the least cost, ties at random (pickTie), in the loop that
// prices the workers: the costs are not kept for a second pass (pickMax's,
// some 30 instructions a worker on BenchmarkReplayMooncakeRouters/dynamo_kv).
func (r *dynamoKV) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	r.index.matchAll(q.HashIDs, r.match)
	own := ceilDiv(q.Prompt+q.Out, r.bs)
	out, match := c.Outstanding(), r.match
	prompt, bs, weight := q.Prompt, q.BlockSize, r.weight
	ties, best := r.ties[:0], 0.0
	for _, w := range ready {
		overlap := min(int64(match[w])*bs, prompt)
		prefill := float64(prompt-overlap) / float64(r.bs)
		switch cost := -(weight*prefill + float64(out[w].Blocks+own)); {
		case len(ties) == 0 || cost > best:
			ties, best = append(ties[:0], w), cost
		case cost == best:
			ties = append(ties, w)
		}
	}
	r.ties = ties
	q.Score, q.Scored = -best, true
	return pickTie(ties, r.rng)
}
