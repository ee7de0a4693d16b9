package replay

import (
	"fmt"
	"math/rand/v2"
)

// A WorkerLoad is what a router may know about one worker when it routes.
type WorkerLoad struct {
	Running    int   // requests in the running batch
	Waiting    int   // requests queued
	FreeBlocks int64 // unreferenced KV blocks
}

// A Cluster is the router's view of the workers.
type Cluster interface {
	NumWorkers() int
	Load(worker int) WorkerLoad
}

// A Router picks the worker for each request. Implementations may keep
// state (a cursor, an RNG seeded from Config.Seed) but must be
// deterministic given it.
type Router interface {
	// Route returns the index of the worker that serves request index
	// (its position in the replayed trace).
	Route(index int, c Cluster) int
}

// newRouter builds the router named in the configuration.
func newRouter(name string, rng *rand.Rand) (Router, error) {
	switch name {
	case RouterRoundRobin:
		return &roundRobin{}, nil
	case RouterRandom:
		return &random{rng: rng}, nil
	}
	return nil, fmt.Errorf("router: unknown router %q", name)
}

// A loadBlind router's choices depend only on the order in which requests
// reach it, never on the cluster's state, so the engine can route every
// request before the replay starts (engine.preRoute): it then knows which
// requests meet on a worker (to index only the prefix blocks another
// request on the same worker can hit) and when a worker's next request
// arrives (to fast-forward up to it).
type loadBlind interface {
	Router
	loadBlind()
}

// roundRobin sends requests to workers 0, 1, …, N−1, 0, … in arrival order.
type roundRobin struct{ next int }

func (r *roundRobin) Route(_ int, c Cluster) int {
	w := r.next % c.NumWorkers()
	r.next = w + 1
	return w
}

func (*roundRobin) loadBlind() {}

// random picks a worker uniformly from the seeded RNG.
type random struct{ rng *rand.Rand }

func (r *random) Route(_ int, c Cluster) int { return r.rng.IntN(c.NumWorkers()) }

func (*random) loadBlind() {}
