package replay

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// runParted replays with the workers split among parts goroutines (1: the
// one loop), per-second statistics on, and returns the records as emitted
// (copied, when transient) and the stats.
func runParted(t *testing.T, cfg Config, cost model.StepModel, blocks int64, reqs []*trace.Request, parts, batch int, transient bool) ([]*trace.Request, Stats) {
	t.Helper()
	var all []*trace.Request
	st, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(r *trace.Request) error {
		if transient {
			c := *r
			c.ITLSec = append([]float64(nil), r.ITLSec...)
			if r.ITLSec != nil && c.ITLSec == nil {
				c.ITLSec = []float64{}
			}
			c.HashIDs = append([]int64(nil), r.HashIDs...)
			if r.HashIDs == nil {
				c.HashIDs = nil
			}
			r = &c
		}
		all = append(all, r)
		return nil
	}, Options{PerSecond: true, Transient: transient, test: testSwitches{parts: parts, partBatch: batch}})
	if err != nil {
		t.Fatal(err)
	}
	return all, st
}

// tiedTrace returns n requests that arrive k at a time, every gap
// apart, all of one shape: round-robin gives each worker the same work, so
// steps end, requests complete and clients time out at the same instants
// on different workers.
func tiedTrace(n, k int, gap time.Duration, in, out int64) []*trace.Request {
	var reqs []*trace.Request
	for i := range n {
		reqs = append(reqs, req(fmt.Sprintf("t%d", i), time.Duration(i/k)*gap, in, out))
	}
	return reqs
}

// A replay split among goroutines emits the same records in the same
// order, with the same stats and per-second statistics, as the one loop:
// preemptions, timeouts, rejections, both schedulers, ties across workers,
// records kept or transient.
func TestPartsSameResults(t *testing.T) {
	t.Parallel()
	linear := linearCost{Base: 2 * ms, PerToken: 20e3, PerContext: 7}
	random := randomTrace(11, 600, 90)
	tied := tiedTrace(400, 4, 15*ms, 300, 40)
	cases := []struct {
		name   string
		cfg    Config
		cost   model.StepModel
		blocks int64
		reqs   []*trace.Request
	}{
		{"vllm preempting", Config{Workers: 4}, linear, 60, random},
		{"random router", Config{Workers: 3, Router: RouterRandom, Seed: 3}, linear, 100, random},
		{"timeouts", Config{Workers: 4, Scheduler: SchedulerConfig{MaxNumSeqs: 4}, Client: ClientConfig{TimeoutSec: 0.1, LatencySec: 0.002}}, linear, 100, random},
		{"rejections, stream 4", Config{Workers: 3, Scheduler: SchedulerConfig{StreamInterval: 4}}, linear, 30, random},
		{"sglang", Config{Workers: 3, Scheduler: SchedulerConfig{Engine: EngineSGLang, MaxNumSeqs: 8}}, linear, 100, random},
		{"sglang timeouts", Config{Workers: 4, Scheduler: SchedulerConfig{Engine: EngineSGLang, MaxNumSeqs: 4}, Client: ClientConfig{TimeoutSec: 0.12}}, linear, 60, random},
		{"time scale", Config{Workers: 5, Workload: WorkloadConfig{TimeScale: 0.5}}, linear, 80, random},
		{"ties", Config{Workers: 4}, constCost(5 * ms), 200, tied},
		{"ties, timeouts", Config{Workers: 4, Scheduler: SchedulerConfig{MaxNumSeqs: 2}, Client: ClientConfig{TimeoutSec: 0.3, LatencySec: 0.001}}, constCost(5 * ms), 200, tied},
		{"ties, preempting", Config{Workers: 2}, constCost(3 * ms), 25, tied},
	}
	var preempted, timedOut, rejected, ties int64
	for _, c := range cases {
		want, wantSt := runParted(t, c.cfg, c.cost, c.blocks, c.reqs, 1, 0, false)
		preempted += wantSt.Preemptions
		timedOut += int64(wantSt.TimedOut)
		rejected += int64(wantSt.Rejected)
		for i := 1; i < len(want); i++ {
			a, b := want[i-1], want[i]
			if a.DoneAtRouter == b.DoneAtRouter && a.Worker != b.Worker && a.Worker != "" && b.Worker != "" {
				ties++
			}
		}
		// Batches of one record or event make the merge wait on
		// parts at every instant, where ties are.
		for _, batch := range []int{0, 1, 7} {
			for _, parts := range []int{2, 3, 4} {
				for _, transient := range []bool{false, true} {
					got, gotSt := runParted(t, c.cfg, c.cost, c.blocks, c.reqs, parts, batch, transient)
					if dump(got) != dump(want) {
						t.Errorf("%s, %d parts, batches %d, transient %v: records differ from the one loop's", c.name, parts, batch, transient)
					}
					if !reflect.DeepEqual(gotSt, wantSt) {
						t.Errorf("%s, %d parts, batches %d, transient %v: stats differ:\n got %+v\nwant %+v", c.name, parts, batch, transient, gotSt, wantSt)
					}
				}
			}
		}
	}
	// The cases are worth comparing only if these happen.
	if preempted == 0 || timedOut == 0 || rejected == 0 || ties == 0 {
		t.Errorf("preemptions %d, timeouts %d, rejections %d, completions tied across workers %d: want each > 0", preempted, timedOut, rejected, ties)
	}
}

// Only a replay whose workers cannot affect one another is split.
func TestPartsWhen(t *testing.T) {
	t.Parallel()
	split := func(mod func(e *engine)) int {
		e := &engine{cfg: Config{Workload: WorkloadConfig{Mode: ModeOpen}}, route: []int32{0}, workers: make([]*worker, 4)}
		if mod != nil {
			mod(e)
		}
		return e.parts()
	}
	if n := split(nil); n < 2 && maxProcs() >= 2 {
		t.Errorf("open loop routed in advance: %d parts, want more than 1 on %d CPUs", n, maxProcs())
	}
	for name, mod := range map[string]func(e *engine){
		"closed loop":     func(e *engine) { e.cfg.Workload.Mode = ModeClosed },
		"sessions":        func(e *engine) { e.cfg.Workload.Mode = ModeSessions },
		"routed online":   func(e *engine) { e.route = nil },
		"KV tiers":        func(e *engine) { e.off = &offload{} },
		"autoscaling":     func(e *engine) { e.scale = &autoscaler{} },
		"observer":        func(e *engine) { e.observe = func(*Step) error { return nil } },
		"one worker":      func(e *engine) { e.workers = e.workers[:1] },
		"forced one loop": func(e *engine) { e.test.parts = 1 },
	} {
		if n := split(mod); n != 1 {
			t.Errorf("%s: %d parts, want the one loop", name, n)
		}
	}
}

// An error from emit stops a split replay as it stops the one loop: after
// the same records, with the error returned, and no part left running.
func TestPartsEmitError(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(12, 400, 90)
	full := errors.New("disk full")
	for _, parts := range []int{1, 2, 4} {
		for _, batch := range []int{0, 1} {
			var got []*trace.Request
			_, err := RunInputs(Config{Workers: 4}, linearCost{Base: 2 * ms, PerToken: 20e3}, 100, Requests(reqs), func(r *trace.Request) error {
				if len(got) == 57 {
					return full
				}
				got = append(got, r)
				return nil
			}, Options{test: testSwitches{parts: parts, partBatch: batch}})
			if !errors.Is(err, full) || len(got) != 57 {
				t.Errorf("%d parts, batches %d: %d records and error %v, want 57 and %v", parts, batch, len(got), err, full)
			}
		}
	}
}

// BenchmarkReplayMooncakeParts replays the Mooncake conversation trace on
// 4 and 16 workers in the one loop (parts=1) and split as a replay splits
// itself (parts=auto). Besides the process's CPU time it reports the
// longest CPU time of one part (path-cpu-ns/op: each part's loop is held
// on its own thread and that thread's CPU time read), the split replay's
// critical path on an idle machine; the one loop's is its whole CPU time.
func BenchmarkReplayMooncakeParts(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	for _, workers := range []int{4, 16} {
		for _, parts := range []int{1, 0} {
			name := fmt.Sprintf("workers=%d/parts=%d", workers, parts)
			if parts == 0 {
				name = fmt.Sprintf("workers=%d/parts=auto", workers)
			}
			b.Run(name, func(b *testing.B) {
				var mu sync.Mutex
				var path time.Duration
				opts := Options{test: testSwitches{parts: parts, wrapPart: func(run func() error) error {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					t0 := threadCPU()
					err := run()
					d := threadCPU() - t0
					mu.Lock()
					path = max(path, d)
					mu.Unlock()
					return err
				}}}
				var total, longest time.Duration
				for b.Loop() {
					path = 0
					cpu0 := cpuTime()
					if _, err := RunInputs(Config{Workers: workers}, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, opts); err != nil {
						b.Fatal(err)
					}
					d := cpuTime() - cpu0
					total += d
					if path == 0 {
						path = d // the one loop
					}
					longest += path
				}
				b.ReportMetric(float64(total)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(longest)/float64(b.N), "path-cpu-ns/op")
			})
		}
	}
}

// threadCPU returns the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
