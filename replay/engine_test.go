package replay

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A random workload on a small cache exercises chunking, sharing, eviction
// and preemption under the validator, on every router and both loops.
func TestValidatorRandom(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(7, 400, 40)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, cfg := range []Config{
		{Workers: 3, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 512, MaxNumSeqs: 8}},
		{Workers: 2, Router: RouterRandom, Seed: 3, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 32}},
		{Workers: 2, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 12}},
		{Workers: 1, Workload: WorkloadConfig{TimeScale: 0.25}},
	} {
		_, _, st := replay(t, cfg, cost, 60, reqs) // 60 blocks: little room
		if st.Completed+st.Rejected != len(reqs) || st.Completed < len(reqs)/2 {
			t.Errorf("%+v: stats %+v", cfg, st)
		}
		if cfg.Workers == 1 && (st.Preemptions == 0 || st.Evictions == 0 || st.CachedTokens == 0) {
			t.Errorf("%+v: the workload should preempt, evict and hit: %+v", cfg, st)
		}
	}
}

// Two runs of the same input and seed give identical outputs.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(11, 300, 30)
	cost := linearCost{Base: ms, PerToken: 15 * time.Microsecond}
	cfg := Config{Workers: 3, Router: RouterRandom, Seed: 42, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 512}}
	_, a, sa := replay(t, cfg, cost, 80, reqs)
	_, b, sb := replay(t, cfg, cost, 80, reqs)
	if dump(a) != dump(b) || !reflect.DeepEqual(sa, sb) {
		t.Error("two runs differ")
	}
	cfg.Seed = 43
	_, c, _ := replay(t, cfg, cost, 80, reqs)
	if dump(a) == dump(c) {
		t.Error("the seed does not matter to the random router")
	}
}

// constCost prices every step the same, whatever the batch.
type constCost time.Duration

func (c constCost) StepTime(*model.Batch) time.Duration { return time.Duration(c) }

// With one sequence at a time, one-token outputs and a fixed step time D,
// a worker is an M/D/1 queue: Poisson arrivals at rate λ wait on average
// Wq = ρD / (2(1 − ρ)) with ρ = λD (Pollaczek–Khinchine).
func TestMD1(t *testing.T) {
	t.Parallel()
	const n, d, rho = 40000, 10 * time.Millisecond, 0.6
	rng := rand.New(rand.NewPCG(5, 5))
	lambda := rho / d.Seconds()
	var reqs []*trace.Request
	var at float64
	for i := range n {
		at += rng.ExpFloat64() / lambda
		reqs = append(reqs, req(strconv.Itoa(i), time.Duration(at*1e9), 1+int64(rng.IntN(100)), 1))
	}
	cfg := Config{Scheduler: SchedulerConfig{MaxNumSeqs: 1}}
	var sum, ttftErr float64
	_, err := Run(cfg, constCost(d), 1000, reqs, func(r *trace.Request) error {
		sum += r.ScheduleSec.V // the whole wait, the in-flight step's rest included
		ttftErr = max(ttftErr, math.Abs(r.TTFTSec.V-r.ScheduleSec.V-d.Seconds()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := rho * d.Seconds() / (2 * (1 - rho))
	got := sum / n
	if math.Abs(got-want)/want > 0.05 {
		t.Errorf("mean wait %.4f s, M/D/1 says %.4f s", got, want)
	}
	if ttftErr > 1e-12 {
		t.Errorf("TTFT − wait differs from D by %g", ttftErr)
	}
	t.Logf("mean wait %.5f s, M/D/1 %.5f s", got, want)
}

// In the closed loop no more than N requests are ever in flight, and N
// are in flight until the trace runs out.
func TestClosedLoopConcurrency(t *testing.T) {
	t.Parallel()
	const clients = 5
	reqs := randomTrace(3, 200, 1) // arrivals ignored
	cfg := Config{Workers: 2, Workload: WorkloadConfig{Mode: ModeClosed, Clients: clients}}
	_, all, _ := replay(t, cfg, linearCost{Base: ms, PerToken: 10 * time.Microsecond}, 500, reqs)
	type edge struct {
		at trace.Time
		d  int
	}
	var edges []edge
	for _, r := range all {
		edges = append(edges, edge{r.Arrival.V, +1}, edge{r.DoneAtRouter.V, -1})
	}
	// At equal times completions come first: the next request is sent
	// when the previous one completes.
	slices.SortStableFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.d - b.d
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.d
		peak = max(peak, cur)
	}
	if peak != clients {
		t.Errorf("peak concurrency %d, want %d", peak, clients)
	}
	// Requests are sent in trace order.
	byArrival := slices.Clone(all)
	slices.SortStableFunc(byArrival, func(a, b *trace.Request) int { return int(a.Arrival.V - b.Arrival.V) })
	for i := 1; i < len(byArrival); i++ {
		if byArrival[i].Arrival.V == byArrival[i-1].Arrival.V {
			continue
		}
		if idx(byArrival[i].RequestID) < idx(byArrival[i-1].RequestID) {
			t.Fatalf("%s sent after %s", byArrival[i].RequestID, byArrival[i-1].RequestID)
		}
	}
}

func idx(id string) int {
	n := 0
	for _, c := range id[1:] {
		n = n*10 + int(c-'0')
	}
	return n
}

func TestEventOrder(t *testing.T) {
	t.Parallel()
	var q eventQueue
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		q.push(trace.Time(rng.IntN(50)), eventKind(rng.IntN(3)), int32(i))
	}
	prev := q.pop()
	for q.Len() > 0 {
		e := q.pop()
		if e.before(&prev) {
			t.Fatalf("%+v popped after %+v", e, prev)
		}
		prev = e
	}
}

// Keeping private blocks out of the index changes no result: on one
// worker, and on three routed at arrival (least requests), where the
// engine promotes shared blocks lazily (prefixlazy.go). In both, requests
// are preempted more than once, whose private blocks are indexed only
// at their next preemption (vllm.grow).
func TestPrivateBlocksSameResults(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(13, 400, 100)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, cfg := range []Config{
		{Workers: 1, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 8}},
		{Workers: 3, Router: RouterLeastRequests, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 8}},
	} {
		_, a, sa := replay(t, cfg, cost, 100, reqs)
		_, b, sb := replayWith(t, cfg, cost, 100, reqs, testSwitches{indexAll: true})
		if dump(a) != dump(b) || !reflect.DeepEqual(sa, sb) {
			t.Errorf("%d workers, %s: results differ: %+v vs %+v", cfg.Workers, cfg.Router, sa, sb)
		}
		// Recording private hashes only at preemption (MarkPrivate)
		// changes nothing either.
		_, c, sc := replayWith(t, cfg, cost, 100, reqs, testSwitches{eagerPrivate: true})
		if dump(a) != dump(c) || !reflect.DeepEqual(sa, sc) {
			t.Errorf("%d workers, %s: results differ with private hashes recorded eagerly: %+v vs %+v", cfg.Workers, cfg.Router, sa, sc)
		}
		multi := 0
		for _, r := range a {
			if r.Preemptions.V > 1 {
				multi++
			}
		}
		if sa.Preemptions == 0 || sa.CachedTokens == 0 || multi == 0 {
			t.Errorf("%d workers, %s: workload too easy: %+v, %d requests preempted more than once", cfg.Workers, cfg.Router, sa, multi)
		}
	}
	// With a CPU tier below the GPU (vLLM's native offloading), whose
	// stores and loads go by the hashes the scheduler commits. (On 100
	// GPU blocks this workload stalls with a tier: TestOffloadStallSaysWhy.)
	cfg := Config{Workers: 1, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 8}}
	run := func(sw testSwitches) (string, Stats) {
		var all []*trace.Request
		st, err := RunInputs(cfg, cost, 200, Requests(reqs), func(r *trace.Request) error {
			all = append(all, r)
			return nil
		}, Options{Offload: tierSpec(t, 60, 0, 0), test: sw})
		if err != nil {
			t.Fatal(err)
		}
		return dump(all), st
	}
	a, sa := run(testSwitches{})
	b, sb := run(testSwitches{indexAll: true})
	if a != b || !reflect.DeepEqual(sa, sb) {
		t.Errorf("with a CPU tier: results differ: %+v vs %+v", sa, sb)
	}
	if sa.Preemptions == 0 || sa.CachedTokens == 0 {
		t.Errorf("with a CPU tier: workload too easy: %+v", sa)
	}
}
