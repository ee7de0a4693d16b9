package replay

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// offloaded is the bytes a replay's steps stored to tiers.
func offloaded(st Stats) (n int64) {
	for _, s := range st.Seconds {
		n += s.OffloadBytes
	}
	return n
}

// A prefill worker with a host tier loads a prompt its GPU evicted, as an
// aggregated worker does (TestTierHitTTFT): C's prefill is the load and a
// step of 16 tokens where without tiers it computes all 512, and the rest
// of its way (the KV sent, the last token on the decode worker) is the
// same. Its kv_fetch_s holds both waits, the tier load's and the
// transfer's; its host hit tokens are its prefill worker's.
func TestDisaggregatedTierHit(t *testing.T) {
	t.Parallel()
	cfg, cost := tierConfig()
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	const load = 3*time.Microsecond + 31*16*131_072/64 // host DRAM and PCIe H2D, 31 blocks
	none, _ := runTiers(t, cfg, cost, nil, abcRequests(2))
	got, st := runTiers(t, cfg, cost, tierSpec(t, 1000, 0, 0), abcRequests(2))
	C, C0 := got["C"], none["C"]
	if C.HostHitTokens.V != 496 || C.DeviceHitTokens.V != 0 || C.CachedTokens.V != 496 {
		t.Errorf("C: host %d device %d cached %d tokens, want 496, 0, 496", C.HostHitTokens.V, C.DeviceHitTokens.V, C.CachedTokens.V)
	}
	if C0.CachedTokens.V != 0 {
		t.Errorf("C without tiers: %d cached tokens", C0.CachedTokens.V)
	}
	// Prefill: load + 1 ms + 16 × 10 µs against 1 ms + 512 × 10 µs.
	saved := 496*10*time.Microsecond - load
	if d := time.Duration((C0.TTFTSec.V-C.TTFTSec.V)*1e9 + 0.5); d != saved {
		t.Errorf("C's TTFT %v with the tier, %v without: %v less, want %v", C.TTFTSec.V, C0.TTFTSec.V, d, saved)
	}
	if d := time.Duration((C.KVFetchSec.V-C0.KVFetchSec.V)*1e9 + 0.5); d != load || C0.KVFetchSec.V <= 0 {
		t.Errorf("C's kv_fetch_s %v with the tier, %v without: want the load (%v) more", C.KVFetchSec.V, C0.KVFetchSec.V, load)
	}
	for _, id := range []string{"A", "B"} {
		if g, n := got[id], none[id]; g.TTFTSec != n.TTFTSec || g.E2ESec != n.E2ESec || !reflect.DeepEqual(g.ITLSec, n.ITLSec) {
			t.Errorf("%s: TTFT %v, E2E %v with tiers; %v, %v without", id, g.TTFTSec.V, g.E2ESec.V, n.TTFTSec.V, n.E2ESec.V)
		}
	}
	// The prefill worker wrote A's 32 blocks and B's 63 (C's are A's,
	// which the tier holds), the decode worker none.
	if n := offloaded(st); n != (32+63)*16*131_072 {
		t.Errorf("%d bytes offloaded, want %d (95 blocks from the prefill worker)", n, (32+63)*16*131_072)
	}
}

// With disaggregation.decode_kv_tiers the decode worker writes every
// prompt it receives to its own host tier (vLLM's offloading connector
// on the decode instance), which changes no record: its tiers serve only
// the prompts it preempts. A's 32 blocks and B's 63 go there, C's are
// A's, held already; the shared remote store takes no second copy from
// it.
func TestDisaggregatedDecodeTiers(t *testing.T) {
	t.Parallel()
	cfg, cost := tierConfig()
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	both := cfg
	both.Disaggregation.DecodeKVTiers = true
	for _, c := range []struct {
		name         string
		host, remote int64
		decodeBlocks int64 // the decode worker's writes
	}{
		{"host", 1000, 0, 32 + 63},
		{"remote", 0, 1000, 0},
		{"host and remote", 1000, 1000, 32 + 63},
	} {
		pre, st0 := runTiers(t, cfg, cost, tierSpec(t, c.host, 0, c.remote), abcRequests(2))
		got, st := runTiers(t, both, cost, tierSpec(t, c.host, 0, c.remote), abcRequests(2))
		for _, id := range []string{"A", "B", "C"} {
			if !reflect.DeepEqual(got[id], pre[id]) {
				t.Errorf("%s: %s's record changed by the decode pool's tiers:\n%+v\n%+v", c.name, id, got[id], pre[id])
			}
		}
		if n := offloaded(st) - offloaded(st0); n != c.decodeBlocks*16*131_072 {
			t.Errorf("%s: the decode worker wrote %d bytes, want %d blocks' (%d)", c.name, n, c.decodeBlocks, c.decodeBlocks*16*131_072)
		}
	}
}

// A request preempted on a decode worker with tiers loads its prompt
// back from them: one decode worker of 40 blocks runs two requests whose
// prompts take 32 of them and whose outputs need more, so the later is
// preempted, and on its return its prompt's blocks come from the host
// tier, which the decode worker wrote them to; without the decode pool's
// tiers it computes them again.
func TestDisaggregatedDecodePreemptionLoads(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	cfg := DefaultConfig()
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	cfg.Scheduler.KVCacheTokens = 40 * 16
	reqs := func() []*trace.Request {
		return []*trace.Request{
			withHashes(req("A", 0, 256, 200), 64, ids(1, 4)...),
			withHashes(req("B", 10*ms, 256, 200), 64, ids(10, 4)...),
		}
	}
	both := cfg
	both.Disaggregation.DecodeKVTiers = true
	plain, st0 := runTiers(t, cfg, cost, tierSpec(t, 1000, 0, 0), reqs())
	tiered, st := runTiers(t, both, cost, tierSpec(t, 1000, 0, 0), reqs())
	if st0.Preemptions == 0 || st.Preemptions == 0 {
		t.Fatalf("preemptions %d and %d: the case needs one", st0.Preemptions, st.Preemptions)
	}
	var loaded bool
	for _, s := range st.Seconds {
		loaded = loaded || s.LoadBytes > 0
	}
	for _, s := range st0.Seconds {
		if s.LoadBytes > 0 {
			t.Errorf("without the decode pool's tiers: %d bytes loaded at %v", s.LoadBytes, s.Second)
		}
	}
	if !loaded {
		t.Error("the preempted request loaded nothing from its decode worker's tier")
	}
	// Its return costs the load, not the recomputation of its prompt
	// and output so far.
	for _, id := range []string{"A", "B"} {
		if tiered[id].E2ESec.V > plain[id].E2ESec.V {
			t.Errorf("%s: E2E %v with the decode pool's tiers, %v without", id, tiered[id].E2ESec.V, plain[id].E2ESec.V)
		}
	}
}

func TestDisaggregatedTierErrors(t *testing.T) {
	t.Parallel()
	run := func(cfg Config, off *Offload) error {
		_, err := RunInputs(cfg, linearCost{Base: ms}, 100, Requests([]*trace.Request{req("a", 0, 10, 2)}),
			func(*trace.Request) error { return nil }, Options{Offload: off})
		return err
	}
	d := pdConfig(1)
	d.DecodeKVTiers = true
	if err := run(Config{Workers: 2, Disaggregation: d}, nil); err == nil || !strings.Contains(err.Error(), "decode_kv_tiers without KV tiers") {
		t.Errorf("decode_kv_tiers without tiers: %v", err)
	}
	sg := Config{Workers: 2, Disaggregation: d, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1000}}
	if err := run(sg, &Offload{}); err == nil || !strings.Contains(err.Error(), "decode_kv_tiers under SGLang: its decode server's HiCache is not modelled yet") {
		t.Errorf("SGLang: %v", err)
	}
}

// Pools that scale with KV tiers: a prefill worker that starts gets tiers
// of its own, empty, as a new pod's offloading starts with none (vLLM)
// and a new SGLang server's HiCache; a decode worker gets them only with
// decode_kv_tiers (vLLM). pdBurst's prompts
// share their first 256 tokens in 32 groups, more than a worker's GPU
// holds, so that hits come from the host tiers.
func TestDisaggregatedAutoscaleTiers(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i, r := range pdBurst() {
		reqs = append(reqs, withHashes(r, 64, append(ids(int64(1+10*(i%32)), 4), int64(1000+i))...))
	}
	for _, c := range []struct {
		engine      string
		decodeTiers bool
	}{{EngineVLLM, false}, {EngineVLLM, true}, {EngineSGLang, false}} {
		t.Run(fmt.Sprint(c.engine, " decode_kv_tiers=", c.decodeTiers), func(t *testing.T) {
			d := pdConfig(1)
			d.PrefillAutoscale = pdHPA(MetricQueueDepth, 2, 3)
			d.DecodeAutoscale = pdHPA(MetricInFlight, 2, 4)
			d.DecodeKVTiers = c.decodeTiers
			cfg := Config{Workers: 2, Router: RouterLeastRequests, Disaggregation: d}
			cfg.Scheduler.KVCacheTokens = 24 * 16
			spec := func() *Offload { return tierSpec(t, 1000, 0, 0) }
			if c.engine == EngineSGLang {
				// A pool of 4,000 tokens: a decode server pre-allocates
				// a prompt with its 512-token reserve for each request
				// it holds, so on 384 it would hold one at a time.
				cfg.Scheduler.Engine, cfg.Scheduler.PageSize, cfg.Scheduler.EnableHierarchicalCache = EngineSGLang, 16, true
				cfg.Scheduler.KVCacheTokens = 4000
				spec = func() *Offload { return hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1) }
			}
			all, st := checkedPDTiers(t, cfg, reqs, spec())
			again, st2 := checkedPDTiers(t, cfg, reqs, spec())
			if dump(all) != dump(again) || st.GPUHours != st2.GPUHours {
				t.Error("two replays differ")
			}
			if st.Completed != len(reqs) {
				t.Fatalf("%d of %d completed", st.Completed, len(reqs))
			}
			var host int64
			for _, r := range all {
				host += r.HostHitTokens.V
			}
			var prefillMost, decodeMost float64
			for _, f := range st.Fleet {
				prefillMost, decodeMost = max(prefillMost, f.PrefillReady), max(decodeMost, f.DecodeReady)
			}
			if host == 0 || prefillMost < 2 || decodeMost < 2 {
				t.Errorf("%d host hit tokens, at most %v prefill and %v decode workers: want hits and both pools' growth", host, prefillMost, decodeMost)
			}
		})
	}
}

// SGLang's prefill server with HiCache loads an L2 hit in the step that
// computes the rest (one layer: after the load), as TestHiCacheHostHitTTFT
// aggregated; its decode server has none. C's TTFT (the prefill server's
// token, streamed by the decode server when the KV is in) is lower than
// without HiCache by 496 tokens' compute less the load, and the rest of
// its way is the same.
func TestDisaggregatedHiCacheHit(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(64 * 16)
	cfg.Workers, cfg.Disaggregation = 2, pdConfig(1)
	plain := cfg
	plain.Scheduler.EnableHierarchicalCache = false
	const load = 3*time.Microsecond + 31*16*131_072/64
	none, _ := runTiers(t, plain, cost, nil, abcRequests(2))
	got, st := runTiers(t, cfg, cost, hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1), abcRequests(2))
	C, C0 := got["C"], none["C"]
	if C.HostHitTokens.V != 496 || C.DeviceHitTokens.V != 0 {
		t.Errorf("C: host %d device %d tokens, want 496, 0", C.HostHitTokens.V, C.DeviceHitTokens.V)
	}
	if d := ttftNs(C0) - ttftNs(C); d != 496*10*time.Microsecond-load {
		t.Errorf("C's TTFT %v with HiCache, %v without: %v less, want %v", ttftNs(C), ttftNs(C0), d, 496*10*time.Microsecond-load)
	}
	for _, id := range []string{"A", "B"} {
		if g, n := got[id], none[id]; g.TTFTSec != n.TTFTSec || g.E2ESec != n.E2ESec {
			t.Errorf("%s: TTFT %v, E2E %v with HiCache; %v, %v without", id, g.TTFTSec.V, g.E2ESec.V, n.TTFTSec.V, n.E2ESec.V)
		}
	}
	// The prefill server wrote A's 32 pages and B's 63 to L2; C's are
	// A's.
	if n := offloaded(st); n != (32+63)*16*131_072 {
		t.Errorf("%d bytes offloaded, want %d (95 pages from the prefill server)", n, (32+63)*16*131_072)
	}
}

// An SGLang prefill server with HiCache is an aggregated worker with
// HiCache up to its prompts' first token (its decode server then takes
// the KV): under each L2, L3 and prefetch setting of the aggregated
// tests (TestHiCacheStorageHitTTFT, TestHiCacheWritePolicies), C's hits
// are the same, and its TTFT is the aggregated one plus the hand-over of
// its 512 tokens (1 ms + 512 × 1,000 B at 1 GB/s), which the decode
// server streams the first token at.
func TestDisaggregatedHiCacheAsAggregated(t *testing.T) {
	t.Parallel()
	agg, cost := hiConfig(64 * 16)
	pd := agg
	pd.Workers, pd.Disaggregation = 2, pdConfig(1)
	handOver := ms + 512*time.Microsecond
	for _, c := range []struct {
		name               string
		host, disk, remote int64
		policy, write      string
	}{
		{"L2", 1000, 0, 0, PrefetchBestEffort, WriteThrough},
		{"L3 nvme, wait_complete", 40, 1000, 0, PrefetchWaitComplete, WriteThrough},
		{"L3 remote, wait_complete", 40, 0, 1000, PrefetchWaitComplete, WriteThrough},
		{"L3 nvme, timeout", 40, 1000, 0, PrefetchTimeout, WriteThrough},
		{"L2, write_back", 1000, 0, 0, PrefetchBestEffort, WriteBack},
		{"L3 nvme, write_through_selective", 40, 1000, 0, PrefetchWaitComplete, WriteThroughSelective},
	} {
		spec := func() *Offload {
			s := hiSpec(t, c.host, c.disk, c.remote, c.policy, 1)
			s.WritePolicy = c.write
			return s
		}
		a, _ := runTiers(t, agg, cost, spec(), abcRequests(1))
		p, _ := runTiers(t, pd, cost, spec(), abcRequests(1))
		A, P := a["C"], p["C"]
		if P.HostHitTokens != A.HostHitTokens || P.StorageHitTokens != A.StorageHitTokens || P.RemoteHitTokens != A.RemoteHitTokens || P.DeviceHitTokens != A.DeviceHitTokens {
			t.Errorf("%s: C's hits host %v storage %v remote %v device %v disaggregated; %v %v %v %v aggregated", c.name,
				P.HostHitTokens, P.StorageHitTokens, P.RemoteHitTokens, P.DeviceHitTokens, A.HostHitTokens, A.StorageHitTokens, A.RemoteHitTokens, A.DeviceHitTokens)
		}
		if A.CachedTokens.V == 0 {
			t.Errorf("%s: C hit nothing", c.name)
		}
		if d := ttftNs(P) - ttftNs(A); d != handOver {
			t.Errorf("%s: C's TTFT %v disaggregated, %v aggregated: %v more, want the hand-over's %v", c.name, ttftNs(P), ttftNs(A), d, handOver)
		}
	}
}

// Fast-forward keeps its promise with SGLang's HiCache on the prefill
// servers: the same records with it and without, under L3 prefetch
// (wait_complete, timeout) and L2 loads, on bursts of the random trace.
// (vLLM's tiers with disaggregation: TestTierFastForwardSameResults.)
func TestDisaggregatedHiCacheFastForward(t *testing.T) {
	t.Parallel()
	reqs := bursts(60, 10)
	for _, policy := range []string{PrefetchWaitComplete, PrefetchTimeout, PrefetchBestEffort} {
		var dumps [2]string
		var loaded [2]int64
		for k, fast := range []bool{true, false} {
			cfg, cost := hiConfig(80 * 16) // a pool that cannot keep the three prefixes
			cfg.Workers, cfg.Router, cfg.Disaggregation = 4, RouterLeastRequests, pdConfig(2)
			spec := hiSpec(t, 100, 2000, 0, policy, 1)
			var out []*trace.Request
			st, err := RunInputs(cfg, cost, 0, Requests(reqs), func(r *trace.Request) error { out = append(out, r); return nil },
				Options{Offload: spec, test: testSwitches{noFastForward: !fast}})
			if err != nil || st.Completed != len(reqs) {
				t.Fatalf("%s, fast-forward %v: %v, %d of %d completed", policy, fast, err, st.Completed, len(reqs))
			}
			dumps[k] = dump(out)
			for _, r := range out {
				loaded[k] += r.HostHitTokens.V + r.StorageHitTokens.V
			}
		}
		if dumps[0] != dumps[1] {
			t.Errorf("%s: fast-forward changes the results:\n%s", policy, firstDiff(dumps[1], dumps[0]))
		}
		if loaded[0] == 0 {
			t.Errorf("%s: nothing loaded from the tiers", policy)
		}
	}
}

// Fast-forward with vLLM's tiers and disaggregation, over seeds of the
// random trace: pools of 1 or 2 prefill workers, the decode pool's tiers
// or none, both decode routers, GPU caches that evict, tiers that fill.
// (Without the tier transfers' events in its window's bound every one of
// these differed.)
func TestDisaggregatedTierFastForwardSeeds(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 6; seed++ {
		cfg := DefaultConfig()
		cfg.Workers = 2 + int(seed%4)
		d := pdConfig(1 + int(seed%2))
		d.DecodeKVTiers = seed%2 == 0
		if seed%3 == 0 {
			d.DecodeRouter = DecodeLeastRequests
		}
		cfg.Disaggregation = d
		cfg.Scheduler.KVCacheTokens = int64(80+20*(seed%4)) * 16
		cfg.Scheduler.MaxNumBatchedTokens = 512
		cost := linearCost{Base: ms, PerToken: 20 * time.Microsecond, PerContext: 10 * time.Nanosecond}
		spec := tierSpec(t, 50+int64(seed*10), 100, 200)
		spec.BlockTokens = 32
		reqs := randomTrace(seed, 300, float64(20+seed*5))
		run := func(fast bool) (string, int64) {
			var all []*trace.Request
			opts := Options{Offload: spec, test: testSwitches{noFastForward: !fast, noPreRoute: !fast, noLoneMemo: !fast}}
			st, err := RunInputs(cfg, cost, 0, Requests(reqs), func(r *trace.Request) error { all = append(all, r); return nil }, opts)
			if err != nil {
				t.Fatal(err)
			}
			return dump(all), st.Events
		}
		slow, stepping := run(false)
		fast, events := run(true)
		if slow != fast {
			t.Errorf("seed %d: records differ with fast-forward:\n%s", seed, firstDiff(slow, fast))
		}
		if events >= stepping {
			t.Errorf("seed %d: fast-forward saved no events (%d, %d stepping)", seed, events, stepping)
		}
	}
}
