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
	ties  []int
}

func newMaxPrefix(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	return &maxPrefix{
		index: newPrefixIndex(slots, kvTokens), rng: rng,
		match: make([]int, slots),
	}
}

func (r *maxPrefix) resetWorker(w int) { r.index.dropWorker(w) }

func (r *maxPrefix) kvStored(w int, ids []int64, blockSize int64, _ int) {
	r.index.insert(w, ids, blockSize)
}

// Route picks among the workers that hold the most of the prefix, ties
// at random (pickTie), as among the largest fractions.
//
// Note: the fractions share their denominator, so two are equal exactly
// when the block counts are (distinct integers below 2⁵³ divided by one
// length differ): the counts are compared, in one loop, and only the
// chosen worker's fraction is worked out, where every worker's was
// written to a slice that a second loop (pickMax) went over again (some 30 instructions
// a worker, 16 a request, on BenchmarkReplayMooncakeRouters/max_prefix).
func (r *maxPrefix) Route(q *Routed, c Cluster) int {
	r.index.matchAll(q.HashIDs, r.match)
	ready, match := c.Ready(), r.match
	ties, best := r.ties[:0], 0
	for _, w := range ready {
		switch m := match[w]; {
		case len(ties) == 0 || m > best:
			ties, best = append(ties[:0], w), m
		case m == best:
			ties = append(ties, w)
		}
	}
	r.ties = ties
	w := pickTie(ties, r.rng) // all zero: every worker tied, a random one
	q.Score, q.Scored = 0, true
	if len(q.HashIDs) > 0 {
		q.Score = float64(best) / float64(len(q.HashIDs))
	}
	return w
}
