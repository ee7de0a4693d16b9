package replay

import "math/rand/v2"

// leastRequests sends each request to the worker with the fewest
// outstanding requests (the router's own count, as Envoy's and the
// gateways' least-request balancers keep it); ties go to the first such
// worker after the last one chosen, so an idle cluster is served in turn.
// Its score is the chosen worker's outstanding requests.
type leastRequests struct{ last int }

func (r *leastRequests) Route(q *Routed, c Cluster) int {
	n := c.NumWorkers()
	best, bestN := -1, 0
	for k := 1; k <= n; k++ {
		w := (r.last + k) % n
		if o := c.Outstanding(w).Requests; best < 0 || o < bestN {
			best, bestN = w, o
		}
	}
	r.last = best
	q.Score, q.Scored = float64(bestN), true
	return best
}

// leastTokens sends each request to the worker with the fewest
// outstanding tokens (prompt plus requested output of the requests sent
// there and not completed); ties as leastRequests. Its score is the
// chosen worker's outstanding tokens.
type leastTokens struct{ last int }

func (r *leastTokens) Route(q *Routed, c Cluster) int {
	n := c.NumWorkers()
	best, bestN := -1, int64(0)
	for k := 1; k <= n; k++ {
		w := (r.last + k) % n
		if o := c.Outstanding(w).Tokens; best < 0 || o < bestN {
			best, bestN = w, o
		}
	}
	r.last = best
	q.Score, q.Scored = float64(bestN), true
	return best
}

// powerOfTwo samples two distinct workers from the seeded RNG and sends
// the request to the one with fewer outstanding requests, the first
// sampled on a tie (sgl-router's and Envoy's power of two choices). Its
// score is the chosen worker's outstanding requests.
type powerOfTwo struct{ rng *rand.Rand }

func (r *powerOfTwo) Route(q *Routed, c Cluster) int {
	n := c.NumWorkers()
	a := r.rng.IntN(n)
	if n == 1 {
		q.Score, q.Scored = float64(c.Outstanding(a).Requests), true
		return a
	}
	b := r.rng.IntN(n - 1)
	if b >= a {
		b++
	}
	oa, ob := c.Outstanding(a).Requests, c.Outstanding(b).Requests
	if ob < oa {
		a, oa = b, ob
	}
	q.Score, q.Scored = float64(oa), true
	return a
}
