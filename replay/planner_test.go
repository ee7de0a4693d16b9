package replay

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// The GPU budget is shared as Dynamo's _apply_global_gpu_budget shares it,
// worked by hand.
func TestPlannerBudget(t *testing.T) {
	for _, tc := range []struct {
		gpus, budget, p, d, wantP, wantD int
		prefillGPUs                      int // a prefill worker's, when its own (0: gpus)
	}{
		{1, 8, 1, 1, 1, 1, 0},
		{1, 8, 3, 5, 3, 5, 0},
		{1, 8, 3, 7, 2, 6, 0},  // ×0.8: ⌊2.4⌋ prefill, the rest decode
		{1, 8, 10, 1, 7, 1, 0}, // ⌊7.27⌋, capped at 8 − 1 so decode keeps one
		{2, 8, 3, 3, 2, 2, 0},  // 12 GPUs: ⌊2⌋ prefill (4 GPUs), decode (8 − 4)/2
		{1, 8, 1, 20, 1, 7, 0},
		// Prefill workers of 1 GPU, decode workers of 2: 4 + 4 take 12
		// GPUs, ×2/3: ⌊2.67⌋ prefill, the 6 GPUs left 3 decode; 10 + 1
		// take 12: ⌊6.67⌋ prefill capped at (8 − 2)/1, the 2 left one
		// decode; 1 + 1 fit.
		{2, 8, 4, 4, 2, 3, 1},
		{2, 8, 10, 1, 6, 1, 1},
		{2, 8, 1, 1, 1, 1, 1},
		{2, 8, 20, 1, 6, 1, 1}, // ⌊7.27⌋ capped at (8 − 2)/1: decode keeps its one worker's 2 GPUs
	} {
		p := &planner{cfg: PlannerConfig{GPUsPerWorker: tc.gpus, MaxGPUBudget: tc.budget, MinEndpoint: 1}}
		if tc.prefillGPUs != 0 {
			p.cfg.PrefillGPUsPerWorker = tc.prefillGPUs
		}
		if gp, gd := p.budget(tc.p, tc.d); gp != tc.wantP || gd != tc.wantD {
			t.Errorf("%d + %d workers of %d GPUs in %d: %d + %d, want %d + %d", tc.p, tc.d, tc.gpus, tc.budget, gp, gd, tc.wantP, tc.wantD)
		}
		// Engines of two ranks of half the GPUs each: the same.
		if tc.gpus%2 == 0 && tc.prefillGPUs == 0 {
			p.cfg.GPUsPerWorker, p.cfg.ReplicaWorkers = tc.gpus/2, 2
			if gp, gd := p.budget(tc.p, tc.d); gp != tc.wantP || gd != tc.wantD {
				t.Errorf("%d + %d engines of two ranks of %d GPUs in %d: %d + %d, want %d + %d", tc.p, tc.d, tc.gpus/2, tc.budget, gp, gd, tc.wantP, tc.wantD)
			}
		}
	}
	// Engines of two one-GPU ranks: 3 + 7 engines are 20 GPUs, ×0.4:
	// ⌊1.2⌋ prefill engine, the rest ((8 − 2)/2) decode.
	p := &planner{cfg: PlannerConfig{GPUsPerWorker: 1, MaxGPUBudget: 8, MinEndpoint: 1, ReplicaWorkers: 2}}
	if gp, gd := p.budget(3, 7); gp != 1 || gd != 3 {
		t.Errorf("3 + 7 engines of two ranks in 8 GPUs: %d + %d, want 1 + 3", gp, gd)
	}
}

// Dynamo's SLA planner over a steady load that one prefill and one decode
// worker cannot carry: each adjustment's observations are the requests
// that completed in its interval, its correction factors and worker
// counts follow from them by Dynamo's formulas on the step model's
// profile (worked here in closed form for the linear step model), and the
// pools are set to those counts. With the Kalman predictor (over a load
// that varies: prompts of 1,000 tokens, then 1,600) the counts follow
// from its predictions, which a filter of its own fed with the
// adjustments' observations repeats. With engines of two ranks (data
// parallelism) an engine takes twice a rank's load, the budget counts its
// two GPUs, and every change of either pool moves whole engines. With a
// prefill pool of its own deployment (prefill steps of 5 ms + 0.1 ms a
// token, 2 GPUs a worker) the prefill profile and factor are its, and the
// budget counts its workers' GPUs apart. With engines of two sizes
// (SGLang's DP attention with a prefill_tp of its own: prefill servers of
// four ranks, decode servers of two) each pool's engine carries its own
// ranks' loads and moves its own ranks.
func TestPlannerDynamoSLA(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		corr, shared, kalman bool
		ranks                int  // an engine's workers
		own                  bool // a prefill pool of its own deployment
		slots                int  // both pools': the engines the budget allows each, the other keeping one
		prefillRanks         int  // a prefill engine's workers (0: ranks)
	}{{"corrected", true, false, false, 1, false, 2 * 11, 0}, {"uncorrected", false, false, false, 1, false, 2 * 11, 0},
		{"prefix hits", true, true, false, 1, false, 2 * 11, 0}, {"kalman", true, false, true, 1, false, 2 * 11, 0},
		{"engines of two ranks", true, false, false, 2, false, 2 * 5 * 2, 0}, {"own prefill pool", true, false, false, 1, true, 11/2 + 10, 0},
		// (12 − 2)/4 prefill engines of 4 ranks, (12 − 4)/2 decode
		// engines of 2.
		{"engines of two sizes", true, false, false, 2, false, 2*4 + 4*2, 4}} {
		var reqs []*trace.Request
		for i := range 2400 { // 20 a second for 120 s
			in := int64(1000)
			if tc.kalman && i >= 1200 {
				in = 1600
			}
			r := req(fmt.Sprintf("r%d", i), time.Duration(i)*50*ms, in, 50)
			if tc.shared {
				// One prompt, its first 992 tokens (62 blocks)
				// cached after the first: TTFT below the profile's,
				// a prefill factor below 1.
				r = withHashes(r, 16, seq(62)...)
			}
			reqs = append(reqs, r)
		}
		corr, ranks, own := tc.corr, tc.ranks, tc.own
		pranks := cmp.Or(tc.prefillRanks, ranks)
		t.Run(tc.name, func(t *testing.T) {
			d := pdConfig(pranks)
			d.Planner = PlannerConfig{Policy: PlannerDynamoSLA, AdjustmentIntervalSec: 30, ITLSec: 0.011, MaxGPUBudget: 12,
				NoCorrection: !corr, ContainerStartSec: 5, ReplicaWorkers: ranks}
			if tc.prefillRanks != 0 {
				d.Planner.PrefillReplicaWorkers = tc.prefillRanks
			}
			var opts Options
			// One request's prefill of isl tokens: 10 ms + 0.2 ms a
			// token (checkedPD's step model), on the prefill pool of
			// its own 5 ms + 0.1 ms.
			prefillSec := func(isl float64) float64 { return 0.010 + 0.0002*math.Round(isl) }
			prefillGPUs := 0
			if own {
				d.PrefillTP, d.Planner.PrefillGPUsPerWorker, prefillGPUs = 2, 2, 2
				opts.Prefill = &PoolModel{Cost: linearCost{Base: 5 * ms, PerToken: 100 * time.Microsecond}, KVBlocks: 400}
				prefillSec = func(isl float64) float64 { return 0.005 + 0.0001*math.Round(isl) }
			}
			if tc.kalman {
				d.Planner.Predictor = PredictorKalman
			}
			// The test's own filters of the requests, ISL and OSL.
			filters := [3]loadPredictor{newKalmanPredictor(d.Planner.withDefaults()), newKalmanPredictor(d.Planner.withDefaults()), newKalmanPredictor(d.Planner.withDefaults())}
			cfg := Config{Workers: pranks + ranks, Router: RouterLeastRequests, Disaggregation: d}
			var changes []fleetChange
			var slots int
			all, st := checkedPDWith(t, cfg, reqs, opts, func(e *engine) { changes, slots = e.scale.changes, len(e.workers) })
			if slots != tc.slots {
				t.Errorf("%d slots, want %d", slots, tc.slots)
			}
			if st.Completed != len(reqs) {
				t.Fatalf("%d of %d completed", st.Completed, len(reqs))
			}
			if len(st.Planner) < 4 {
				t.Fatalf("%d adjustments, want one every 30 s", len(st.Planner))
			}
			// The step model (checkedPD's): 10 ms + 0.2 ms a token.
			// One request's 1,000-token prefill: 210 ms; n decoding:
			// 10 + 0.2n ms, within 11 ms for n ≤ 5, at most as many as
			// 400 blocks of 16 tokens hold at the context (1,000 +
			// 50/2: 6).
			itl := func(n float64) float64 { return 0.010 + 0.0002*n }
			pcf, dcf, changed := 1.0, 1.0, 0
			for k, adj := range st.Planner {
				// The observations, as the frontend makes them: the
				// records completed in the interval (their count,
				// duration and OSL), those whose first token came in
				// it (TTFT and ISL), and the tokens after the first
				// that came in it (ITL: each a chunk at stream
				// interval 1, its gap observed when it is sent).
				lo, hi := trace.Time(time.Duration(k)*30*time.Second), adj.At
				in := func(t float64) bool { return t > lo.Seconds() && t <= hi.Seconds() }
				var n, first int64
				var ttft, dur, isl, osl, gaps float64
				var toks int64
				for _, r := range all {
					if end := r.Arrival.V.Add(trace.DurationSeconds(r.E2ESec.V)); end > lo && end <= hi {
						n++
						dur += r.E2ESec.V
						osl += float64(r.OutputTokens.V)
					}
					at := r.Arrival.V.Seconds() + r.TTFTSec.V
					if in(at) {
						first++
						ttft += r.TTFTSec.V
						isl += float64(r.InputTokens.V)
					}
					for _, g := range r.ITLSec {
						if at += g; in(at) {
							gaps += g
							toks++
						}
					}
				}
				skipped := n == 0 || first == 0 || toks == 0
				if adj.Requests != n || adj.Skipped != skipped {
					t.Fatalf("adjustment %d at %v: %d requests (skipped %v), the records %d (%d first tokens, %d later)", k, adj.At, adj.Requests, adj.Skipped, n, first, toks)
				}
				nf, ff := float64(n), float64(first)
				if tc.kalman {
					filters[0].add(nf)
					filters[1].add(isl / ff)
					filters[2].add(osl / nf)
				}
				if skipped {
					continue
				}
				nextN, nextISL, nextOSL := nf, isl/ff, osl/nf // the constant predictor's
				if tc.kalman {
					nextN, nextISL, nextOSL = filters[0].next(), filters[1].next(), filters[2].next()
				}
				if adj.NextRequests != nextN || adj.NextISL != nextISL || adj.NextOSL != nextOSL {
					t.Errorf("adjustment %d: predicted %v requests, ISL %v, OSL %v; want %v, %v, %v", k, adj.NextRequests, adj.NextISL, adj.NextOSL, nextN, nextISL, nextOSL)
				}
				if !pdNear(adj.TTFTSec, ttft/ff) || !pdNear(adj.ITLSec, gaps/float64(toks)) || !pdNear(adj.DurationSec, dur/nf) || adj.ISL != isl/ff || adj.OSL != osl/nf {
					t.Errorf("adjustment %d: observed %+v; the records: TTFT %v, ITL %v, duration %v, ISL %v, OSL %v", k, adj, ttft/ff, gaps/float64(toks), dur/nf, isl/ff, osl/nf)
				}
				// The decisions, by Dynamo's formulas: an engine of
				// several ranks carries their loads, and the
				// concurrency by Little's law is a rank's.
				decode := ranks // ready decode workers (ranks) at the adjustment
				if k > 0 {
					decode = fleetAt(st, adj.At)
				}
				if corr {
					pcf = adj.TTFTSec / prefillSec(adj.ISL)
					c := min(max(nf/float64(decode)*adj.DurationSec/30, 1), most(adj))
					dcf = adj.ITLSec / itl(c)
				}
				wantP := max(int(math.Ceil(nextN*nextISL/30*min(1, pcf)/(float64(pranks)*nextISL/prefillSec(nextISL)))), 1)
				best := math.Floor((0.011/dcf-0.010)/0.0002 + 1e-9)
				best = min(max(best, 1), most(PlannerAdjustment{ISL: nextISL, OSL: nextOSL}))
				wantD := max(int(math.Ceil(nextN*nextOSL/30/(float64(ranks)*best/itl(best)))), 1)
				p := &planner{cfg: PlannerConfig{GPUsPerWorker: 1, PrefillGPUsPerWorker: prefillGPUs, MaxGPUBudget: 12, MinEndpoint: 1, ReplicaWorkers: ranks, PrefillReplicaWorkers: tc.prefillRanks}}
				wantP, wantD = p.budget(wantP, wantD)
				if !pdNear(adj.ProfilePrefillSec, prefillSec(nextISL)) || !pdNear(adj.ProfileDecodeTokensPerSec, best/itl(best)) {
					t.Errorf("adjustment %d: profile %v s, %v tokens/s; want %v, %v", k, adj.ProfilePrefillSec, adj.ProfileDecodeTokensPerSec, prefillSec(nextISL), best/itl(best))
				}
				if !pdNear(adj.PrefillFactor, pcf) || !pdNear(adj.DecodeFactor, dcf) || adj.Prefill != wantP || adj.Decode != wantD {
					t.Errorf("adjustment %d at %v: factors %v, %v, workers %d + %d; want %v, %v, %d + %d", k, adj.At, adj.PrefillFactor, adj.DecodeFactor, adj.Prefill, adj.Decode, pcf, dcf, wantP, wantD)
				}
				if wantP != 1 || wantD != 1 {
					changed++
				}
			}
			if changed == 0 && !tc.shared {
				t.Error("the planner never asked for more than one worker a pool")
			}
			if tc.shared && !(st.Planner[1].PrefillFactor < 1) {
				t.Errorf("prefill factor %v with prefix hits; want below 1", st.Planner[1].PrefillFactor)
			}
			var most float64
			for _, f := range st.Fleet {
				most = max(most, f.PrefillReady)
			}
			if most < float64(2*pranks) && !tc.shared {
				t.Errorf("at most %v prefill workers ready; want the planner's", most)
			}
			for _, c := range changes {
				if c.ready%ranks != 0 || c.starting%ranks != 0 || c.draining%ranks != 0 || c.prefillReady%pranks != 0 || (c.ready-c.prefillReady)%ranks != 0 {
					t.Errorf("at %v: %+v: not whole engines of %d prefill and %d decode workers", c.at, c, pranks, ranks)
				}
			}
		})
	}
}

// seq returns 1 … n.
func seq(n int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i) + 1
	}
	return s
}

// most is the most requests that decode together on checkedPD's workers
// at adj's context: 400 blocks of 16 tokens over ISL + OSL/2.
func most(adj PlannerAdjustment) float64 {
	return math.Floor(6400 / math.Round(adj.ISL+adj.OSL/2))
}

// fleetAt returns the decode workers ready just before t, by the fleet's
// seconds (whole at the adjustments' instants, which are whole seconds).
func fleetAt(st Stats, t trace.Time) int {
	s := int64(t)/int64(time.Second) - 1
	return int(math.Round(st.Fleet[s].DecodeReady))
}

func TestPlannerConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		p    PlannerConfig
		also func(d *DisaggregationConfig)
		want string
	}{
		{PlannerConfig{Policy: "sla"}, nil, `disaggregation.planner.policy: "sla" is not dynamo_sla`},
		{PlannerConfig{Policy: PlannerDynamoSLA, Predictor: "arima"}, nil, `disaggregation.planner.predictor: "arima" is not modelled (constant and kalman are; Dynamo's arima and prophet are not)`},
		{PlannerConfig{Policy: PlannerDynamoSLA, Predictor: "linear"}, nil, `disaggregation.planner.predictor: "linear" is not one of constant, kalman`},
		{PlannerConfig{Policy: PlannerDynamoSLA, Predictor: PredictorKalman, KalmanR: -1}, nil, "disaggregation.planner.kalman_r: -1 is not a positive number"},
		{PlannerConfig{Policy: PlannerDynamoSLA, Predictor: PredictorKalman, KalmanQTrend: math.Inf(1)}, nil, "disaggregation.planner.kalman_q_trend: +Inf is not a positive number"},
		{PlannerConfig{Policy: PlannerDynamoSLA, MaxGPUBudget: 1}, nil, "disaggregation.planner.max_gpu_budget: 1 GPUs: want room for min_endpoint workers of each pool"},
		{PlannerConfig{Policy: PlannerDynamoSLA, MaxGPUBudget: 2}, nil, "disaggregation.planner.max_gpu_budget: 2 GPUs, fewer than the 3 workers at the start take"},
		{PlannerConfig{Policy: PlannerDynamoSLA, ITLSec: -1}, nil, "disaggregation.planner.itl_s: -1 is not a number of seconds"},
		{PlannerConfig{Policy: PlannerDynamoSLA}, func(d *DisaggregationConfig) { d.DecodeAutoscale = pdHPA(MetricKVUsage, 0.5, 4) },
			"disaggregation.planner: sizes both pools: not with prefill_autoscale or decode_autoscale"},
		// Engines of two ranks: 3 workers are not whole ones, and
		// min_endpoint engines of each pool take 4 GPUs.
		{PlannerConfig{Policy: PlannerDynamoSLA, ReplicaWorkers: 2}, func(d *DisaggregationConfig) { d.PrefillWorkers = 2 },
			"disaggregation.planner: the decode pool's workers (1) are not whole engines of 2 workers each"},
		{PlannerConfig{Policy: PlannerDynamoSLA, ReplicaWorkers: 2}, nil,
			"disaggregation.planner: the prefill pool's workers (1) are not whole engines of 2 workers each"},
		{PlannerConfig{Policy: PlannerDynamoSLA, ReplicaWorkers: 2, MaxGPUBudget: 3}, nil,
			"disaggregation.planner.max_gpu_budget: 3 GPUs: want room for min_endpoint workers of each pool (4 GPUs)"},
		// Prefill workers of 4 GPUs: the 3 workers at the start (1 +
		// 2) take 6.
		{PlannerConfig{Policy: PlannerDynamoSLA, PrefillGPUsPerWorker: 4, MaxGPUBudget: 5}, func(d *DisaggregationConfig) { d.PrefillTP = 4 },
			"disaggregation.planner.max_gpu_budget: 5 GPUs, fewer than the 6 workers at the start take"},
	} {
		d := pdConfig(1)
		d.Planner = tc.p
		if tc.also != nil {
			tc.also(&d)
		}
		err := Config{Workers: 3, Disaggregation: d}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.p, err, tc.want)
		}
	}
}

// The profile the planner reads off the step model, by hand on the linear
// one (10 ms a step, 0.2 ms a token, 0.001 ms a token of context): one
// request's prefill in chunks of the token budget, the ITL of n decoding
// together (linear between whole n), the most that fit the KV and the
// running limit, and the best throughput within an ITL target.
func TestPlannerProfile(t *testing.T) {
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond, PerContext: time.Microsecond}
	p := newPlanner(PlannerConfig{}, cost, cost, 8192, 100_000, 64)
	// Without a token budget, one step: 10 ms + 4 s.
	if got := newPlanner(PlannerConfig{}, p.cost, p.cost, 0, 100_000, 64).prefillSec(20000); !pdNear(got, 4.01) {
		t.Errorf("prefill of 20,000 tokens in one step: %v s, want 4.01", got)
	}
	// 20,000 tokens in chunks of 8,192, 8,192 and 3,616: 3 × 10 ms + 4 s.
	if got := p.prefillSec(20000); !pdNear(got, 4.03) {
		t.Errorf("prefill of 20,000 tokens: %v s, want 4.03", got)
	}
	// n at a context of 1,000: 10 + 0.2n + 1n ms.
	if got := p.itlAt(4, 1000); !pdNear(got, 0.0148) {
		t.Errorf("ITL of 4 at 1,000: %v, want 0.0148", got)
	}
	if got := p.itlAtConcurrency(2.5, 1000); !pdNear(got, 0.013) {
		t.Errorf("ITL at concurrency 2.5: %v, want 0.013 (between 2's 0.0124 and 3's 0.0136)", got)
	}
	// 100,000 KV tokens hold 100 at 1,000, the running limit 64; at
	// 10,000 tokens 10.
	if p.most(1000) != 64 || p.most(10_000) != 10 || p.most(1e6) != 1 {
		t.Errorf("most at 1,000, 10,000 and 1e6 tokens: %d, %d, %d; want 64, 10, 1", p.most(1000), p.most(10_000), p.most(1e6))
	}
	// Within 20 ms: 10 + 1.2n ≤ 20, n = 8: 8 / 0.0196 tokens/s; within 1
	// ms none: one request's 1 / 0.0112.
	if got := p.decodeThroughput(0.020, 1000); !pdNear(got, 8/0.0196) {
		t.Errorf("throughput within 20 ms: %v, want %v", got, 8/0.0196)
	}
	if got := p.decodeThroughput(0.001, 1000); !pdNear(got, 1/0.0112) {
		t.Errorf("throughput within 1 ms: %v, want one request's %v", got, 1/0.0112)
	}
}

// Under SGLang the profile's prefill chunks are its chunked_prefill_size
// and its running limit max_running_requests (as the scheduler's
// defaults make them), its KV the radix pool's tokens; an interval whose
// requests all have one output token gives no ITL, and Dynamo skips it.
func TestPlannerSGLang(t *testing.T) {
	t.Parallel()
	d := pdConfig(1)
	d.Planner = PlannerConfig{Policy: PlannerDynamoSLA, AdjustmentIntervalSec: 10}
	cfg := Config{Workers: 2, Disaggregation: d, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 50_000}}
	var reqs []*trace.Request
	for i := range 40 { // one token each for 20 s
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*500*ms, 100, 1))
	}
	var plan *planner
	_, _, st := replayWith(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 1, reqs, testSwitches{atEnd: func(e *engine) { plan = e.scale.plan }})
	eff := cfg.Effective(1).Scheduler
	if plan.chunk != eff.ChunkedPrefillSize || plan.maxSeqs != eff.MaxRunningRequests || plan.kvTokens != 50_000 || plan.maxSeqs < 2 {
		t.Errorf("profile: chunks of %d, %d running, %d KV tokens; want %d, %d, 50000", plan.chunk, plan.maxSeqs, plan.kvTokens, eff.ChunkedPrefillSize, eff.MaxRunningRequests)
	}
	if len(st.Planner) < 1 || st.Planner[0].Requests == 0 || !st.Planner[0].Skipped || !math.IsNaN(st.Planner[0].ITLSec) {
		t.Errorf("adjustments %+v; want the first skipped for want of an ITL, with its requests counted", st.Planner)
	}
}

// The SLA planner's streamed observations (streamedObs) do not depend on
// how the engine steps: a worker's decode steps built ahead of the clock
// (fast-forward, and its inner loop, steadySteps) add their chunks to the
// adjustment whose interval holds their time, as stepping one event at a
// time does. vLLM and SGLang decode pools, chunks of one token and of
// three, one-token requests (SGLang's decode server streams the prefill
// server's token as it takes the request in), a short interval that
// requests outlast, a client 2 ms away: the adjustments agree (their
// sums to 1e-9, as the engines add the same gaps in other orders), and
// each interval's TTFT is that of the records whose first token came in
// it, at the frontend (the client's TTFT less its latency both ways).
func TestPlannerStreamedObservationsFastForward(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(7, 400, 40)
	for i, r := range reqs {
		if i%9 == 0 {
			r.OutputTokens = trace.Some(int64(1))
		}
	}
	planner := PlannerConfig{Policy: PlannerDynamoSLA, AdjustmentIntervalSec: 0.5, ITLSec: 0.02, MaxGPUBudget: 8, ContainerStartSec: 1}
	for i, c := range []Config{
		{Workers: 4, Disaggregation: pdConfig(1), Client: ClientConfig{LatencySec: 0.002}},
		{Workers: 4, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{StreamInterval: 3, MaxNumSeqs: 8}},
		{Workers: 4, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 4000}},
	} {
		c.Disaggregation.Planner = planner
		var all []*trace.Request
		run := func(sw testSwitches) []PlannerAdjustment {
			all = all[:0]
			st, err := RunInputs(c, linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}, 200, Requests(reqs), func(r *trace.Request) error {
				all = append(all, r)
				return nil
			}, Options{test: sw})
			if err != nil {
				t.Fatal(err)
			}
			return st.Planner
		}
		stepped, fast := run(testSwitches{noFastForward: true, noSteadySteps: true}), run(testSwitches{})
		// The first tokens the records say came in each interval, and
		// their TTFT at the frontend (the client's, less its latency
		// both ways).
		lat := c.Client.LatencySec
		for k, a := range fast {
			lo, hi := (a.At - trace.Time(500*time.Millisecond)).Seconds(), a.At.Seconds()
			var n int
			var ttft float64
			for _, r := range all {
				if at := r.RouterArrival.V.Seconds() + r.TTFTSec.V - 2*lat; at > lo && at <= hi {
					n++
					ttft += r.TTFTSec.V - 2*lat
				}
			}
			if want := ttft / float64(n); !(n == 0 && math.IsNaN(a.TTFTSec)) && math.Abs(a.TTFTSec-want) > 1e-9 {
				t.Errorf("config %d, adjustment %d: TTFT %v observed, the records' %d first tokens %v", i, k, a.TTFTSec, n, want)
			}
		}
		if len(stepped) < 10 || len(stepped) != len(fast) {
			t.Fatalf("config %d: %d adjustments stepping, %d fast-forwarded", i, len(stepped), len(fast))
		}
		near := func(a, b float64) bool {
			return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) <= 1e-9*max(1, math.Abs(a))
		}
		observed := 0
		for k, a := range stepped {
			b := fast[k]
			if a.Requests != b.Requests || a.Skipped != b.Skipped || a.Prefill != b.Prefill || a.Decode != b.Decode ||
				!near(a.TTFTSec, b.TTFTSec) || !near(a.ITLSec, b.ITLSec) || !near(a.ISL, b.ISL) || !near(a.OSL, b.OSL) || !near(a.DurationSec, b.DurationSec) {
				t.Errorf("config %d, adjustment %d: stepping %+v\nfast-forwarded %+v", i, k, a, b)
			}
			if !math.IsNaN(a.ITLSec) {
				observed++
			}
		}
		if observed < 5 {
			t.Errorf("config %d: ITL observed in %d adjustments of %d", i, observed, len(stepped))
		}
	}
}

// Requests that end without completing count for the SLA planner as
// Dynamo's frontend counts them (requests_total of every status): a
// request whose client gave up, with its duration to the abort and the
// tokens it was sent, and one refused at arrival (a prompt longer than a
// worker's KV), with none. Each interval's requests, mean duration and
// mean OSL are those of the records that ended in it, whatever their
// status, the duration the frontend's (from the request's arrival there
// to its end there: a client 2 ms away adds 4 ms to its own E2E, not to
// it).
func TestPlannerCountsRequestsThatDidNotComplete(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(11, 400, 150)
	for i, r := range reqs {
		if i%40 == 0 {
			r.InputTokens = trace.Some(int64(5000)) // 313 blocks of 16: more than a worker's 200
			r.HashIDs, r.BlockSize = nil, trace.Opt[int64]{}
		}
	}
	cfg := Config{Workers: 4, Disaggregation: pdConfig(1), Client: ClientConfig{TimeoutSec: 0.1, LatencySec: 0.002}}
	cfg.Disaggregation.Planner = PlannerConfig{Policy: PlannerDynamoSLA, AdjustmentIntervalSec: 0.5, ITLSec: 0.02, MaxGPUBudget: 8, ContainerStartSec: 1}
	var all []*trace.Request
	st, err := RunInputs(cfg, linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}, 200, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		return nil
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.TimedOut == 0 || st.Rejected == 0 || st.Completed == 0 {
		t.Fatalf("%d timed out, %d rejected, %d completed: want some of each", st.TimedOut, st.Rejected, st.Completed)
	}
	for k, a := range st.Planner {
		lo, hi := a.At-trace.Time(500*time.Millisecond), a.At
		var n, other int64
		var dur, osl float64
		for _, r := range all {
			if end := r.DoneAtRouter.V; end > lo && end <= hi {
				n++
				// The frontend's duration: no client latency; a
				// refusal's record holds the output asked for.
				dur += end.Sub(r.RouterArrival.V).Seconds()
				if r.Status != trace.StatusRejected {
					osl += float64(r.OutputTokens.V)
				}
				if r.Status != trace.StatusOK {
					other++
				}
			}
		}
		if a.Requests != n || n > 0 && (math.Abs(a.DurationSec-dur/float64(n)) > 1e-9 || a.OSL != osl/float64(n)) {
			t.Errorf("adjustment %d at %v: %d requests, duration %v, OSL %v; the records that ended in it: %d (%d not completed), %v, %v",
				k, a.At, a.Requests, a.DurationSec, a.OSL, n, other, dur/float64(n), osl/float64(n))
		}
	}
}
