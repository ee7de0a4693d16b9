package replay

import (
	"fmt"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// With data parallelism the autoscaler's replica is a server of several
// workers (AutoscaleConfig.ReplicaWorkers): they start, become ready,
// drain and stop together, and the fleet is counted in servers. Here a
// burst makes two-rank servers grow from one to three and drain back:
// every change of the fleet moves whole servers, and the GPU-hours are
// the ranks' time.
func TestAutoscaleServers(t *testing.T) {
	reqs := pdBurst()
	cfg := Config{Workers: 2, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
		Metric: MetricQueueDepth, Target: 2, MaxReplicas: 3, SyncPeriodSec: 1, ReplicaWorkers: 2,
		ScaleDownStabilizationSec: ptr(10), ContainerStartSec: 1, WeightsGB: 16, StorageGBps: 16,
	}}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	var changes []fleetChange
	sw := testSwitches{atEnd: func(e *engine) { changes = e.scale.changes }}
	_, all, st := replayWith(t, cfg, cost, 400, reqs, sw)
	_, again, st2 := replayWith(t, cfg, cost, 400, reqs, sw)
	if dump(all) != dump(again) || st.GPUHours != st2.GPUHours {
		t.Error("two autoscaled replays differ")
	}
	if st.Completed != len(reqs) {
		t.Fatalf("%d of %d completed", st.Completed, len(reqs))
	}
	most := 0
	for _, c := range changes {
		if c.ready%2 != 0 || c.starting%2 != 0 || c.draining%2 != 0 {
			t.Errorf("at %v: %d ready, %d starting, %d draining: not whole servers of 2", c.at, c.ready, c.starting, c.draining)
		}
		most = max(most, c.ready)
	}
	if last := changes[len(changes)-1]; most != 6 || last.ready != 2 {
		t.Errorf("fleet: at most %d workers ready, %d at the end; want 6 (3 servers) and 2", most, last.ready)
	}
	checkGPUHours(t, st)
}

// The HPA's metric is per server: its ranks' queues summed (and their KV
// usage averaged), over the servers asked for. Two servers of two ranks
// that can each run one request hold 8 waiting requests at the first
// sync: 4 a server against a target of 2 asks for 4 servers, 3 at most,
// so one server (two workers) starts. Counted per worker (2 each, over 4
// workers) the fleet would not change.
func TestAutoscaleServersMetric(t *testing.T) {
	var reqs []*trace.Request
	for i := range 12 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*40*ms, 100, 10))
	}
	for _, c := range []struct {
		metric   string
		target   float64
		starting int
	}{
		{MetricQueueDepth, 2, 2},
		// Each rank holds one request's 7 blocks of 64: KV usage
		// 0.109 a rank, and a server's mean the same, within the
		// tolerance of 0.1; summed over the ranks it would be
		// twice that and grow the fleet.
		{MetricKVUsage, 0.1, 0},
	} {
		cfg := Config{Workers: 4, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
			Metric: c.metric, Target: c.target, MaxReplicas: 3, SyncPeriodSec: 1, ReplicaWorkers: 2,
			ContainerStartSec: 100,
		}}
		cfg.Scheduler.MaxNumSeqs = 1
		var first *fleetChange
		sw := testSwitches{atEnd: func(e *engine) {
			for _, ch := range e.scale.changes {
				if ch.at == trace.Time(time.Second) {
					first = &ch
				}
			}
		}}
		cost := linearCost{Base: 10 * time.Second}
		replayWith(t, cfg, cost, 64, reqs, sw)
		if first == nil || first.ready != 4 || first.starting != c.starting {
			t.Errorf("%s: the fleet after the first sync %+v, want 4 ready and %d starting", c.metric, first, c.starting)
		}
	}
}

// A server drains as a whole: its idle rank waits, draining, for the
// other's last request, and both stop when it leaves. Two servers of two
// ranks, round-robin: the fourth request, long, runs on the second
// server's second rank when the first sync, with nothing queued, takes
// the fleet down to its least, one server.
func TestAutoscaleServerDrains(t *testing.T) {
	reqs := []*trace.Request{req("a", 0, 100, 2), req("b", 0, 100, 2), req("c", 0, 100, 2), req("d", 0, 100, 400)}
	cfg := Config{Workers: 4, Router: RouterRoundRobin, Autoscale: AutoscaleConfig{
		Metric: MetricQueueDepth, Target: 2, SyncPeriodSec: 1, ReplicaWorkers: 2,
		ScaleDownStabilizationSec: ptr(0),
	}}
	var changes []fleetChange
	sw := testSwitches{atEnd: func(e *engine) { changes = e.scale.changes }}
	byID, _, _ := replayWith(t, cfg, linearCost{Base: 10 * ms}, 64, reqs, sw)
	if byID["d"].Worker != "w3" {
		t.Fatalf("d ran on %s, want w3", byID["d"].Worker)
	}
	// The fleet's states, each from when it began (a sync that changes
	// nothing notes the fleet again).
	var got []string
	var at []trace.Time
	for _, c := range changes {
		st := fmt.Sprintf("%d ready, %d draining", c.ready, c.draining)
		if len(got) == 0 || got[len(got)-1] != st {
			got, at = append(got, st), append(at, c.at)
		}
	}
	want := []string{"4 ready, 0 draining", "2 ready, 2 draining", "2 ready, 0 draining"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fleet %q, want %q", got, want)
	}
	d := byID["d"]
	if end := d.Arrival.V.Add(trace.DurationSeconds(d.E2ESec.V)); at[1] != trace.Time(time.Second) || at[2].Sub(end).Abs() > time.Microsecond {
		t.Errorf("the fleet changed at %v and %v, want 1s and d's completion %v", at[1], at[2], end)
	}
}

// A fleet of servers scales to zero and wakes as KEDA scales pods: at
// zero, a request at the gateway wakes one server, both its ranks, and
// goes to the first ready; the fleet at zero stays there while idle.
func TestScaleToZeroServers(t *testing.T) {
	cfg := zeroCfg()
	cfg.Workers, cfg.Autoscale.ReplicaWorkers = 4, 2
	reqs := []*trace.Request{req("a", 0, 300, 20), req("late", 503*time.Second, 300, 20)}
	byID, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.Completed != len(reqs) {
		t.Fatalf("%d of %d completed", st.Completed, len(reqs))
	}
	// The two servers at the start go to zero once idle.
	if f := st.Fleet[400]; f.Ready != 0 || f.Starting != 0 || f.Draining != 0 {
		t.Errorf("fleet at 400 s: %+v, want none", f)
	}
	// The poll at 510 s wakes one server, ready at 540 s.
	if f := st.Fleet[520]; f.Starting != 2 || f.Ready != 0 {
		t.Errorf("fleet at 520 s: %+v, want one server (two workers) starting", f)
	}
	if r := byID["late"]; r.WorkerArrival.V != trace.Time(540*time.Second) {
		t.Errorf("late request reached its worker at %v, want 540s", r.WorkerArrival.V)
	}
}

// Each pool's HPA sizes servers too: a burst grows both pools of
// two-rank servers and the idle tail takes each back to one server,
// every change of the fleet and of the prefill pool whole servers, and
// requests reach ready workers alone (checkedPD).
func TestDisaggregatedAutoscaleServers(t *testing.T) {
	d := pdConfig(2)
	d.PrefillAutoscale = pdHPA(MetricQueueDepth, 2, 2)
	d.DecodeAutoscale = pdHPA(MetricInFlight, 8, 3)
	d.PrefillAutoscale.ReplicaWorkers, d.DecodeAutoscale.ReplicaWorkers = 2, 2
	cfg := Config{Workers: 4, Router: RouterLeastRequests, Disaggregation: d}
	var changes []fleetChange
	var slots int
	sw := func(e *engine) { changes, slots = e.scale.changes, len(e.workers) }
	all, st := checkedPDAt(t, cfg, pdBurst(), sw)
	if st.Completed != len(all) || st.Completed != len(pdBurst()) {
		t.Fatalf("%d completed", st.Completed)
	}
	if slots != 4+6 {
		t.Errorf("%d slots, want 4 prefill (2 servers) and 6 decode (3 servers)", slots)
	}
	prefillMost, decodeMost := 0, 0
	for _, c := range changes {
		decode := c.ready - c.prefillReady
		if c.ready%2 != 0 || c.starting%2 != 0 || c.draining%2 != 0 || c.prefillReady%2 != 0 {
			t.Errorf("at %v: %+v: not whole servers of 2", c.at, c)
		}
		prefillMost, decodeMost = max(prefillMost, c.prefillReady), max(decodeMost, decode)
	}
	last := changes[len(changes)-1]
	if prefillMost != 4 || decodeMost < 4 || last.prefillReady != 2 || last.ready != 4 {
		t.Errorf("at most %d prefill and %d decode workers ready, at the end %+v; want 4, 4 or more, and one server each", prefillMost, decodeMost, last)
	}
}
