package replay

import "math/rand/v2"

// maxPrefix is Opal's MaxPrefix router as it was meant to work (Opal's
// own never matches: its scorer looks raw digests up in a set of Python
// hashes, so every decision falls to its random choice; see
// ../shared/docs/opal-notes.md): each worker's score is the fraction of
// the request's prefix blocks, from the start, that the worker's KV
// events say it holds; the highest wins, ties at random, and a request no
// worker holds any of goes to a random worker. Opal's workers coalesce
// their events over 30 s (set view_interval_s to 30 to see as Opal saw).
// The index mirrors each worker's KV capacity, least recently used
// blocks evicted first. Its score is the chosen worker's fraction.
type maxPrefix struct {
	index *prefixIndex
	rng   *rand.Rand
	match []int
	frac  []float64
	ties  []int
}

func newMaxPrefix(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	return &maxPrefix{
		index: newPrefixIndex(slots, kvTokens), rng: rng,
		match: make([]int, slots), frac: make([]float64, slots),
	}
}

func (r *maxPrefix) resetWorker(w int) { r.index.dropWorker(w) }

func (r *maxPrefix) kvStored(w int, ids []int64, blockSize int64) {
	r.index.insert(w, ids, blockSize)
}

func (r *maxPrefix) Route(q *Routed, c Cluster) int {
	r.index.matchAll(q.HashIDs, r.match)
	ready := c.Ready()
	for _, w := range ready {
		r.frac[w] = 0
		if len(q.HashIDs) > 0 {
			r.frac[w] = float64(r.match[w]) / float64(len(q.HashIDs))
		}
	}
	best := pickMax(r.frac, ready, r.rng, &r.ties) // all zero: every worker tied, a random one
	q.Score, q.Scored = r.frac[best], true
	return best
}
