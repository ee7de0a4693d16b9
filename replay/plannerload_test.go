package replay

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// The thresholds of each optimization target, at and around their
// boundaries (load_scaling.py's comparisons: a prefill engine's queue
// scales up at the threshold or above; a decode engine's KV demand above
// it, at it too under load; down when every engine is below, or at
// most, the down threshold).
func TestLoadThresholdsDecide(t *testing.T) {
	t.Parallel()
	up, down, kvUp, kvDown := int64(5000), int64(500), 80.0, 20.0
	load := PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, PrefillScaleUpQueueTokens: &up,
		PrefillScaleDownQueueTokens: &down, DecodeScaleUpKVRate: &kvUp, DecodeScaleDownKVRate: &kvDown}
	for _, tc := range []struct {
		target  string
		prefill bool
		cur     int
		loads   []float64
		least   int
		want    int
	}{
		{TargetThroughput, true, 2, []float64{0.2, 1}, 1, 3},       // one engine at a context length: up
		{TargetThroughput, true, 2, []float64{0.2, 0.999}, 1, 2},   // below: no change
		{TargetThroughput, true, 2, []float64{0.05, 0.0999}, 1, 1}, // all below 0.1: down
		{TargetThroughput, true, 2, []float64{0.05, 0.1}, 1, 2},    // one at 0.1: not below
		{TargetThroughput, true, 1, []float64{0}, 1, 1},            // one engine stays
		{TargetThroughput, true, 3, []float64{0, 0, 0}, 3, 3},      // min_endpoint
		{TargetThroughput, true, 0, nil, 1, 0},                     // no engine: no decision
		{TargetThroughput, false, 2, []float64{0.5, 1}, 1, 2},      // KV demand at capacity: not above
		{TargetThroughput, false, 2, []float64{0.5, 1.0001}, 1, 3}, // above: up
		{TargetThroughput, false, 2, []float64{0.59, 0.3}, 1, 1},   // all below 60 %: down
		{TargetThroughput, false, 2, []float64{0.6, 0.3}, 1, 2},    // one at 60 %
		{TargetLatency, true, 2, []float64{0, 0.1}, 1, 3},          // a tenth of a context: up
		{TargetLatency, true, 2, []float64{0, 0.0001}, 1, 2},       // any queue: no scale-down
		{TargetLatency, true, 2, []float64{0, 0}, 1, 1},            // empty queues: down
		{TargetLatency, false, 2, []float64{0.4, 0}, 1, 2},         // 40 %: not above
		{TargetLatency, false, 2, []float64{0.41, 0}, 1, 3},        // above 40 %: up
		{TargetLatency, false, 2, []float64{0.0999, 0.05}, 1, 1},   // below 10 %: down
		{TargetLatency, false, 2, []float64{0.1, 0.05}, 1, 2},      // one at 10 %
		{TargetLoad, true, 2, []float64{4999, 5000}, 1, 3},         // at the up tokens: up
		{TargetLoad, true, 2, []float64{500, 0}, 1, 1},             // at most the down tokens: down
		{TargetLoad, true, 2, []float64{501, 0}, 1, 2},             // one above
		{TargetLoad, false, 2, []float64{0.8, 0}, 1, 3},            // at the up rate: up
		{TargetLoad, false, 2, []float64{0.2, 0.1}, 1, 1},          // at most the down rate: down
		{TargetLoad, false, 2, []float64{0.2001, 0.1}, 1, 2},       // one above
	} {
		cfg := PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: tc.target}
		if tc.target == TargetLoad {
			cfg = load
		}
		if got := cfg.withDefaults().thresholds().decide(tc.cur, tc.loads, tc.prefill, tc.least); got != tc.want {
			t.Errorf("%s, prefill %v: %d engines at loads %v (min %d) → %d, want %d", tc.target, tc.prefill, tc.cur, tc.loads, tc.least, got, tc.want)
		}
	}
}

// The budget guard: a proposal within the budget stands; beyond it, it
// is scaled down in proportion, a pool held where that leaves the range
// from its engines to its proposal; at a full budget a pool grows only as
// the other shrinks.
func TestLoadGuardBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gp, budget      int // GPUs of a prefill engine (a decode one's 1), the budget
		cur, next, want [2]int
	}{
		{1, 8, [2]int{1, 6}, [2]int{2, 6}, [2]int{2, 6}}, // within
		{1, 8, [2]int{1, 6}, [2]int{2, 7}, [2]int{1, 7}}, // 9 GPUs: the prefill pool's share floored, the decode pool the rest
		{1, 8, [2]int{1, 7}, [2]int{2, 7}, [2]int{1, 7}}, // full: held
		{1, 8, [2]int{1, 7}, [2]int{2, 6}, [2]int{2, 6}}, // full, the other shrinking: stands
		{2, 8, [2]int{3, 2}, [2]int{3, 3}, [2]int{3, 2}}, // 9 GPUs: the scaled decode pool (2) is its current
		{2, 8, [2]int{2, 3}, [2]int{3, 3}, [2]int{2, 3}}, // 9: prefill floored to 2, held
	} {
		p := &planner{cfg: PlannerConfig{Policy: PlannerDynamoLoad, MaxGPUBudget: tc.budget, MinEndpoint: 1, GPUsPerWorker: 1, PrefillGPUsPerWorker: tc.gp}}
		np, nd := p.guardBudget(tc.cur, tc.next)
		if got := [2]int{np, nd}; got != tc.want {
			t.Errorf("%d GPUs a prefill engine, budget %d: %v → %v gives %v, want %v", tc.gp, tc.budget, tc.cur, tc.next, got, tc.want)
		}
	}
}

// loadPD is a disaggregated cluster of one prefill and one decode worker
// (checkedPD's: 10 ms + 0.2 ms a token, 400 blocks of 16 tokens a
// worker), a request at a time on each (max_num_seqs 1), a context of
// 4,096 tokens, under the dynamo policy every 5 s; workers start in 7 s.
func loadPD(target string) Config {
	d := pdConfig(1)
	d.Planner = PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: target, MaxGPUBudget: 20, ContainerStartSec: 7}
	cfg := Config{Workers: 2, Router: RouterLeastRequests, Disaggregation: d}
	cfg.Scheduler.MaxNumSeqs, cfg.Scheduler.ContextLength = 1, 4096
	return cfg
}

// The first adjustment, by hand: 60 prompts of 1,000 tokens at once on
// the prefill worker, a request a step of 210 ms: at 5 s, 23 done and the
// 24th in its step, 36 queued: 36,000 tokens, 8.7890625 context lengths, so
// the prefill pool asks for a second engine. The decode worker, fed one
// request every 210 ms, takes 20.4 ms for its two tokens: a KV demand far
// below capacity, but one engine stays. At 10 s the new prefill worker is
// still starting (7 s): nothing is decided.
func TestPlannerDynamoLoadByHand(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i := range 60 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), 0, 1000, 2))
	}
	_, st := checkedPD(t, loadPD(TargetThroughput), reqs)
	if len(st.Planner) < 2 {
		t.Fatalf("%d adjustments", len(st.Planner))
	}
	first, second := st.Planner[0], st.Planner[1]
	if first.At != trace.Time(5*time.Second) || first.Skipped || first.PrefillLoad != 8.7890625 || first.Prefill != 2 || first.Decode != 1 || !(first.DecodeLoad < 0.6) {
		t.Errorf("first adjustment %+v; want at 5 s, prefill load 8.7890625 → 2 engines, decode 1", first)
	}
	if second.At != trace.Time(10*time.Second) || !second.Skipped || !math.IsNaN(second.PrefillLoad) {
		t.Errorf("second adjustment %+v; want at 10 s, skipped (a worker starting)", second)
	}
}

// Under load and after it: 10 prompts a second for 40 s, more than one
// prefill engine (210 ms each) or one decode engine (a request at a time,
// 51 tokens of 10.2 ms) serves, then one a second for 80 s, each done
// 0.98 s into its second, before the next adjustment looks (latency's
// decode pool shrinks only when every engine's KV demand is below 10 %,
// a request's 16 %). Both pools grow and shrink back to one engine; every adjustment is the rule applied
// to the loads it logs, from the engines the one before asked for, and
// every skipped one has a worker starting.
func TestPlannerDynamoLoadFollowsTheLoad(t *testing.T) {
	t.Parallel()
	for _, target := range []string{TargetThroughput, TargetLatency} {
		t.Run(target, func(t *testing.T) {
			var reqs []*trace.Request
			for i := range 400 {
				reqs = append(reqs, req(fmt.Sprintf("h%d", i), time.Duration(i)*100*ms+50*ms, 1000, 50))
			}
			for i := range 80 {
				reqs = append(reqs, req(fmt.Sprintf("l%d", i), 40*time.Second+time.Duration(i)*time.Second+250*ms, 1000, 50))
			}
			var changes []fleetChange
			_, st := checkedPDAt(t, loadPD(target), reqs, func(e *engine) { changes = e.scale.changes })
			if st.Completed != len(reqs) {
				t.Fatalf("%d of %d completed", st.Completed, len(reqs))
			}
			upP, downP, upD, downD := 1.0, 0.1, 1.0, 0.6
			if target == TargetLatency {
				upP, downP, upD, downD = 0.1, 1e-300, 0.4, 0.1 // latency's prefill: down only at 0
			}
			cur := [2]int{1, 1}
			most := [2]int{1, 1}
			for _, a := range st.Planner {
				if a.Skipped {
					var starting int
					for _, c := range changes {
						if c.at <= a.At {
							starting = c.starting
						}
					}
					if starting == 0 {
						t.Errorf("adjustment at %v skipped with no worker starting", a.At)
					}
					continue
				}
				want := cur
				for i, l := range []struct {
					load, up, down float64
					strict         bool
				}{{a.PrefillLoad, upP, downP, false}, {a.DecodeLoad, upD, downD, true}} {
					switch {
					case l.load >= l.up && !l.strict || l.load > l.up:
						want[i]++
					case l.load < l.down && cur[i] > 1:
						want[i]--
					}
				}
				if got := [2]int{a.Prefill, a.Decode}; got != want {
					t.Errorf("at %v: loads %v, %v from %v engines → %v, want %v", a.At, a.PrefillLoad, a.DecodeLoad, cur, got, want)
				}
				cur = [2]int{a.Prefill, a.Decode}
				most = [2]int{max(most[0], cur[0]), max(most[1], cur[1])}
			}
			if most[0] < 2 || most[1] < 2 || cur != [2]int{1, 1} {
				t.Errorf("engines at most %v and at the last adjustment %v; want both pools grown and back to one", most, cur)
			}
			t.Logf("%s: %d adjustments, engines at most %v", target, len(st.Planner), most)
		})
	}
}

// The dynamo policy's settings: what each target takes and refuses.
func TestPlannerDynamoLoadConfig(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		p    PlannerConfig
		want string // "" when valid
	}{
		{"throughput", PlannerConfig{Policy: PlannerDynamoLoad}, ""},
		{"latency", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLatency}, ""},
		{"load", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, PrefillScaleUpQueueTokens: i64(1000),
			PrefillScaleDownQueueTokens: i64(0), DecodeScaleUpKVRate: f64(90), DecodeScaleDownKVRate: f64(70)}, ""},
		{"load without thresholds", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad},
			"load needs prefill_scale_up_queue_tokens, prefill_scale_down_queue_tokens, decode_scale_up_kv_rate and decode_scale_down_kv_rate"},
		{"up not above down", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, PrefillScaleUpQueueTokens: i64(10),
			PrefillScaleDownQueueTokens: i64(10), DecodeScaleUpKVRate: f64(90), DecodeScaleDownKVRate: f64(70)}, "10 tokens is not above"},
		{"rate above 100", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, PrefillScaleUpQueueTokens: i64(10),
			PrefillScaleDownQueueTokens: i64(1), DecodeScaleUpKVRate: f64(120), DecodeScaleDownKVRate: f64(70)}, "120 % is not above"},
		{"thresholds of throughput", PlannerConfig{Policy: PlannerDynamoLoad, DecodeScaleUpKVRate: f64(90)}, "throughput has its own thresholds"},
		{"SLA setting", PlannerConfig{Policy: PlannerDynamoLoad, ITLSec: 0.01}, "disaggregation.planner.itl_s: an SLA planner setting"},
		{"target of the SLA planner", PlannerConfig{Policy: PlannerDynamoSLA, OptimizationTarget: TargetLatency}, "need policy dynamo"},
		{"unknown target", PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: "power"}, `"power" is not throughput, latency or load`},
		{"unknown policy", PlannerConfig{Policy: "hpa"}, `"hpa" is not dynamo_sla or dynamo`},
	} {
		// Each on a disaggregated fleet's pools, then on an
		// aggregated fleet (but the load target's prefill thresholds).
		if tc.p.PrefillScaleUpQueueTokens == nil && tc.p.OptimizationTarget != TargetLoad {
			agg := Config{Workers: 2, Planner: tc.p}
			agg.Scheduler.ContextLength = 4096
			_, err := RunInputs(agg, linearCost{Base: 10 * ms}, 400, Requests([]*trace.Request{req("a", 0, 100, 2)}), func(*trace.Request) error { return nil }, Options{})
			want := strings.ReplaceAll(tc.want, "disaggregation.planner.", "planner.")
			if tc.name == "target of the SLA planner" {
				want = "dynamo_sla on an aggregated fleet: not modelled yet"
			}
			switch {
			case want == "" && err != nil:
				t.Errorf("aggregated, %s: %v", tc.name, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("aggregated, %s: %v, want %q", tc.name, err, want)
			}
		}
		cfg := loadPD(TargetThroughput)
		cfg.Disaggregation.Planner = tc.p
		_, err := RunInputs(cfg, linearCost{Base: 10 * ms}, 400, Requests([]*trace.Request{req("a", 0, 100, 2)}), func(*trace.Request) error { return nil }, Options{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// An aggregated fleet's planner: the load target's KV rates alone,
	// one pool, alone in sizing the fleet, within its budget.
	kv := func(v float64) *float64 { return &v }
	tokens := int64(100)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"load", Config{Workers: 2, Planner: PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, DecodeScaleUpKVRate: kv(90), DecodeScaleDownKVRate: kv(50)}}, ""},
		{"prefill thresholds", Config{Workers: 2, Planner: PlannerConfig{Policy: PlannerDynamoLoad, OptimizationTarget: TargetLoad, PrefillScaleUpQueueTokens: &tokens, DecodeScaleUpKVRate: kv(90), DecodeScaleDownKVRate: kv(50)}},
			"planner.prefill_scale_up_queue_tokens: an aggregated fleet scales on its engines' KV demand alone"},
		{"prefill GPUs", Config{Workers: 2, Planner: PlannerConfig{Policy: PlannerDynamoLoad, PrefillGPUsPerWorker: 2}}, "planner.prefill_gpus_per_worker: an aggregated fleet has one pool"},
		{"with autoscale", Config{Workers: 2, Planner: PlannerConfig{Policy: PlannerDynamoLoad}, Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 2}}, "planner: sizes the fleet: not with autoscale"},
		{"with disaggregation", Config{Workers: 2, Planner: PlannerConfig{Policy: PlannerDynamoLoad}, Disaggregation: pdConfig(1)}, "with disaggregation, disaggregation.planner sizes the pools"},
		{"budget", Config{Workers: 9, Planner: PlannerConfig{Policy: PlannerDynamoLoad}}, "planner.max_gpu_budget: 8 GPUs, fewer than the 9 workers at the start take"},
	} {
		_, err := RunInputs(tc.cfg, linearCost{Base: 10 * ms}, 400, Requests([]*trace.Request{req("a", 0, 100, 2)}), func(*trace.Request) error { return nil }, Options{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("aggregated, %s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("aggregated, %s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Throughput and latency weigh a prefill queue in context lengths.
	cfg := loadPD(TargetThroughput)
	cfg.Scheduler.ContextLength = 0
	if _, err := RunInputs(cfg, linearCost{Base: 10 * ms}, 400, Requests([]*trace.Request{req("a", 0, 100, 2)}), func(*trace.Request) error { return nil }, Options{}); err == nil ||
		!strings.Contains(err.Error(), "the scheduler's context_length is not set") {
		t.Errorf("no context length: %v", err)
	}
}

// An aggregated fleet under the dynamo policy (Config.Planner), its first
// adjustment by hand: 60 prompts of 1,000 tokens at once on one worker
// (400 blocks of 16 tokens), a request at a time, 220.2 ms each (its
// prefill, 210 ms, and a decode step of 10.2 ms for its second token): at
// 5 s, 22 done, the 23rd in its prefill (4.8444–5.0544 s), 37 queued
// (37,000 tokens still to compute). The worker shows its latest built
// step, as it does to the HPA: fast-forward built the 23rd's decode step
// (at 5.0544 s, 1,001 tokens of KV) when its prefill's was built, nothing
// else able to reach the worker before it. So 38,001 of 6,400 tokens,
// 5.93765625, above 100 %: the fleet asks for a second engine; at 10 s it
// is still starting. Under load and after it the fleet grows and shrinks
// back to one.
func TestPlannerDynamoLoadAggregated(t *testing.T) {
	t.Parallel()
	agg := func() Config {
		cfg := Config{Workers: 1, Router: RouterLeastRequests,
			Planner: PlannerConfig{Policy: PlannerDynamoLoad, MaxGPUBudget: 20, ContainerStartSec: 7}}
		cfg.Scheduler.MaxNumSeqs = 1
		return cfg
	}
	var reqs []*trace.Request
	for i := range 60 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), 0, 1000, 2))
	}
	_, st := checkedPDWith(t, agg(), reqs, Options{}, nil)
	if len(st.Planner) < 2 {
		t.Fatalf("%d adjustments", len(st.Planner))
	}
	first, second := st.Planner[0], st.Planner[1]
	if first.At != trace.Time(5*time.Second) || first.Skipped || first.DecodeLoad != 5.93765625 || first.Decode != 2 || !math.IsNaN(first.PrefillLoad) {
		t.Errorf("first adjustment %+v; want at 5 s, load 5.93765625 → 2 engines", first)
	}
	if !second.Skipped {
		t.Errorf("second adjustment %+v; want skipped (a worker starting)", second)
	}

	reqs = nil
	for i := range 160 { // 4 a second, 720 ms each
		reqs = append(reqs, req(fmt.Sprintf("h%d", i), time.Duration(i)*250*ms+50*ms, 1000, 50))
	}
	for i := range 80 {
		reqs = append(reqs, req(fmt.Sprintf("l%d", i), 40*time.Second+time.Duration(i)*time.Second+250*ms, 1000, 50))
	}
	_, st = checkedPDWith(t, agg(), reqs, Options{}, nil)
	most, last := 1, 1
	for _, a := range st.Planner {
		if !a.Skipped {
			most, last = max(most, a.Decode), a.Decode
		}
	}
	if st.Completed != len(reqs) || most < 3 || last != 1 {
		t.Errorf("%d of %d completed, engines at most %d and at the last adjustment %d; want the fleet grown and back to one", st.Completed, len(reqs), most, last)
	}
}
