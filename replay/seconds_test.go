package replay

import (
	"math"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// Per-second statistics of one request by hand: a 100-token prompt at
// 0.5 s, 3 output tokens, steps of 0.3 s + 1 ms a token: the prefill
// step [0.5, 0.9) s, decodes [0.9, 1.201) and [1.201, 1.502) s.
func TestSecondsByHand(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 300 * ms, PerToken: ms}
	st, err := RunInputs(Config{}, cost, 100, Requests{req("a", 500*ms, 100, 3)}, func(*trace.Request) error { return nil }, Options{PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Seconds) != 2 {
		t.Fatalf("%d seconds: %+v", len(st.Seconds), st.Seconds)
	}
	s0, s1 := st.Seconds[0], st.Seconds[1]
	if s0.Arrivals != 1 || s0.Steps != 2 || s0.Tokens != 101 || s0.Completions != 0 ||
		s1.Steps != 1 || s1.Tokens != 1 || s1.Completions != 1 {
		t.Errorf("counts %+v %+v", s0, s1)
	}
	// Busy and running in second 0: [0.5, 1.0); in second 1: [1.0, 1.502).
	near(t, "busy 0", s0.Busy, 0.5)
	near(t, "busy 1", s1.Busy, 0.502)
	near(t, "running 0", s0.Running, 0.5)
	near(t, "kv 0", s0.KVBlocksUsed, 0.4*7+0.1*7) // 101 then 102 tokens: 7 blocks of 16
	near(t, "tokens per step 0", s0.TokensPerStep(), 50.5)
}

// Little's law on the output: the time-average number of requests in the
// system (running + waiting, per second) is the arrival rate times the
// mean time in the system, within 3 % (the per-second counts see an
// arrival at the next step start, not at once). The per-second totals
// match the replay's.
func TestLittlesLaw(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(17, 3000, 20)
	cost := linearCost{Base: 5 * ms, PerToken: 20 * time.Microsecond}
	var sojourn float64
	var last trace.Time
	cfg := Config{Workers: 2, Scheduler: SchedulerConfig{MaxNumSeqs: 16}}
	st, err := RunInputs(cfg, cost, 400, Requests(reqs), func(r *trace.Request) error {
		sojourn += r.DoneAtRouter.V.Sub(r.RouterArrival.V).Seconds()
		last = max(last, r.DoneAtRouter.V)
		return nil
	}, Options{PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	var inSystem, busy float64
	var done, steps int64
	for _, s := range st.Seconds {
		inSystem += s.Running + s.Waiting
		busy += s.Busy
		done += s.Completions
		steps += s.Steps
	}
	T := last.Seconds()
	lambdaW := sojourn / T // λ·W = (n/T)·(Σ sojourn/n)
	L := inSystem / T
	if math.Abs(L-lambdaW) > 0.03*lambdaW {
		t.Errorf("L = %.4f, λW = %.4f", L, lambdaW)
	}
	t.Logf("L = %.4f, λW = %.4f, busy %.3f", L, lambdaW, busy/float64(len(st.Seconds)))
	if done != int64(st.Completed) || steps != st.Steps ||
		math.Abs(busy*float64(cfg.Workers)-st.BusyTime.Seconds()) > 1e-6 {
		t.Errorf("totals: %d completions, %d steps, busy %g s; stats %+v", done, steps, busy, st)
	}
}

// Two requests 100 days apart: the dense per-second table would take
// gigabytes, so per-second statistics are refused before the replay
// starts; the same replay without them runs.
func TestSecondsLongSpanRefused(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 300 * ms, PerToken: ms}
	reqs := Requests{req("a", 0, 100, 3), req("b", 100*24*time.Hour, 100, 3)}
	discard := func(*trace.Request) error { return nil }
	_, err := RunInputs(Config{}, cost, 100, reqs, discard, Options{PerSecond: true})
	const want = "replay: per-second statistics: the arrivals span 8640000 s, more than the limit of 2097152 s (24 days); replay without them or a shorter part of the trace"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if _, err := RunInputs(Config{}, cost, 100, reqs, discard, Options{}); err != nil {
		t.Fatalf("without per-second statistics: %v", err)
	}
}

// With autoscaling a second's Busy is over the workers on in it (ready,
// starting, draining: what GPU-hours count), not the fleet at the start:
// busy times the workers on, summed over the seconds, is the replay's
// busy time, and no second is busier than its workers.
func TestBusyOfAutoscaledFleet(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(17, 3000, 20)
	cost := linearCost{Base: 5 * ms, PerToken: 20 * time.Microsecond}
	cfg := Config{Workers: 4, Scheduler: SchedulerConfig{MaxNumSeqs: 16},
		Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 6, SyncPeriodSec: 5, ContainerStartSec: 10}}
	st, err := RunInputs(cfg, cost, 400, Requests(reqs), func(*trace.Request) error { return nil }, Options{PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	var busy, most float64
	fewer := false // a second with fewer workers on than at the start
	for _, s := range st.Seconds {
		f := st.Fleet[s.Second]
		on := f.Ready + f.Starting + f.Draining
		busy += s.Busy * on
		most = max(most, s.Busy)
		fewer = fewer || on < 3.5 && s.Busy > 0
	}
	if math.Abs(busy-st.BusyTime.Seconds()) > 1e-6*st.BusyTime.Seconds() || most > 1+1e-9 || !fewer {
		t.Errorf("Σ busy × workers on %g s, busy time %g s; busiest second %g; a smaller fleet busy %v", busy, st.BusyTime.Seconds(), most, fewer)
	}
}
