package replay

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// onlineSharing.routed returns what a scan of every other request gives:
// the longest common prefix (same block size) with a request not routed
// yet or routed to the same worker.
func TestOnlineSharingBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		n := 1 + rng.IntN(40) // under maxWalk: no walk is cut short
		ids, bs := make([][]int64, n), make([]int64, n)
		for i := range n {
			if rng.IntN(6) == 0 {
				continue // no hash ids
			}
			bs[i] = int64(1 + rng.IntN(2))
			ids[i] = make([]int64, rng.IntN(6))
			for j := range ids[i] {
				ids[i][j] = int64(rng.IntN(2)) // few values: long common prefixes
			}
		}
		o := newOnlineSharing(ids, bs)
		where := make([]int, n)
		for i := range where {
			where[i] = notArrived
		}
		for _, i := range rng.Perm(n) {
			if rng.IntN(8) == 0 {
				o.reject(int32(i))
				where[i] = rejected
				continue
			}
			w := rng.IntN(3)
			want := 0
			for j := range n {
				if j != i && len(ids[i]) > 0 && bs[i] > 0 && bs[j] == bs[i] && (where[j] == notArrived || where[j] == w) {
					want = max(want, commonPrefix(ids[i], ids[j]))
				}
			}
			where[i] = w
			if got := o.routed(int32(i), w); int(got) != want {
				t.Fatalf("round %d: request %d (ids %v, block %d) on worker %d: %d shared ids, want %d", round, i, ids[i], bs[i], w, got, want)
			}
		}
	}
}

// conversationTrace is a trace of short conversations, each turn's
// prompt the previous one's plus more, interleaved in time, so that a
// turn's sharers have often all arrived, and gone to other workers,
// before it.
func conversationTrace(seed uint64, convs int) []*trace.Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	var reqs []*trace.Request
	for c := range convs {
		at := float64(c) * 0.4
		var ids []int64
		for turn := range 1 + rng.IntN(4) {
			for range 1 + rng.IntN(4) {
				ids = append(ids, int64(c*100+len(ids)))
			}
			if rng.IntN(5) == 0 {
				ids[0] = 0 // a system prompt some conversations share
			}
			r := req(fmt.Sprintf("c%d-%d", c, turn), time.Duration(at*1e9), int64(len(ids))*64, int64(1+rng.IntN(40)))
			withHashes(r, 64, append([]int64(nil), ids...)...)
			reqs = append(reqs, r)
			at += 0.5 + rng.ExpFloat64()
		}
	}
	return reqs
}

// Routed as they arrive, requests index only the blocks another request
// that can still reach their worker shares (onlineSharing), with the
// results of indexing every block, for every router, a stale view and
// autoscaling.
func TestOnlineSharingSameResults(t *testing.T) {
	t.Parallel()
	reqs := append(randomTrace(17, 300, 60), conversationTrace(5, 80)...)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, name := range append(routerNames(), "round_robin_online", "stale", "autoscale") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Workers: 4, Router: name, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 16}}
			var sw testSwitches
			reqs := reqs
			switch name {
			case RouterRecorded:
				reqs = withWorkers(reqs, 4)
			case "round_robin_online":
				cfg.Router, sw.noPreRoute = RouterRoundRobin, true
			case "stale":
				cfg.Router, cfg.RouterConfig.ViewIntervalSec = RouterLeastRequests, 1
			case "autoscale":
				cfg.Router = RouterLeastRequests
				cfg.Autoscale = AutoscaleConfig{
					Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 4, SyncPeriodSec: 1,
					ScaleDownStabilizationSec: ptr(5.0), ContainerStartSec: 1, WeightsGB: 16, StorageGBps: 16,
				}
			}
			_, a, sa := replayWith(t, cfg, cost, 70, reqs, sw)
			sw.indexAll = true
			_, b, sb := replayWith(t, cfg, cost, 70, reqs, sw)
			if dump(a) != dump(b) || !reflect.DeepEqual(sa, sb) {
				t.Errorf("results differ: %+v vs %+v", sa, sb)
			}
			if sa.CachedTokens == 0 || sa.Preemptions == 0 {
				t.Errorf("workload too easy: %+v", sa)
			}
		})
	}
}
