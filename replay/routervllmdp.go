package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// vllmDPWaitingWeight is the weight of a queued request against a running
// one in vLLM's data-parallel load balancer: score = waiting·4 + running
// (v1/engine/core_client.py, DPLBAsyncMPClient.get_core_engine_for_request,
// v0.9 to v0.19 alike).
const vllmDPWaitingWeight = 4

// vllmDPStatsIntervalMs is how often, at most, vLLM's DP coordinator
// publishes the engines' request counts to the front end while they
// change: min_stats_update_interval_ms, 100 unless the load balancer is
// external (v1/engine/coordinator.py, DPCoordinator.__init__).
const vllmDPStatsIntervalMs = 100

// vllmDP is vLLM's own front end in front of the engine cores of its
// internal data parallelism (--data-parallel-size without an external load
// balancer): one API server's DPLBAsyncMPClient. Each engine core (a
// replay worker) reports its scheduler's waiting and running counts to the
// DP coordinator after its steps; the coordinator publishes them every
// stats_update_interval_ms (CoordinatorProc.process_input_socket); the
// front end replaces its estimate with each publication (lb_engines =
// the published counts) and, between publications, adds one waiting
// request to the engine it chose ("Increment local waiting count for better
// balancing between stats updates from the coordinator"). A request goes to
// the engine of least waiting·4 + running in that estimate, ties to the
// lowest index (the scan starts at eng_start_index, 0 for the only API
// server). Its score is that least score.
//
// Note: a publication is taken at the first routing decision at or after
// its tick and reads the workers as of that decision (the routers' view
// does the same; see RouterConfig.ViewIntervalSec), not as of the engines'
// last reports before the tick; the coordinator's slower 4 s publication
// when nothing changed gives the same estimate, so it is not modelled.
type vllmDP struct {
	interval time.Duration // 0: every decision sees the live counts
	next     trace.Time    // the next publication tick
	started  bool
	waiting  []int // the front end's estimate, per worker slot
	running  []int
}

func newVLLMDP(cfg *Config, slots int) Router {
	return &vllmDP{
		interval: time.Duration(*cfg.RouterConfig.StatsUpdateIntervalMs) * time.Millisecond,
		waiting:  make([]int, slots),
		running:  make([]int, slots),
	}
}

func (r *vllmDP) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	if !r.started || q.At >= r.next {
		r.started = true
		for _, w := range ready {
			l := c.Load(w)
			r.waiting[w], r.running[w] = l.Waiting, l.Running
		}
		if r.interval > 0 {
			// The latest tick at or before q.At, then the one after it.
			r.next = q.At - trace.Time(int64(q.At)%int64(r.interval)) + trace.Time(r.interval)
		}
	}
	best, bestScore := ready[0], 0
	for k, w := range ready {
		if s := vllmDPWaitingWeight*r.waiting[w] + r.running[w]; k == 0 || s < bestScore {
			best, bestScore = w, s
		}
	}
	r.waiting[best]++
	q.Score, q.Scored = float64(bestScore), true
	return best
}

// resetWorker forgets a slot's counts when the autoscaler starts it
// afresh; the next publication fills them in.
func (r *vllmDP) resetWorker(w int) { r.waiting[w], r.running[w] = 0, 0 }
