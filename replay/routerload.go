package replay

import "math/rand/v2"

// leastRequests sends each request to the worker with the fewest
// outstanding requests (the router's own count, as Envoy's and the
// gateways' least-request balancers keep it); ties go to the first such
// worker after the last one chosen, so an idle cluster is served in turn.
// Its score is the chosen worker's outstanding requests.
type leastRequests struct{ last int }

// Note: leastAfter's loop written out, without its load function: a
// closure call per worker, and a division per position, were 4.6 M
// instructions of the autoscaled Mooncake replay (BenchmarkReplayMooncakeRouters/autoscale).
func (r *leastRequests) Route(q *Routed, c Cluster) int {
	ready, out := c.Ready(), c.Outstanding()
	n := len(ready)
	best, bestL := -1, 0
	p := (r.last + 1) % n // r.last may be past the end once ready shrank
	for range n {
		if l := out[ready[p]].Requests; best < 0 || l < bestL {
			best, bestL = p, l
		}
		if p++; p == n {
			p = 0
		}
	}
	r.last = best
	q.Score, q.Scored = float64(bestL), true
	return ready[best]
}

// leastTokens sends each request to the worker with the fewest
// outstanding tokens (prompt plus requested output of the requests sent
// there and not completed); ties as leastRequests. Its score is the
// chosen worker's outstanding tokens.
type leastTokens struct{ last int }

func (r *leastTokens) Route(q *Routed, c Cluster) int {
	out := c.Outstanding()
	w := leastAfter(c.Ready(), &r.last, func(w int) int64 { return out[w].Tokens })
	q.Score, q.Scored = float64(out[w].Tokens), true
	return w
}

// leastAfter returns the worker of ready with the least load, ties to the
// first after position *last, and sets *last to its position.
func leastAfter(ready []int, last *int, load func(int) int64) int {
	n := len(ready)
	best, bestL := -1, int64(0)
	for k := 1; k <= n; k++ {
		p := (*last + k) % n
		if l := load(ready[p]); best < 0 || l < bestL {
			best, bestL = p, l
		}
	}
	*last = best
	return ready[best]
}

// powerOfTwo samples two distinct workers from the seeded RNG and sends
// the request to the one with fewer outstanding requests, the first
// sampled on a tie (sgl-router's and Envoy's power of two choices). Its
// score is the chosen worker's outstanding requests.
type powerOfTwo struct{ rng *rand.Rand }

func (r *powerOfTwo) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	n := len(ready)
	a := r.rng.IntN(n)
	w := ready[a]
	if n > 1 {
		b := r.rng.IntN(n - 1)
		if b >= a {
			b++
		}
		if out := c.Outstanding(); out[ready[b]].Requests < out[w].Requests {
			w = ready[b]
		}
	}
	q.Score, q.Scored = float64(c.Outstanding()[w].Requests), true
	return w
}
