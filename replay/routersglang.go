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

func (r *sglangCacheAware) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	out := c.Outstanding()
	minW, maxL, minL := ready[0], 0, 0
	for k, w := range ready {
		l := out[w].Requests
		if k == 0 || l < minL {
			minW, minL = w, l
		}
		if k == 0 || l > maxL {
			maxL = l
		}
	}
	r.tree.matchAll(q.HashIDs, r.match)
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
	for _, w := range ready[1:] {
		if r.match[w] > r.match[best] {
			best = w
		}
	}
	if len(q.HashIDs) > 0 && float64(r.match[best])/float64(len(q.HashIDs)) > r.cfg.CacheThreshold {
		return choose(best)
	}
	smallest := ready[0]
	for _, w := range ready[1:] {
		if r.tree.count[w] < r.tree.count[smallest] {
			smallest = w
		}
	}
	return choose(smallest)
}
