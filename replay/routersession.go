package replay

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
)

// sessionAffinity keeps each session on one worker: consistent hashing
// of the session id with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
// as Envoy's ring hash with hash_balance_factor and HAProxy's
// hash-balance-factor do it). A request goes to its session's home
// worker unless that worker has ⌈factor·(outstanding + 1)/workers⌉ or
// more outstanding requests; then it spills to the next worker that has
// fewer, in ring order. A request without a session id is a session of
// its own. A fleet that changes size (autoscaling) rehashes every
// session, as a ring of the ready workers would move some. Its score is how many workers it spilled past (0: home).
type sessionAffinity struct {
	factor float64
}

func newSessionAffinity(cfg *Config, _ int, _ int64, _ *rand.Rand) Router {
	return &sessionAffinity{factor: cfg.RouterConfig.HashBalanceFactor}
}

func (r *sessionAffinity) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	n := len(ready)
	key := q.Session
	if key == "" {
		key = "#" + strconv.Itoa(q.Index)
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	home := int(h.Sum64() % uint64(n))
	out := c.Outstanding()
	total := 0
	for _, w := range ready {
		total += out[w].Requests
	}
	bound := int(math.Ceil(r.factor * float64(total+1) / float64(n)))
	for k := range n {
		w := ready[(home+k)%n]
		if out[w].Requests < bound {
			q.Score, q.Scored = float64(k), true
			return w
		}
	}
	q.Score, q.Scored = 0, true
	return ready[home] // unreachable: the bound exceeds the mean
}
