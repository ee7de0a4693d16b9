package replay

import (
	"math"
	"reflect"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// TestLazyIndexMooncake replays the first 4,000 requests of the Mooncake
// conversation trace on 16 workers with routers that decide at arrival,
// indexing lazily, and again indexing every block
// (testSwitches.indexAll): the outputs must be byte-identical. The runs with a sixteenth of the KV capacity preempt
// and evict, so that promotion meets preempted requests and runs cut by
// eviction; every case must promote blocks both of running requests and
// out of finished requests' runs.
func TestLazyIndexMooncake(t *testing.T) {
	t.Parallel()
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:4000]
	cost, blocks := llama8BOnH100(t)
	for _, c := range []sharingCase{
		{"least_requests", RouterLeastRequests, blocks, false},
		{"sglang_cache_aware", RouterSGLang, blocks, false},
		{"session_affinity_small_kv", RouterSession, blocks / 16, false},
		{"autoscale", RouterLeastRequests, blocks, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run := func(sw testSwitches) (string, Stats, *lazyIndex) {
				var x *lazyIndex
				// A hook that sees the workers: it finds the
				// lazy index through their schedulers.
				sw.checkSteady = func(w *worker, _ bool) {
					if v, ok := w.s.(*vllm); ok && v.lazy != nil {
						x = v.lazy
					}
				}
				b, st := c.replay(t, cost, reqs, sw)
				return b, st, x
			}
			a, sa, x := run(testSwitches{})
			b, sb, _ := run(testSwitches{indexAll: true})
			if a != b || !reflect.DeepEqual(sa, sb) {
				t.Errorf("lazy indexing changed the results: %+v vs %+v", sa, sb)
			}
			if x == nil || x.promotedHeld == 0 || x.promotedRuns == 0 || c.kv < blocks && sa.Preemptions == 0 {
				t.Fatalf("the case does not exercise promotion: %+v, %d preemptions", x, sa.Preemptions)
			}
			t.Logf("%d blocks promoted of running requests, %d out of runs; %d preemptions, %d evictions", x.promotedHeld, x.promotedRuns, sa.Preemptions, sa.Evictions)
		})
	}
}

// A sharingCase is a replay of Mooncake requests on 16 workers that
// decide at arrival, with a router, a KV capacity (a sixteenth of the
// full one preempts and evicts) and optionally autoscaling: the cases
// on which lazy indexing and resumed prefix matches must change nothing.
type sharingCase struct {
	name   string
	router string
	kv     int64
	scale  bool
}

// replay runs c with the test switches sw and returns its records, one
// String per line, and its stats.
func (c sharingCase) replay(t *testing.T, cost model.StepModel, reqs []*trace.Request, sw testSwitches) (string, Stats) {
	t.Helper()
	cfg := Config{Workers: 16, Router: c.router}
	if c.scale {
		cfg.Autoscale = AutoscaleConfig{
			Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 16,
			ScaleDownStabilizationSec: ptr(60.0), ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2,
		}
	}
	var b []byte
	st, err := RunInputs(cfg, cost, c.kv, Requests(reqs), func(r *trace.Request) error {
		b = append(b, r.String()...)
		b = append(b, '\n')
		return nil
	}, Options{test: sw})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), st
}

// lcpMin is the least of o.lcp over any range, checked against a plain
// walk on random lcp tables of every length up to 300 (partial last
// blocks, ranges inside one block, across many, empty).
func TestLcpMinMatchesWalk(t *testing.T) {
	for n := 1; n <= 300; n++ {
		o := &onlineSharing{lcp: make([]int32, n)}
		for j := range o.lcp {
			o.lcp[j] = int32((j*7919 + n*31) % 23)
		}
		x := newLazyIndex(o, nil, nil)
		for lo := int32(0); lo < int32(n); lo++ {
			for hi := lo - 1; hi < int32(n); hi++ {
				want := int32(math.MaxInt32)
				for j := lo; j <= hi; j++ {
					want = min(want, o.lcp[j])
				}
				if got := x.lcpMin(lo, hi); got != want {
					t.Fatalf("%d places: lcpMin(%d, %d) = %d, want %d", n, lo, hi, got, want)
				}
			}
		}
	}
}
