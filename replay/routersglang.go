package replay

import "math/rand/v2"

// sglangCacheAware is SGLang router's cache_aware policy
// (sgl-router/src/policies/cache_aware.rs). Loads are the router's own
// counts of outstanding requests. When the cluster is imbalanced (the
// most loaded worker has more than balance_abs_threshold requests above
// the least loaded AND more than balance_rel_threshold times as many) the
// request goes to the least loaded worker; otherwise to the worker whose
// tree holds the longest prefix of it, if that prefix is more than
// cache_threshold of the request, else to the worker with the smallest
// tree. Either way the request's blocks are inserted into the chosen
// worker's tree: the tree is what the router sent, never what the worker
// kept. Its score is the match rate (matched / request blocks) of the
// worker it chose.
type sglangCacheAware struct {
	cfg   RouterConfig
	tree  *prefixIndex
	match []int
}

func newSGLangCacheAware(cfg *Config, slots int, _ int64, _ *rand.Rand) Router {
	return &sglangCacheAware{cfg: cfg.RouterConfig, tree: newPrefixIndex(slots, cfg.RouterConfig.MaxTreeTokens), match: make([]int, slots)}
}

func (r *sglangCacheAware) resetWorker(w int) { r.tree.dropWorker(w) }

// Route picks as the policy does.
//
// Note: the loops over the workers keep the slices they read, and the
// best so far, in locals: with the counts read through r and the best
// worker's count read again at each, they were some 25 instructions a
// worker, 11 million of BenchmarkReplayMooncakeRouters/
// sglang_cache_aware's (16 workers, three loops). (One loop for the
// loads and the match instead of two cost 0.2 million more.)
func (r *sglangCacheAware) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	out := c.Outstanding()
	minW := ready[0]
	minL := out[minW].Requests
	maxL := minL
	for _, w := range ready[1:] {
		l := out[w].Requests
		if l < minL {
			minW, minL = w, l
		}
		if l > maxL {
			maxL = l
		}
	}
	match := r.match
	r.tree.matchAll(q.HashIDs, match)
	choose := func(w int) int {
		if len(q.HashIDs) > 0 {
			q.Score = float64(r.match[w]) / float64(len(q.HashIDs))
		}
		q.Scored = true
		r.tree.insertHeld(w, q.HashIDs, q.BlockSize, r.match[w])
		return w
	}
	if maxL-minL > r.cfg.BalanceAbsThreshold && float64(maxL) > float64(minL)*r.cfg.BalanceRelThreshold {
		return choose(minW)
	}
	best := ready[0]
	bestM := match[best]
	for _, w := range ready[1:] {
		if m := match[w]; m > bestM {
			best, bestM = w, m
		}
	}
	if len(q.HashIDs) > 0 && float64(bestM)/float64(len(q.HashIDs)) > r.cfg.CacheThreshold {
		return choose(best)
	}
	count := r.tree.count
	smallest := ready[0]
	least := count[smallest]
	for _, w := range ready[1:] {
		if n := count[w]; n < least {
			smallest, least = w, n
		}
	}
	return choose(smallest)
}
