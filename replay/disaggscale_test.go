package replay

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// pdBurst is a burst of 400 requests of 300 prompt and 40 output tokens,
// 40 a second for 10 s, then one every 20 s.
func pdBurst() []*trace.Request {
	var reqs []*trace.Request
	for i := range 400 {
		reqs = append(reqs, req(fmt.Sprintf("b%d", i), time.Duration(i)*25*ms, 300, 40))
	}
	for i := range 5 {
		reqs = append(reqs, req(fmt.Sprintf("t%d", i), 30*time.Second+time.Duration(i)*20*time.Second, 300, 40))
	}
	return reqs
}

// pdHPA is an HPA on metric at target, up to most replicas, syncing every
// second, scaling down after 10 s, its workers ready 2 s after they are
// asked for.
func pdHPA(metric string, target float64, most int) AutoscaleConfig {
	return AutoscaleConfig{Metric: metric, Target: target, MaxReplicas: most, SyncPeriodSec: 1,
		ScaleDownStabilizationSec: ptr(10), ContainerStartSec: 2}
}

// checkedPD replays reqs under cfg, checking as it goes that the router
// sends requests to ready prefill workers alone, that decode workers are
// chosen among the ready ones alone, and that no worker steps while it is
// off or starting.
func checkedPD(t *testing.T, cfg Config, reqs []*trace.Request) ([]*trace.Request, Stats) {
	t.Helper()
	return checkedPDTiers(t, cfg, reqs, nil)
}

// checkedPDTiers is checkedPD with the KV tiers off (nil) or on.
func checkedPDTiers(t *testing.T, cfg Config, reqs []*trace.Request, off *Offload) ([]*trace.Request, Stats) {
	t.Helper()
	return checkedPDWith(t, cfg, reqs, Options{Offload: off}, nil)
}

// checkedPDAt is checkedPD that calls atEnd with the engine at the end.
func checkedPDAt(t *testing.T, cfg Config, reqs []*trace.Request, atEnd func(*engine)) ([]*trace.Request, Stats) {
	t.Helper()
	return checkedPDWith(t, cfg, reqs, Options{}, atEnd)
}

// checkedPDWith is checkedPD with opts' KV tiers and prefill pool, and
// atEnd, when set, called with the engine at the end. It checks an
// aggregated fleet that the planner sizes as well (every request routed
// to a ready worker).
func checkedPDWith(t *testing.T, cfg Config, reqs []*trace.Request, opts Options, atEnd func(*engine)) ([]*trace.Request, Stats) {
	t.Helper()
	var eng *engine
	var errs []string
	bad := func(format string, args ...any) {
		if len(errs) < 5 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	sw := testSwitches{
		routed: func(e *engine, q *Routed, w int) {
			eng = e
			if e.pd != nil && w >= e.pd.prefill || e.scale.state[w] != slotReady {
				bad("request %d routed at %v to slot %d (state %d), not a ready prefill worker", q.Index, q.At, w, e.scale.state[w])
			}
		},
		choseDecode: func(e *engine, w int) {
			if w < e.pd.prefill || e.scale.state[w] != slotReady {
				bad("decode slot %d (state %d) chosen, not a ready decode worker", w, e.scale.state[w])
			}
		},
		atEnd: atEnd,
	}
	var all []*trace.Request
	st, err := RunInputs(cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		return nil
	}, Options{test: sw, Offload: opts.Offload, Prefill: opts.Prefill, Observe: func(s *Step) error {
		if eng != nil {
			if st := eng.scale.state[s.Worker]; st == slotOff || st == slotStarting {
				bad("slot %d stepped at %v in state %d", s.Worker, s.Start, st)
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
	return all, st
}

// Each pool of a disaggregated fleet is sized by its own HPA: a burst
// grows both, the idle tail takes both back to one worker, the per-second
// fleet splits into the pools, and requests go to ready workers alone, on
// vLLM's proxy and on SGLang's router.
func TestDisaggregatedAutoscale(t *testing.T) {
	t.Parallel()
	reqs := pdBurst()
	for _, eng := range []string{EngineVLLM, EngineSGLang} {
		t.Run(eng, func(t *testing.T) {
			d := pdConfig(1)
			d.PrefillAutoscale = pdHPA(MetricQueueDepth, 2, 3)
			d.DecodeAutoscale = pdHPA(MetricInFlight, 8, 4)
			cfg := Config{Workers: 2, Router: RouterLeastRequests, Disaggregation: d, Scheduler: SchedulerConfig{Engine: eng}}
			if eng == EngineSGLang {
				cfg.Scheduler.BlockSize, cfg.Scheduler.KVCacheTokens = 1, 100_000
			}
			all, st := checkedPD(t, cfg, reqs)
			again, st2 := checkedPD(t, cfg, reqs)
			if dump(all) != dump(again) || st.GPUHours != st2.GPUHours {
				t.Error("two replays differ")
			}
			if st.Completed != len(reqs) {
				t.Fatalf("%d of %d completed", st.Completed, len(reqs))
			}
			var prefillMost, decodeMost float64
			for _, f := range st.Fleet {
				prefillMost, decodeMost = max(prefillMost, f.PrefillReady), max(decodeMost, f.DecodeReady)
				if math.Abs(f.PrefillReady+f.DecodeReady-f.Ready) > 1e-9 {
					t.Errorf("second %d: %v prefill and %v decode workers ready, %v in all", f.Second, f.PrefillReady, f.DecodeReady, f.Ready)
				}
			}
			last := st.Fleet[len(st.Fleet)-2] // the last whole second
			if prefillMost < 2 || decodeMost < 2 || last.PrefillReady != 1 || last.DecodeReady != 1 || last.Starting+last.Draining != 0 {
				t.Errorf("at most %v prefill and %v decode workers ready, at the end %+v; want growth of both and a return to 1 each", prefillMost, decodeMost, last)
			}
			checkGPUHours(t, st)
			// The prefill pool's slots are w0–w2, the decode pool's
			// w3–w6: a record names its decode worker.
			used := map[string]bool{}
			for _, r := range all {
				used[r.Worker] = true
				if n := strings.TrimPrefix(r.Worker, "w"); n < "3" || n > "6" {
					t.Errorf("%s: decode worker %s is not of the decode pool's slots", r.RequestID, r.Worker)
				}
			}
			if len(used) < 2 {
				t.Errorf("decode workers used: %v; want the pool's new ones too", used)
			}
		})
	}
}

// A pool without an HPA keeps its workers while the other scales; the
// fleet's time prices both.
func TestDisaggregatedAutoscaleOnePool(t *testing.T) {
	t.Parallel()
	d := pdLeast(2)
	d.DecodeAutoscale = pdHPA(MetricInFlight, 8, 4)
	_, st := checkedPD(t, Config{Workers: 3, Router: RouterRoundRobin, Disaggregation: d}, pdBurst())
	var decodeMost float64
	for _, f := range st.Fleet[:len(st.Fleet)-1] {
		if f.PrefillReady != 2 {
			t.Fatalf("second %d: %v prefill workers ready; want the 2 without an HPA throughout", f.Second, f.PrefillReady)
		}
		decodeMost = max(decodeMost, f.DecodeReady)
	}
	if decodeMost < 2 {
		t.Errorf("at most %v decode workers ready; want growth", decodeMost)
	}
	if end := st.End.Seconds() / 3600; st.GPUHours < 2*end || st.GPUHours > 6*end {
		t.Errorf("GPU-hours %v over %v hours; want the prefill pool's 2 workers and the decode pool's 1 to 4", st.GPUHours, end)
	}
}

func TestDisaggregatedAutoscaleConfigErrors(t *testing.T) {
	hpa := pdHPA(MetricQueueDepth, 2, 3)
	for _, tc := range []struct {
		name string
		c    func(c *Config)
		want string
	}{
		{"fleet HPA", func(c *Config) { c.Autoscale = hpa }, "autoscale: sizes a fleet of one pool"},
		{"pool to zero", func(c *Config) {
			c.Disaggregation.DecodeAutoscale = hpa
			c.Disaggregation.DecodeAutoscale.MinReplicas = ptrInt(0)
		}, "disaggregation.decode_autoscale.min_replicas: scale to zero of a pool is not modelled yet"},
		{"bad target", func(c *Config) {
			c.Disaggregation.PrefillAutoscale = hpa
			c.Disaggregation.PrefillAutoscale.Target = -1
		}, "disaggregation.prefill_autoscale.target: -1 is not a positive number"},
		{"bad range", func(c *Config) {
			c.Disaggregation.PrefillAutoscale = hpa
			c.Disaggregation.PrefillAutoscale.MinReplicas = ptrInt(5)
		}, "disaggregation.prefill_autoscale.max_replicas"},
		{"GPUs", func(c *Config) {
			c.Disaggregation.PrefillAutoscale, c.Disaggregation.DecodeAutoscale = hpa, hpa
			c.Disaggregation.DecodeAutoscale.GPUsPerWorker = 2
		}, "disaggregation.decode_autoscale.gpus_per_worker: 2, the prefill pool's 1"},
		{"servers", func(c *Config) {
			c.Disaggregation.PrefillAutoscale = hpa
			c.Disaggregation.PrefillAutoscale.ReplicaWorkers = 2
		}, "disaggregation.prefill_autoscale: the workers (1) are not whole replicas of 2 workers each"},
	} {
		c := Config{Workers: 3, Disaggregation: pdConfig(1)}
		tc.c(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A draining worker stops only once nothing of the hand-over involves it:
// a prefill worker while its link still sends a prompt's KV, a decode
// worker while a request is on its way to it (SGLang pre-allocated its
// tokens there when it arrived).
func TestDisaggregatedDrain(t *testing.T) {
	t.Parallel()
	// Scaled down at the first sync (1 s): nothing waits, a target of
	// 100 asks for one worker.
	down := AutoscaleConfig{Metric: MetricInFlight, Target: 100, MaxReplicas: 2, SyncPeriodSec: 1, ScaleDownStabilizationSec: ptr(0)}
	slow := pdConfig(2)
	slow.TransferGBps = 1e-4 // 300 tokens' KV (300 kB) in 3 s
	slow.PrefillAutoscale = down
	// a on w0, b on w1 (round-robin); b's KV leaves w1 from about 0.57 s
	// to 3.57 s, so w1, the newest ready, drains from 1 s to then.
	reqs := []*trace.Request{req("a", 0, 300, 2), req("b", 500*ms, 300, 2)}
	out, st := checkedPD(t, Config{Workers: 3, Router: RouterRoundRobin, Disaggregation: slow}, reqs)
	if len(out) != 2 || st.Completed != 2 {
		t.Fatalf("%d records, %d completed", len(out), st.Completed)
	}
	for s := 1; s <= 2; s++ {
		if f := st.Fleet[s]; f.Draining != 1 || f.PrefillReady != 1 {
			t.Errorf("prefill pool, second %d: %+v; want w1 draining while it sends b's KV", s, f)
		}
	}
	if f := st.Fleet[3]; !(f.Draining > 0.5 && f.Draining < 0.6) {
		t.Errorf("prefill pool, second 3: %+v, the replay ending at %v; want w1 stopped once b's KV was sent (3.57 s)", f, st.End)
	}

	// SGLang: b's decode worker, w2 of w1–w2, is chosen when b arrives
	// (0.95 s) and holds its tokens there; its 1,000-token prefill ends
	// at 1.06 s and its KV (1 MB at 1 MB/s) reaches w2 at 2.06 s, so w2,
	// asked to drain at 1 s with nothing in its queue and no transfer
	// to it under way, drains until then.
	sg := pdConfig(1)
	sg.TransferGBps = 1e-3
	sg.DecodeAutoscale = down
	cfg := Config{Workers: 3, Router: RouterRoundRobin, Disaggregation: sg, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 5000}}
	out, st = checkedPD(t, cfg, []*trace.Request{req("a", 0, 300, 2), req("b", 950*ms, 1000, 2)})
	if len(out) != 2 || st.Completed != 2 || out[1].Worker != "w2" {
		t.Fatalf("%d records, %d completed, b on %s; want b on w2", len(out), st.Completed, out[1].Worker)
	}
	if f := st.Fleet[1]; f.Draining != 1 || f.DecodeReady != 1 {
		t.Errorf("decode pool, second 1: %+v; want w2 draining while b is on its way", f)
	}
}

// request_rate is the prefill pool's arrivals and the decode pool's
// hand-overs, each per its workers: 4 requests a second ask for 2
// prefill workers at 2 a worker, and 4 decode workers at 1.
func TestDisaggregatedPoolRequestRate(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i := range 120 { // 4 a second for 30 s
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*250*ms, 100, 4))
	}
	d := pdConfig(1)
	d.PrefillAutoscale = pdHPA(MetricRequestRate, 2, 8)
	d.DecodeAutoscale = pdHPA(MetricRequestRate, 1, 8)
	_, st := checkedPD(t, Config{Workers: 2, Disaggregation: d}, reqs)
	f := st.Fleet[20]
	if f.PrefillReady != 2 || f.DecodeReady != 4 {
		t.Errorf("second 20: %+v; want 2 prefill and 4 decode workers ready", f)
	}
}

// A pool's metric is its own workers': requests decoding on the decode
// pool do not grow the prefill pool.
func TestDisaggregatedPoolMetric(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i := range 20 { // short prompts, long replies
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*ms, 10, 2000))
	}
	d := pdConfig(1)
	d.PrefillAutoscale = pdHPA(MetricInFlight, 2, 4)
	_, st := checkedPD(t, Config{Workers: 3, Disaggregation: d}, reqs)
	for _, f := range st.Fleet {
		if f.PrefillReady+f.Starting > 1 {
			t.Fatalf("second %d: %+v; want the prefill pool at one worker, its requests long gone to the decode pool", f.Second, f)
		}
	}
}
