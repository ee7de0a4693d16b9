package replay

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// zeroCfg is a fleet of two workers that may scale to zero: KEDA polls
// every 10 s, cools down for 60 s, and a worker takes 30 s to start.
func zeroCfg() Config {
	return Config{Workers: 2, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
		Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(0), MaxReplicas: 4, SyncPeriodSec: 15,
		PollingIntervalSec: 10, CooldownSec: ptr(60), ContainerStartSec: 30,
	}}
}

// A fleet idle for longer than the cooldown goes to zero; the next
// request waits at the gateway for KEDA's next poll and a worker's start,
// and its TTFT counts the wait.
func TestScaleToZeroColdStart(t *testing.T) {
	var reqs []*trace.Request
	for i := range 20 { // 1 request/s for 20 s, a queue in little KV
		reqs = append(reqs, req(fmt.Sprintf("a%d", i), time.Duration(i)*time.Second, 2000, 400))
	}
	late := req("late", 500*time.Second+3*time.Second, 300, 20)
	reqs = append(reqs, late)
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	byID, all, st := replay(t, zeroCfg(), cost, 400, reqs)
	_, again, st2 := replay(t, zeroCfg(), cost, 400, reqs)
	if dump(all) != dump(again) || st.GPUHours != st2.GPUHours {
		t.Error("two replays that scale to zero differ")
	}
	if st.Completed != len(reqs) {
		t.Fatalf("%d of %d completed", st.Completed, len(reqs))
	}
	// Up while requests queue, at zero from some time before 500 s
	// until the late request.
	if f := st.Fleet[30]; f.Ready != 2 {
		t.Errorf("fleet at 30 s: %+v, want the two workers", f)
	}
	// The last poll to find a queue is at 20 s (a19, arrived at 19 s,
	// waits until 21 s); KEDA scales to zero once more than the 60 s
	// cooldown has passed (LastActiveTime + cooldown before now): at
	// the poll at 90 s, not at 80 s.
	if f, g := st.Fleet[85], st.Fleet[90]; f.Ready != 2 || g.Ready != 0 {
		t.Errorf("fleet at 85 s %+v, at 90 s %+v: want two workers, then none", f, g)
	}
	if f := st.Fleet[400]; f.Ready != 0 || f.Starting != 0 || f.Draining != 0 {
		t.Errorf("fleet at 400 s: %+v, want none", f)
	}
	// It arrives at 503 s; the poll at 510 s wakes one worker, ready
	// at 540 s, when it leaves the gateway.
	r := byID["late"]
	if want := trace.Time(540 * time.Second); r.WorkerArrival.V != want {
		t.Errorf("late request reached its worker at %v, want %v", r.WorkerArrival.V, want)
	}
	if r.TTFTSec.V < 37 {
		t.Errorf("late request's TTFT %v s, want the 37 s cold start counted", r.TTFTSec.V)
	}
	if f := st.Fleet[520]; f.Starting != 1 || f.Ready != 0 {
		t.Errorf("fleet at 520 s: %+v, want one starting", f)
	}
	// Without scale to zero the fleet stays up and costs more.
	cfg := zeroCfg()
	cfg.Autoscale.MinReplicas, cfg.Autoscale.PollingIntervalSec, cfg.Autoscale.CooldownSec = nil, 0, nil
	byID1, _, st1 := replay(t, cfg, cost, 400, reqs)
	if !(st.GPUHours < st1.GPUHours*0.5) {
		t.Errorf("GPU-hours %v with scale to zero, %v without: want far fewer", st.GPUHours, st1.GPUHours)
	}
	if byID1["late"].TTFTSec.V > 1 {
		t.Errorf("without scale to zero the late request's TTFT is %v s", byID1["late"].TTFTSec.V)
	}
}

// KEDA's scaleToZero does not wait for the cooldown when the metric was
// never active: a fleet without requests goes to zero at the first poll.
// Requests held at the gateway go, in the order they came, to the first
// worker ready.
func TestScaleToZeroNeverActiveAndOrder(t *testing.T) {
	var reqs []*trace.Request
	for i := range 5 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), 100*time.Second+time.Duration(i)*time.Second, 100, 400))
	}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	byID, _, st := replay(t, zeroCfg(), cost, 400, reqs)
	if f := st.Fleet[11]; f.Ready+f.Starting != 0 {
		t.Errorf("fleet at 11 s: %+v, want none (never active: no cooldown)", f)
	}
	// Polls at 100 s (r0 arrived then: arrivals come first) and 110 s:
	// a worker ready at 130 s takes all five, in order.
	for i := range 5 {
		r := byID[fmt.Sprintf("r%d", i)]
		if r.WorkerArrival.V != trace.Time(130*time.Second) || r.Worker != byID["r0"].Worker {
			t.Errorf("r%d reached %s at %v, want r0's worker at 130 s", i, r.Worker, r.WorkerArrival.V)
		}
		if i > 0 && !(r.GPUStart.V >= byID[fmt.Sprintf("r%d", i-1)].GPUStart.V) {
			t.Errorf("r%d started before r%d", i, i-1)
		}
	}
}

// A client that gives up while its request waits at the gateway gets a
// timeout record with no worker, and the replay goes on.
func TestScaleToZeroTimeoutAtGateway(t *testing.T) {
	reqs := []*trace.Request{req("early", 0, 100, 10), req("gives-up", 200*time.Second, 100, 10), req("waits", 201*time.Second, 100, 10)}
	cfg := zeroCfg()
	cfg.Client.TimeoutSec = 20
	cfg.Autoscale.ContainerStartSec = 15
	byID, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	// Poll at 200 s wakes a worker ready at 215 s: in time for both.
	if st.TimedOut != 0 {
		t.Fatalf("%d timed out with a 15 s start and a 20 s timeout", st.TimedOut)
	}
	if r := byID["gives-up"]; r.WorkerArrival.V != trace.Time(215*time.Second) {
		t.Errorf("held request reached its worker at %v, want 215 s", r.WorkerArrival.V)
	}
	cfg.Autoscale.ContainerStartSec = 30
	byID, _, st = replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.TimedOut != 2 || st.Completed != 1 {
		t.Fatalf("%d timed out, %d completed; want 2 and 1", st.TimedOut, st.Completed)
	}
	for _, id := range []string{"gives-up", "waits"} {
		r := byID[id]
		if r.Status != trace.StatusTimeout || r.Worker != "" || r.WorkerArrival.OK || !r.DoneAtRouter.OK {
			t.Errorf("%s: status %v, worker %q, worker arrival %v: want a timeout at the gateway", id, r.Status, r.Worker, r.WorkerArrival)
		}
	}
}

// Requests held at the gateway of a fleet at zero that nothing will wake
// (their queue at or below activation_target, nothing more on its way)
// are rejected, and the replay ends, where it would poll for ever.
func TestScaleToZeroNeverWakes(t *testing.T) {
	reqs := []*trace.Request{req("early", 0, 100, 10), req("a", 200*time.Second, 100, 10), req("b", 201*time.Second, 100, 10)}
	cfg := zeroCfg()
	cfg.Autoscale.ActivationTarget = 2
	byID, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.Completed != 1 || st.Rejected != 2 {
		t.Fatalf("%d completed, %d rejected; want 1 and 2", st.Completed, st.Rejected)
	}
	for _, id := range []string{"a", "b"} {
		r := byID[id]
		if r.Status != trace.StatusRejected || !strings.Contains(r.Error, "the fleet at zero never woke (queue_depth 2, not above activation_target 2, and nothing more") ||
			r.DoneAtRouter.V != trace.Time(210*time.Second) {
			t.Errorf("%s: %v %q at %v, want rejected at the poll at 210 s", id, r.Status, r.Error, r.DoneAtRouter.V)
		}
	}
	// A third request wakes it.
	reqs = append(reqs, req("c", 202*time.Second, 100, 10))
	_, _, st = replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.Completed != 4 {
		t.Errorf("%d of 4 completed with three held", st.Completed)
	}
}

// Scale to zero under each scheduler, with API servers, in closed loop
// and with a cache-aware router: every request completes (the validator
// checks each record), some after waiting at the gateway.
func TestScaleToZeroEverywhere(t *testing.T) {
	t.Parallel()
	reqs := bursts(40, 8)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"vllm", func(*Config) {}},
		{"sglang", func(c *Config) {
			c.Scheduler = SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 6000}
		}},
		{"api server", func(c *Config) { c.Client.APIServerRequestSec = 0.002 }},
		{"closed loop", func(c *Config) { c.Workload.Mode, c.Workload.Clients = ModeClosed, 8 }},
		{"sglang_cache_aware", func(c *Config) { c.Router = RouterSGLang }},
		{"request_rate", func(c *Config) { c.Autoscale.Metric, c.Autoscale.Target = MetricRequestRate, 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := zeroCfg()
			cfg.Scheduler = SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 16}
			tc.set(&cfg)
			_, _, st := replay(t, cfg, cost, 200, reqs)
			if st.Completed != len(reqs) {
				t.Errorf("%d of %d completed", st.Completed, len(reqs))
			}
			if tc.name != "closed loop" && st.Held == 0 {
				t.Errorf("no request waited at the gateway")
			}
		})
	}
}

// idle_replicas: 0 wakes the fleet to min_replicas, not 1.
func TestScaleToZeroIdleReplicas(t *testing.T) {
	reqs := []*trace.Request{req("a", 200*time.Second, 100, 10)}
	cfg := zeroCfg()
	cfg.Autoscale.MinReplicas, cfg.Autoscale.IdleReplicas = ptrInt(3), ptrInt(0)
	_, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if f := st.Fleet[100]; f.Ready+f.Starting != 0 {
		t.Errorf("fleet at 100 s: %+v, want none", f)
	}
	if f := st.Fleet[205]; f.Starting != 3 {
		t.Errorf("fleet at 205 s: %+v, want 3 starting", f)
	}
}

// in_flight counts running requests too: long decodes without a queue
// grow a fleet on it and not on queue_depth.
func TestAutoscaleInFlight(t *testing.T) {
	var reqs []*trace.Request
	for i := range 20 { // 20 × 1,100 tokens: far within 4,000 blocks
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*250*ms, 100, 1000))
	}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	most := func(metric string) float64 {
		cfg := Config{Workers: 1, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
			Metric: metric, Target: 4, MaxReplicas: 8, SyncPeriodSec: 1, ContainerStartSec: 1,
		}}
		_, _, st := replay(t, cfg, cost, 4000, reqs)
		m := 0.0
		for _, f := range st.Fleet {
			m = max(m, f.Ready)
		}
		return m
	}
	if q, f := most(MetricQueueDepth), most(MetricInFlight); !(q == 1 && f >= 3) {
		t.Errorf("most workers ready: queue_depth %v, in_flight %v; want 1 and several", q, f)
	}
}

func TestScaleToZeroConfigErrors(t *testing.T) {
	base := func(f func(a *AutoscaleConfig)) AutoscaleConfig {
		a := AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(0)}
		f(&a)
		return a
	}
	for _, tc := range []struct {
		a    AutoscaleConfig
		want string
	}{
		{base(func(a *AutoscaleConfig) { a.Metric = MetricKVUsage }), "autoscale.metric: kv_usage comes from the workers alone"},
		{base(func(a *AutoscaleConfig) { a.Metric, a.SLOTTFTSec = MetricSLOAttainment, 1 }), "autoscale.metric: slo_attainment"},
		{base(func(a *AutoscaleConfig) { a.Metric, a.SLOITLSec = MetricITLAttainment, 0.05 }), "autoscale.metric: itl_slo_attainment is a fraction of completions"},
		{base(func(a *AutoscaleConfig) { a.MinReplicas = ptrInt(-1) }), "autoscale.max_replicas"},
		{base(func(a *AutoscaleConfig) { a.IdleReplicas = ptrInt(0) }), "autoscale.idle_replicas: needs min_replicas of 1 or more"},
		{base(func(a *AutoscaleConfig) { a.MinReplicas, a.IdleReplicas = ptrInt(2), ptrInt(1) }), "autoscale.idle_replicas: 1: KEDA takes 0 alone"},
		{base(func(a *AutoscaleConfig) { a.ActivationTarget = -1 }), "autoscale.activation_target"},
		{base(func(a *AutoscaleConfig) { a.PollingIntervalSec = -5 }), "autoscale.polling_interval_s"},
		{base(func(a *AutoscaleConfig) { a.CooldownSec = ptr(-1) }), "autoscale.cooldown_s"},
		{base(func(a *AutoscaleConfig) { a.MinReplicas, a.CooldownSec = nil, ptr(60) }), "autoscale.cooldown_s: applies to scale to zero alone"},
		{base(func(a *AutoscaleConfig) { a.MinReplicas, a.PollingIntervalSec = ptrInt(1), 5 }), "autoscale.polling_interval_s: applies to scale to zero alone"},
		{base(func(a *AutoscaleConfig) { a.MinReplicas, a.ActivationTarget = nil, 2 }), "autoscale.activation_target: applies to scale to zero alone"},
	} {
		err := Config{Workers: 2, Autoscale: tc.a}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.a, err, tc.want)
		}
	}
	for _, a := range []AutoscaleConfig{
		base(func(*AutoscaleConfig) {}),
		base(func(a *AutoscaleConfig) { a.Metric = MetricRequestRate }),
		base(func(a *AutoscaleConfig) { a.Metric = MetricInFlight }),
		base(func(a *AutoscaleConfig) { a.MinReplicas, a.IdleReplicas = ptrInt(2), ptrInt(0) }),
	} {
		if err := (Config{Workers: 2, Autoscale: a}).Validate(); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
}

// TestScaleToZeroAzureCode replays the Azure code trace (whose arrivals
// pause for up to 217 s) at its own times on Llama-3.1-8B workers on A10,
// autoscaled by the HPA alone and by KEDA with scale to zero, and writes
// what scale to zero saves and costs to testdata/scaletozero_azure_code.md
// (run with -autoscaledemo; every run checks it).
func TestScaleToZeroAzureCode(t *testing.T) {
	reqs := readAzure(t, shareddata.Path(t, "traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
	cost, blocks := llama8BOn(t, "a10")
	var b strings.Builder
	b.WriteString("# Scale to zero on the Azure code trace\n\n")
	b.WriteString("8,819 requests at their own times (3,436 s; the arrivals pause 12 times for more than 60 s, at most 217 s, and come back in bursts),\n")
	b.WriteString("Llama-3.1-8B on A10 workers, least_requests router, 1 worker at the start; metric request_rate, target 0.5 a worker,\n")
	b.WriteString("HPA with up to 8 replicas, sync 15 s, scale-down window 60 s; a new worker is ready after 30 s + 16 GB at 2 GB/s = 38 s.\n")
	b.WriteString("KEDA rows: min_replicas 0, polled every polling_interval_s, to zero once cooldown_s has passed since the last poll that\n")
	b.WriteString("saw an arrival (request_rate above activation_target 0). Held: requests that waited at the gateway for a ready worker, and the longest wait;\n")
	b.WriteString("failed: those the gateway gave up on (gateway_timeout_s, the HTTP add-on's KEDA_CONDITION_WAIT_TIMEOUT).\n")
	b.WriteString("Regenerate: go test ./replay -run TestScaleToZeroAzureCode -autoscaledemo\n\n")
	b.WriteString("| autoscaler | GPU-hours | s at zero | TTFT p50 (s) | TTFT p99 (s) | TTFT max (s) | held | longest wait (s) | failed at the gateway |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range []struct {
		name                    string
		min                     int
		poll, cooldown, gateway float64
	}{
		{"HPA, min_replicas 1", 1, 0, 0, 0},
		{"KEDA, poll 30 s, cooldown 300 s (its defaults)", 0, 30, 300, 0},
		{"KEDA, poll 30 s, cooldown 60 s", 0, 30, 60, 0},
		{"KEDA, poll 5 s, cooldown 60 s", 0, 5, 60, 0},
		{"KEDA, poll 30 s, cooldown 60 s, gateway timeout 1.5 s (the HTTP add-on's default)", 0, 30, 60, 1.5},
	} {
		a := AutoscaleConfig{
			Metric: MetricRequestRate, Target: 0.5, MinReplicas: ptrInt(k.min), MaxReplicas: 8,
			ScaleDownStabilizationSec: ptr(60), ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2,
		}
		if k.min == 0 {
			a.PollingIntervalSec, a.CooldownSec, a.GatewayTimeoutSec = k.poll, ptr(k.cooldown), k.gateway
		}
		cfg := Config{Workers: 1, Router: RouterLeastRequests, Autoscale: a}
		var ttft []float64
		held, longest := 0, 0.0
		failed := 0
		st, err := Run(cfg, cost, blocks, reqs, func(r *trace.Request) error {
			if r.Status == trace.StatusOK {
				ttft = append(ttft, r.TTFTSec.V)
			}
			if strings.Contains(r.Error, "gateway_timeout_s") {
				failed++
			}
			if wait := r.WorkerArrival.V.Sub(r.RouterArrival.V).Seconds(); wait > 0 {
				held++
				longest = max(longest, wait)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed+failed != len(reqs) || st.Rejected != failed || (k.gateway == 0) != (failed == 0) {
			t.Errorf("%s: %d of %d completed, %d failed at the gateway", k.name, st.Completed, len(reqs), failed)
		}
		if st.Held != held || st.HeldMaxSec != longest {
			t.Errorf("%s: Stats say %d held, the longest %v s; the records %d, %v s", k.name, st.Held, st.HeldMaxSec, held, longest)
		}
		if longest > k.poll+38 {
			t.Errorf("%s: a wait of %v s, longer than a poll and a start", k.name, longest)
		}
		zero := 0.0
		for _, f := range st.Fleet[:len(st.Fleet)-1] { // the last second is partial
			zero += 1 - min(1, f.Ready+f.Starting+f.Draining)
		}
		slices.Sort(ttft)
		fmt.Fprintf(&b, "| %s | %.3f | %.0f | %.3f | %.3f | %.3f | %d | %.3f | %d |\n", k.name, st.GPUHours, zero,
			quantile(ttft, 0.5), quantile(ttft, 0.99), ttft[len(ttft)-1], held, longest, failed)
		if k.min == 1 && (zero != 0 || held != 0) {
			t.Errorf("%s: %v s at zero, %d held", k.name, zero, held)
		}
	}
	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "scaletozero_azure_code.md"), []byte(b.String()), *autoscaleDemo)
}

// The per-second statistics hold the requests waiting at the gateway,
// time-weighted: r0…r4, arriving a second apart from 100 s, wait until
// 130 s.
func TestScaleToZeroPerSecond(t *testing.T) {
	var reqs []*trace.Request
	for i := range 5 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), 100*time.Second+time.Duration(i)*time.Second, 100, 400))
	}
	st, err := RunInputs(zeroCfg(), linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, Requests(reqs),
		func(*trace.Request) error { return nil }, Options{PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]float64{99: 0, 100: 1, 101: 2, 102: 3, 103: 4, 104: 5, 129: 5, 130: 0}
	for sec, n := range want {
		if got := st.Seconds[sec].HeldAtGateway; got != n {
			t.Errorf("second %d: %v held, want %v", sec, got, n)
		}
	}
	var sum float64
	for _, s := range st.Seconds {
		sum += s.HeldAtGateway
	}
	if sum != 30+29+28+27+26 {
		t.Errorf("%v request-seconds held, want 140", sum)
	}
}

// Autoscaling with KV tiers: a worker that starts after the fleet went to
// zero has an empty GPU cache and empty host tier of its own, and the
// cluster's remote store as the stopped worker left it. A's prefix, stored
// by the first worker, is a remote hit for C on the second (31 blocks:
// the last is computed) and no hit at all with a host tier alone.
func TestAutoscaleWithTiers(t *testing.T) {
	t.Parallel()
	reqs := []*trace.Request{
		withHashes(req("A", 0, 512, 1), 64, ids(1, 8)...),
		withHashes(req("C", 200*time.Second, 512, 1), 64, ids(1, 8)...),
	}
	cfg, cost := tierConfig()
	cfg.Workers = 1
	cfg.Autoscale = AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(0), MaxReplicas: 2,
		PollingIntervalSec: 10, CooldownSec: ptr(30), ContainerStartSec: 20}
	for _, tc := range []struct {
		name               string
		host, remote       int64
		hostHit, remoteHit int64
	}{
		{"remote store", 0, 1000, 0, 496},
		{"host tier", 1000, 0, 0, 0},
		{"both", 1000, 1000, 0, 496},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byID, st := runTiers(t, cfg, cost, tierSpec(t, tc.host, 0, tc.remote), reqs)
			again, _ := runTiers(t, cfg, cost, tierSpec(t, tc.host, 0, tc.remote), reqs)
			if fmt.Sprint(byID["C"]) != fmt.Sprint(again["C"]) {
				t.Error("two replays differ")
			}
			c := byID["C"]
			if st.Completed != 2 || st.Held != 1 || c.WorkerArrival.V != trace.Time(220*time.Second) {
				t.Fatalf("%d completed, %d held, C at its worker at %v; want 2, 1, 220 s (the poll at 200 s, after its arrival, + start 20)", st.Completed, st.Held, c.WorkerArrival.V)
			}
			if c.HostHitTokens.V != tc.hostHit || c.RemoteHitTokens.V != tc.remoteHit || c.DeviceHitTokens.V != 0 {
				t.Errorf("C's hits: device %d, host %d, remote %d; want 0, %d, %d", c.DeviceHitTokens.V, c.HostHitTokens.V, c.RemoteHitTokens.V, tc.hostHit, tc.remoteHit)
			}
		})
	}
}

// Bursts with pauses on an autoscaled fleet with host, disk and remote
// tiers (vLLM's) or L2 and a remote L3 (SGLang's HiCache, both write
// policies), scaling to zero and not: every record passes the validator,
// no worker stops with a load in flight (the engine's end check), and
// vLLM's workers started later find the remote store's blocks.
func TestAutoscaleWithTiersBursts(t *testing.T) {
	t.Parallel()
	reqs := bursts(60, 10)
	for _, setup := range []string{"vllm", "sglang write_through", "sglang write_back"} {
		for _, min := range []int{0, 1} {
			cfg, cost := tierConfig()
			cfg.Scheduler.KVCacheTokens = 512 * 16 // room for the loads (a 64-block cache stalls on them)
			spec := tierSpec(t, 100, 200, 2000)
			if setup != "vllm" {
				cfg, cost = hiConfig(512 * 16)
				spec = hiSpec(t, 400, 0, 2000, PrefetchBestEffort, 1)
				if setup == "sglang write_back" {
					spec.WritePolicy = WriteBack
				}
			}
			cfg.Workers, cfg.Router = 2, RouterLeastRequests
			cfg.Autoscale = AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(min), MaxReplicas: 4,
				SyncPeriodSec: 5, ScaleDownStabilizationSec: ptr(20), ContainerStartSec: 10}
			if min == 0 {
				cfg.Autoscale.PollingIntervalSec, cfg.Autoscale.CooldownSec = 10, ptr(60)
			}
			byID, st := runTiers(t, cfg, cost, spec, reqs)
			if st.Completed != len(reqs) {
				t.Errorf("%s, min %d: %d of %d completed", setup, min, st.Completed, len(reqs))
			}
			var remote int64
			for _, r := range byID {
				if r.RouterArrival.V >= trace.Time(300*time.Second) {
					remote += r.RemoteHitTokens.V
				}
			}
			// (SGLang's prefetch threshold of 256 tokens passes few of
			// these short prompts: TestAutoscaleWithHiCache has its L3 hit.)
			if setup == "vllm" && remote == 0 || min == 0 && st.Held == 0 {
				t.Errorf("%s, min %d: %d remote hit tokens after the first pause, %d held", setup, min, remote, st.Held)
			}
		}
	}
}

// A worker scaled down while its request loads from its host tier drains
// until that request is served: A's prefix is computed on w1 (the tie
// broken by the seed) and stored to w1's host tier, B keeps w0 busy, C
// evicts A's prefix from w1's GPU cache, and Y, with A's prefix, starts
// loading it at 0.9 s over a slow PCIe link; the sync at 1 s drains w1
// (the newest worker), which must not stop until Y has loaded, run and
// left. (Stopping it under the load fails this: w1 is off in second 1.)
func TestAutoscaleDrainsDuringLoad(t *testing.T) {
	reqs := []*trace.Request{
		withHashes(req("A", 0, 512, 1), 64, ids(1, 8)...),
		withHashes(req("B", 10*ms, 64, 950), 64, 900), // 1,014 tokens: the other worker busy until 0.97 s
		withHashes(req("C", 200*ms, 1012, 1), 64, ids(100, 16)...),
		withHashes(req("Y", 900*ms, 512, 1), 64, ids(1, 8)...),
	}
	cfg, cost := tierConfig()
	cfg.Workers, cfg.Router = 2, RouterLeastRequests
	cfg.Autoscale = AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MaxReplicas: 2, SyncPeriodSec: 1,
		ScaleDownStabilizationSec: ptr(0)}
	spec := tierSpec(t, 1000, 0, 0)
	spec.Node.PCIe.Bandwidth = 130e6 // 65 MB of A's prefix in half a second
	byID, st := runTiers(t, cfg, cost, spec, reqs)
	y := byID["Y"]
	if y.Worker != "w1" || y.HostHitTokens.V != 496 || !(y.GPUStart.V > trace.Time(time.Second)) {
		for _, id := range []string{"A", "B", "C", "Y"} {
			r := byID[id]
			t.Logf("%s on %q: device hit %d, host hit %d, started %v, done %v", id, r.Worker, r.DeviceHitTokens.V, r.HostHitTokens.V, r.GPUStart.V, r.DoneAtRouter.V)
		}
		t.Fatalf("Y on %s, %d host hit tokens, started at %v: want w1, 496, after the 1 s sync", y.Worker, y.HostHitTokens.V, y.GPUStart.V)
	}
	if f := st.Fleet[1]; !(f.Draining > 0) {
		t.Errorf("second 1: %+v; want w1 draining while Y loads and runs", f)
	}
}

// SGLang's HiCache on an autoscaled fleet: after a scale to zero the new
// worker's radix cache and L2 are empty, and an L3 of the cluster (remote,
// mooncake's store) still holds A's pages, which C prefetches; a file L3
// (disk, the node's own) went with the stopped worker.
func TestAutoscaleWithHiCache(t *testing.T) {
	t.Parallel()
	reqs := []*trace.Request{
		withHashes(req("A", 0, 512, 1), 64, ids(1, 8)...),
		withHashes(req("C", 200*time.Second, 512, 1), 64, ids(1, 8)...),
	}
	for _, tc := range []struct {
		name               string
		disk, remote       int64
		wantDisk, wantRemo int64
	}{
		{"remote L3", 0, 1000, 0, 496},
		{"file L3", 1000, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, cost := hiConfig(200 * 16)
			cfg.Autoscale = AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(0), MaxReplicas: 2,
				PollingIntervalSec: 10, CooldownSec: ptr(30), ContainerStartSec: 20}
			byID, st := runTiers(t, cfg, cost, hiSpec(t, 1000, tc.disk, tc.remote, PrefetchWaitComplete, 1), reqs)
			c := byID["C"]
			if st.Completed != 2 || st.Held != 1 || c.WorkerArrival.V != trace.Time(220*time.Second) {
				t.Fatalf("%d completed, %d held, C at its worker at %v; want 2, 1, 220 s", st.Completed, st.Held, c.WorkerArrival.V)
			}
			if c.DeviceHitTokens.V != 0 || c.HostHitTokens.V != 0 || c.StorageHitTokens.V != tc.wantDisk || c.RemoteHitTokens.V != tc.wantRemo {
				t.Errorf("C's hits: device %d, host %d, storage %d, remote %d; want 0, 0, %d, %d",
					c.DeviceHitTokens.V, c.HostHitTokens.V, c.StorageHitTokens.V, c.RemoteHitTokens.V, tc.wantDisk, tc.wantRemo)
			}
		})
	}
}

// The gateway gives up on a request held longer than gateway_timeout_s
// (the KEDA HTTP add-on's KEDA_CONDITION_WAIT_TIMEOUT, 1.5 s by
// default): with a 30 s start the poll at 200 s wakes a worker ready at
// 230 s; a (200 s) and b (225 s) fail 1.5 s after they came, c (229 s)
// waits 1 s and is served.
func TestScaleToZeroGatewayTimeout(t *testing.T) {
	reqs := []*trace.Request{req("early", 0, 100, 10), req("a", 200*time.Second, 100, 10),
		req("b", 225*time.Second, 100, 10), req("c", 229*time.Second, 100, 10)}
	cfg := zeroCfg()
	cfg.Autoscale.GatewayTimeoutSec = 1.5
	byID, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.Completed != 2 || st.Rejected != 2 {
		t.Fatalf("%d completed, %d rejected; want 2 and 2", st.Completed, st.Rejected)
	}
	for id, at := range map[string]time.Duration{"a": 201500 * ms, "b": 226500 * ms} {
		r := byID[id]
		if r.Status != trace.StatusRejected || r.DoneAtRouter.V != trace.Time(at) || r.Worker != "" ||
			!strings.Contains(r.Error, "no ready worker within autoscale.gateway_timeout_s (1.5 s)") {
			t.Errorf("%s: %v at %v on %q, %q; want rejected by the gateway at %v", id, r.Status, r.DoneAtRouter.V, r.Worker, r.Error, at)
		}
	}
	if c := byID["c"]; c.Status != trace.StatusOK || c.WorkerArrival.V != trace.Time(230*time.Second) {
		t.Errorf("c: %v, at its worker at %v; want served from 230 s", c.Status, c.WorkerArrival.V)
	}
	if err := (Config{Workers: 2, Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, GatewayTimeoutSec: 5}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "autoscale.gateway_timeout_s: applies to scale to zero alone") {
		t.Errorf("gateway_timeout_s without scale to zero: %v", err)
	}
}
