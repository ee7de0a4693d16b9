package replay

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// A prefill pool of its own deployment (Options.Prefill): its step model
// prices the prefill workers' steps, the cluster's the decode workers';
// its KV capacity is each prefill worker's. One request, as in
// TestDisaggregatedTimeline but on a prefill GPU twice as fast: its
// 100-token prefill takes 5 + 5 ms on w0 (20 ms on the decode GPU), its
// KV 1.1 ms to w1, whose step of the last prompt token again takes 10.1
// ms (TTFT 21.2 ms), then two decode steps of 10.1 ms there.
func TestPrefillPoolOwnDeployment(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	fast := &PoolModel{Cost: linearCost{Base: 5 * ms, PerToken: 50 * time.Microsecond}, KVBlocks: 100}
	for _, engine := range []string{EngineVLLM, EngineSGLang} {
		cfg := Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: engine}}
		// TTFT and E2E: vLLM's decode worker computes the last prompt
		// token again (10.1 ms); SGLang's streams the prefill server's
		// token as the KV is in.
		ttft, e2e := 0.0212, 0.0414
		if engine == EngineSGLang {
			cfg.Scheduler.BlockSize, cfg.Scheduler.KVCacheTokens = 1, 1000
			fast.KVBlocks = 1000
			ttft, e2e = 0.0111, 0.0313
		}
		out, _, st := replayOpts(t, cfg, cost, 100, []*trace.Request{req("a", 0, 100, 3)}, Options{Prefill: fast})
		a := out["a"]
		if !pdNear(a.TTFTSec.V, ttft) || !pdNear(a.E2ESec.V, e2e) || !pdNear(a.PrefillSec.V, 0.010) || a.PrefillWorker != "w0" || a.Worker != "w1" {
			t.Errorf("%s: TTFT %v, E2E %v, prefill %v s on %s, decode on %s; want %v, %v, 0.01 on w0, w1", engine, a.TTFTSec.V, a.E2ESec.V, a.PrefillSec.V, a.PrefillWorker, a.Worker, ttft, e2e)
		}
		if st.Completed != 1 {
			t.Errorf("%s: %d completed", engine, st.Completed)
		}
	}

	// Each prefill worker holds the pool's capacity: 6 blocks of 16
	// tokens take a 90-token prompt and its token (6 blocks) but not a
	// 100-token one (7), which the decode workers' 100 blocks would.
	cfg := Config{Workers: 2, Disaggregation: pdConfig(1)}
	small := &PoolModel{Cost: cost, KVBlocks: 6}
	out, _, st := replayOpts(t, cfg, cost, 100, []*trace.Request{req("a", 0, 90, 3), req("b", time.Second, 100, 3)}, Options{Prefill: small})
	if a, b := out["a"], out["b"]; a.Status != trace.StatusOK || b.Status != trace.StatusRejected ||
		b.Error != "needs 7 KV blocks for its 100 prompt tokens and the first output token; a prefill worker has 6" || st.Rejected != 1 {
		t.Errorf("a %s, b %s %q, %d rejected; want a served, b rejected by the prefill pool's capacity", a.Status, b.Status, b.Error, st.Rejected)
	}
	// The workers' caches (all free at the end) and the routers' view of
	// a worker, the prefill pool's, where they send.
	for _, router := range []string{RouterLLMD, RouterDynamo} {
		var kv, free []int64
		var view, loads int64
		sw := testSwitches{atEnd: func(e *engine) {
			loads = e.view.Loads()[0].TotalBlocks // what the router is told of w0
			for _, w := range e.workers {
				kv = append(kv, e.liveLoad(w.id).TotalBlocks)
				free = append(free, w.s.freeBlocks())
			}
			switch r := e.router.(type) {
			case *llmD:
				view = r.index.capTokens
			case *dynamoKV:
				view = r.index.capTokens
			}
		}}
		cfg.Router = router
		replayOpts(t, cfg, cost, 100, []*trace.Request{req("a", 0, 90, 3)}, Options{Prefill: small, test: sw})
		if len(kv) != 2 || kv[0] != 6 || kv[1] != 100 || free[0] != 6 || free[1] != 100 || view != 6*16 || loads != 6 {
			t.Errorf("%s: KV capacity by worker %v, free at the end %v, the router's view of a worker %d tokens, its load of w0 %d blocks; want [6 100] each, 96, 6", router, kv, free, view, loads)
		}
	}
}

// What a prefill pool of its own deployment is refused with.
func TestPrefillPoolErrors(t *testing.T) {
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	p := &PoolModel{Cost: cost, KVBlocks: 100}
	own := pdConfig(1)
	own.PrefillTP = 2
	both := pdConfig(1)
	both.DecodeKVTiers = true
	for _, tc := range []struct {
		cfg  Config
		opts Options
		want string
	}{
		{Config{Workers: 2}, Options{Prefill: p}, "replay: a prefill pool of its own deployment without disaggregation"},
		{Config{Workers: 2, Disaggregation: pdConfig(1)}, Options{Prefill: &PoolModel{KVBlocks: 100}}, "replay: the prefill pool has no step model"},
		{Config{Workers: 2, Disaggregation: pdConfig(1)}, Options{Prefill: &PoolModel{Cost: cost}}, "replay: 0 KV blocks per prefill worker is not a capacity the engine supports"},
		{Config{Workers: 2, Disaggregation: both}, Options{Prefill: p, Offload: &Offload{}}, "replay: KV tiers on the decode pool (decode_kv_tiers) with a prefill pool of its own deployment need the decode pool's own"},
		{Config{Workers: 2, Disaggregation: pdConfig(1)}, Options{Prefill: p, DecodeOffload: tierSpec(t, 10, 0, 0)}, "replay: the decode pool's own KV tiers (Options.DecodeOffload) without the prefill pool's"},
		{Config{Workers: 2, Disaggregation: pdConfig(1)}, Options{Prefill: p, Offload: tierSpec(t, 10, 0, 0), DecodeOffload: tierSpec(t, 10, 0, 0)}, "are for a prefill pool of its own deployment with decode_kv_tiers, under vLLM"},
		{Config{Workers: 2, Disaggregation: both}, Options{Offload: tierSpec(t, 10, 0, 0), DecodeOffload: tierSpec(t, 10, 0, 0)}, "are for a prefill pool of its own deployment with decode_kv_tiers, under vLLM"},
		{Config{Workers: 2, Disaggregation: both}, Options{Prefill: p, Offload: tierSpec(t, 10, 0, 0), DecodeOffload: func() *Offload { o := tierSpec(t, 10, 0, 0); o.BlockTokens = 32; return o }()},
			"the decode pool's KV tiers (a block of 32 tokens, write_through, 0 remote blocks) are not the prefill pool's (16, write_through, 0)"},
		{Config{Workers: 2, Disaggregation: both}, Options{Prefill: p, Offload: tierSpec(t, 10, 0, 10), DecodeOffload: func() *Offload { o := tierSpec(t, 10, 0, 10); o.KVBytesPerToken *= 2; return o }()},
			"a remote store shared by pools of 131072 and 262144 KV bytes a token: not modelled yet"},
		{Config{Workers: 2, Disaggregation: own}, Options{}, "replay: disaggregation.prefill_hardware, prefill_tp or prefill_dp without the prefill pool's step model and KV capacity"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillTP: 2}}, Options{Prefill: p}, "disaggregation.prefill_workers: missing: prefill_hardware, prefill_tp, prefill_dp, prefill_nodes_per_worker and prefill_scheduler are the prefill pool's"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillDP: 2}}, Options{Prefill: p}, "disaggregation.prefill_workers: missing: "},
		{Config{Workers: 2, Disaggregation: func() DisaggregationConfig { d := pdConfig(1); d.PrefillDP = -1; return d }()}, Options{Prefill: p}, "disaggregation.prefill_dp: -1 is not a number of data-parallel ranks"},
		{Config{Workers: 2, Disaggregation: func() DisaggregationConfig { d := pdConfig(1); d.PrefillDP = 2; return d }()}, Options{}, "replay: disaggregation.prefill_hardware, prefill_tp or prefill_dp without the prefill pool's step model"},
	} {
		_, err := RunInputs(tc.cfg, cost, 100, Requests([]*trace.Request{req("a", 0, 10, 2)}), func(*trace.Request) error { return nil }, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v, %+v: got %v, want %q", tc.cfg.Disaggregation, tc.opts, err, tc.want)
		}
	}
}

// GPU-hours count each pool's GPUs a worker: a prefill pool of its own
// deployment has its own; pools of one deployment share the autoscaled
// pool's.
func TestGPUHoursByPool(t *testing.T) {
	prefill := &pool{lo: 0, cfg: AutoscaleConfig{GPUsPerWorker: 2}}
	decode := &pool{lo: 2, cfg: AutoscaleConfig{GPUsPerWorker: 4}}
	own := DisaggregationConfig{PrefillTP: 2, PrefillAutoscale: AutoscaleConfig{GPUsPerWorker: 2}, DecodeAutoscale: AutoscaleConfig{GPUsPerWorker: 4}}
	for _, tc := range []struct {
		name  string
		pools []*pool
		d     DisaggregationConfig
		want  float64
	}{
		// 1 h of prefill slots and 2 h of decode slots.
		{"both autoscaled", []*pool{prefill, decode}, own, 1*2 + 2*4},
		{"prefill autoscaled, own deployment", []*pool{prefill}, own, 1*2 + 2*4},
		{"decode autoscaled, own deployment", []*pool{decode}, own, 1*2 + 2*4},
		{"prefill autoscaled, one deployment", []*pool{prefill}, DisaggregationConfig{}, 3 * 2},
		{"decode autoscaled, one deployment", []*pool{decode}, DisaggregationConfig{}, 3 * 4},
	} {
		a := &autoscaler{split: 2, pools: tc.pools, onTime: 3 * time.Hour, onPrefill: time.Hour}
		a.pool = tc.pools[0]
		if got := a.gpuHours(tc.d); got != tc.want {
			t.Errorf("%s: %v GPU-hours, want %v", tc.name, got, tc.want)
		}
	}
}

// An autoscaled prefill pool of its own deployment (2 GPUs a worker)
// before a fixed decode pool (4 GPUs a worker): GPU-hours are each pool's
// seconds times its GPUs.
func TestGPUHoursOwnPrefill(t *testing.T) {
	t.Parallel()
	d := pdConfig(1)
	d.PrefillTP = 2
	d.PrefillAutoscale = pdHPA(MetricQueueDepth, 2, 3)
	d.PrefillAutoscale.GPUsPerWorker, d.DecodeAutoscale.GPUsPerWorker = 2, 4
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond} // checkedPD's
	cfg := Config{Workers: 2, Router: RouterLeastRequests, Disaggregation: d}
	var free []int64 // each slot's worker's blocks at the end, all free
	var split int
	_, st := checkedPDWith(t, cfg, pdBurst(), Options{Prefill: &PoolModel{Cost: cost, KVBlocks: 300}}, func(e *engine) {
		split = e.pd.prefill
		for _, w := range e.workers {
			free = append(free, w.s.freeBlocks())
		}
	})
	for i, n := range free {
		// The prefill slots' workers, started again as the pool grew
		// and shrank, keep its capacity.
		if want := int64(400); i < split && n != 300 || i >= split && n != want {
			t.Errorf("slot %d of %v (%d prefill slots): %d blocks", i, free, split, n)
		}
	}
	var prefill, decode, most float64
	for _, f := range st.Fleet {
		prefill += f.Ready + f.Starting + f.Draining - f.DecodeReady // the decode pool is fixed: ready
		decode += f.DecodeReady
		most = max(most, f.PrefillReady)
	}
	if want := (prefill*2 + decode*4) / 3600; math.Abs(st.GPUHours-want) > 1e-9 || most < 2 {
		t.Errorf("%v GPU-hours, %v prefill workers at most; want %v (the prefill pool's seconds × 2 + the decode pool's × 4), the prefill pool grown", st.GPUHours, most, want)
	}
}

// A prefill pool of its own deployment that is the cluster's (the same
// step model and KV capacity) replays as the cluster does, KV tiers on
// the prefill pool included (TestDisaggregatedTierHit's requests: C's
// prompt loaded from the host tier).
func TestPrefillPoolSameAsCluster(t *testing.T) {
	t.Parallel()
	cfg, cost := tierConfig()
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	for _, off := range []*Offload{nil, tierSpec(t, 1000, 0, 0)} {
		_, base, st := replayOpts(t, cfg, cost, 0, abcRequests(2), Options{Offload: off, PerSecond: true})
		_, own, st2 := replayOpts(t, cfg, cost, 0, abcRequests(2), Options{Offload: off, PerSecond: true, Prefill: &PoolModel{Cost: cost, KVBlocks: 64}})
		if dump(base) != dump(own) || !reflect.DeepEqual(st, st2) {
			t.Errorf("tiers %v: the cluster's replay\n%s\nand with its own prefill pool alike\n%s", off != nil, dump(base), dump(own))
		}
		if off != nil && offloaded(st2) == 0 {
			t.Error("the prefill pool wrote nothing to its tier")
		}
	}
}

// KV tiers on both pools when the prefill pool has a deployment of its
// own (Options.DecodeOffload, the decode pool's): with the same spec as
// the prefill pool's and the cluster's deployment, the records and the
// bytes offloaded are the cluster's with decode_kv_tiers
// (TestDisaggregatedDecodeTiers's case: the decode worker writes A's 32
// blocks and B's 63 to its own host tier); the decode pool's workers are
// on nodes of their own then (the per-second links differ), where one
// deployment's pools fill nodes in turn. With a spec of its own, the decode worker's tier has its size,
// its PCIe links its GPUs', and its writes its KV bytes a token's: a
// worker of twice the KV bytes (an MLA model's replicated KV on twice the
// GPUs) writes twice the bytes.
func TestPrefillPoolDecodeTiers(t *testing.T) {
	t.Parallel()
	cfg, cost := tierConfig()
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	cfg.Disaggregation.DecodeKVTiers = true
	same := &PoolModel{Cost: cost, KVBlocks: 64}
	off := tierSpec(t, 1000, 0, 0)
	_, base, st := replayOpts(t, cfg, cost, 0, abcRequests(2), Options{Offload: off, PerSecond: true})
	_, own, st2 := replayOpts(t, cfg, cost, 0, abcRequests(2), Options{Offload: off, DecodeOffload: tierSpec(t, 1000, 0, 0), PerSecond: true, Prefill: same})
	if dump(base) != dump(own) || offloaded(st) != offloaded(st2) || offloaded(st) == 0 {
		t.Errorf("the cluster's replay with decode_kv_tiers (%d bytes offloaded)\n%s\nand with a prefill pool of its own and the same decode tiers alike (%d)\n%s", offloaded(st), dump(base), offloaded(st2), dump(own))
	}
	prefillOnly := cfg
	prefillOnly.Disaggregation.DecodeKVTiers = false
	_, _, st0 := replayOpts(t, prefillOnly, cost, 0, abcRequests(2), Options{Offload: off, PerSecond: true, Prefill: same})
	decode := tierSpec(t, 200, 0, 0)
	decode.GPUsPerWorker, decode.KVBytesPerToken = 2, 2*131_072
	var hostCap [2]int64
	var pcie [2]float64
	sw := testSwitches{atEnd: func(e *engine) {
		for i, w := range e.workers {
			hostCap[i] = w.off.tiers[tierHost].Capacity()
			pcie[i] = e.off.nodes[w.off.node].f.Link(w.off.h2d).Bandwidth
		}
	}}
	_, _, st3 := replayOpts(t, cfg, cost, 0, abcRequests(2), Options{Offload: off, DecodeOffload: decode, PerSecond: true, Prefill: same, test: sw})
	if hostCap != [2]int64{1000, 200} || pcie[1] != 2*pcie[0] {
		t.Errorf("host tiers of %v blocks, PCIe %v B/s (prefill, decode); want 1000 and 200 blocks, the decode worker's links twice", hostCap, pcie)
	}
	if n, want := offloaded(st3)-offloaded(st0), int64(32+63)*16*2*131_072; n != want {
		t.Errorf("the decode worker wrote %d bytes, want its 95 blocks of its own KV bytes (%d)", n, want)
	}
}

// The prefill workers' own batch limits (prefill_scheduler): vLLM's
// token budget of 256 takes a 1,000-token prompt in four steps (4 × 10 ms
// + 100 ms) where the cluster's 8,192 take it in one (110 ms), SGLang's
// chunked_prefill_size alike; the decode workers keep the cluster's. With
// a KV capacity of its own, an SGLang prefill worker's running limit is
// derived from its own pool, as SGLang derives it.
func TestPrefillPoolScheduler(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	for _, eng := range []string{EngineVLLM, EngineSGLang} {
		d := pdConfig(1)
		cfg := Config{Workers: 2, Disaggregation: d, Scheduler: SchedulerConfig{Engine: eng}}
		blocks := int64(100)
		if eng == EngineSGLang {
			cfg.Scheduler.BlockSize, blocks = 1, 100_000
			cfg.Disaggregation.PrefillScheduler.ChunkedPrefillSize = 256
		} else {
			cfg.Disaggregation.PrefillScheduler.MaxNumBatchedTokens = 256
		}
		var budgets [2]int64
		sw := testSwitches{atEnd: func(e *engine) {
			for i, w := range e.workers {
				switch s := w.s.(type) {
				case *vllm:
					budgets[i] = s.budget
				case *sglang:
					budgets[i] = s.chunk
				}
			}
		}}
		out, _, _ := replayOpts(t, cfg, cost, blocks, []*trace.Request{req("a", 0, 1000, 2)}, Options{test: sw})
		if a := out["a"]; !pdNear(a.PrefillSec.V, 0.140) || budgets != [2]int64{256, 8192} {
			t.Errorf("%s: prefill %v s, token budgets by worker %v; want 0.14, [256 8192]", eng, a.PrefillSec.V, budgets)
		}
	}
	// Dynamo's planner profiles one request's prefill in the prefill
	// workers' chunks: on checkedPD's step model (10 ms + 0.2 ms a
	// token) 4 × 10 ms + 200 ms at 1,000 tokens, not 210 ms.
	planned := pdConfig(1)
	planned.PrefillScheduler.MaxNumBatchedTokens = 256
	planned.Planner = PlannerConfig{Policy: PlannerDynamoSLA, AdjustmentIntervalSec: 1}
	_, st := checkedPDWith(t, Config{Workers: 2, Disaggregation: planned}, []*trace.Request{req("a", 0, 1000, 2), req("b", 1500*ms, 1000, 2)}, Options{}, nil)
	if len(st.Planner) == 0 || st.Planner[0].Skipped || !pdNear(st.Planner[0].ProfilePrefillSec, 0.240) {
		t.Errorf("planner: %+v; want a first adjustment whose profile prefill is 0.24 s", st.Planner)
	}

	cfg := Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1}}
	var running [2]int
	sw := testSwitches{atEnd: func(e *engine) {
		for i, w := range e.workers {
			running[i] = w.s.(*sglang).maxRun
		}
	}}
	replayOpts(t, cfg, cost, 100_000, []*trace.Request{req("a", 0, 100, 2)}, Options{Prefill: &PoolModel{Cost: cost, KVBlocks: 1000}, test: sw})
	if want := sgMaxRunning(100_000, 0); running != [2]int{500, want} {
		t.Errorf("running limits by worker %v; want [500 %d] (SGLang's of a 1,000-token pool and of the cluster's)", running, want)
	}
}
