package replay

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// hiConfig is one SGLang worker with a pool of 1,024 tokens in 16-token
// pages and a cost of 1 ms + 10 µs a token.
func hiConfig(tokens int64) (Config, linearCost) {
	cfg := sgConfig(tokens)
	cfg.Scheduler.PageSize = 16
	cfg.Scheduler.EnableHierarchicalCache = true
	return cfg, linearCost{Base: ms, PerToken: 10 * time.Microsecond}
}

// hiSpec is tierSpec (Llama-3.1-8B's KV on an HGX H100, NVMe at 8 GB/s)
// as SGLang's HiCache: 16-token pages, write_through, the prefetch
// policy given, SGLang's default threshold and the layers given.
func hiSpec(t *testing.T, host, disk, remote int64, policy string, layers int64) *Offload {
	o := tierSpec(t, host, disk, remote)
	o.HiCache = &HiCache{PrefetchPolicy: policy, PrefetchThreshold: 256, PrefetchTimeoutBase: time.Second,
		PrefetchTimeoutPerPage: 16 * time.Second / 1024 / 4, Layers: layers}
	return o
}

// ttftNs is r's TTFT in whole nanoseconds.
func ttftNs(r *trace.Request) time.Duration { return time.Duration(r.TTFTSec.V*1e9 + 0.5) }

// The physics of an L2 hit under SGLang, to the nanosecond. C's 31 pages
// (496 tokens, one page short of its prompt: a token is left to compute,
// and matches are whole pages) load from host memory over DRAM (1 µs)
// and PCIe H2D (2 µs, 64 GB/s): 3 µs + 65,011,712 B / 64 B/ns =
// 1,018,808 ns, during the step that computes its last 16 tokens
// (1.16 ms). With one layer the step computes after the load: TTFT =
// GPU-hit TTFT + load. With 32 layers each layer computes once its KV has
// arrived: the step ends at max(1.16 ms, load + 1.16 ms / 32), here the
// compute's 1.16 ms, the load hidden.
func TestHiCacheHostHitTTFT(t *testing.T) {
	t.Parallel()
	const load = 3*time.Microsecond + 31*16*131_072/64
	step := ms + 16*10*time.Microsecond
	big, cost := hiConfig(200 * 16)
	gpu, _ := runTiers(t, big, cost, hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1), abcRequests(1))
	if got := ttftNs(gpu["C"]); got != step {
		t.Fatalf("GPU hit: TTFT %v, want %v", got, step)
	}
	if gpu["C"].DeviceHitTokens.V != 496 || gpu["C"].HostHitTokens.V != 0 {
		t.Errorf("GPU hit: device %d host %d tokens", gpu["C"].DeviceHitTokens.V, gpu["C"].HostHitTokens.V)
	}
	cfg, _ := hiConfig(64 * 16)
	for _, c := range []struct {
		layers int64
		want   time.Duration
		wait   time.Duration
	}{
		{1, load + step, load},
		{32, step, 0},
		// A load longer than the compute: the step ends one layer's
		// compute (1.16 ms / 4 = 290 µs) after it.
		{4, step, 0},
	} {
		spec := hiSpec(t, 1000, 0, 0, PrefetchBestEffort, c.layers)
		want, wait := c.want, c.wait
		if c.layers == 4 {
			spec.Node.PCIe.Bandwidth = 16e9 // 3 µs + 4,063,232 ns
			slow := 3*time.Microsecond + 31*16*131_072/16
			want, wait = slow+step/4, slow+step/4-step
		}
		got, st := runTiers(t, cfg, cost, spec, abcRequests(1))
		C := got["C"]
		if ttft := ttftNs(C); ttft != want {
			t.Errorf("%d layers: C's TTFT %v, want %v", c.layers, ttft, want)
		}
		if C.HostHitTokens.V != 496 || C.DeviceHitTokens.V != 0 || C.CachedTokens.V != 496 {
			t.Errorf("%d layers: host %d device %d cached %d tokens", c.layers, C.HostHitTokens.V, C.DeviceHitTokens.V, C.CachedTokens.V)
		}
		if C.KVFetchSec.V != wait.Seconds() {
			t.Errorf("%d layers: kv_fetch_s %v, want %v", c.layers, C.KVFetchSec.V, wait.Seconds())
		}
		if st.Evictions == 0 {
			t.Errorf("%d layers: B evicted nothing", c.layers)
		}
	}
}

// The physics of an L3 hit under SGLang, to the nanosecond. L2 holds 40
// pages, so B's pages push A's out of it; A's 32 pages are on L3, written
// on from L2. C arrives with A's prompt and, as it joins the queue, its 32
// pages (512 tokens, over the 256-token threshold) are prefetched from L3
// into L2; the prefetch policy says how long the scheduler waits for them;
// the pages that arrived load as an L2 hit during C's step (1 layer: the
// step computes after the load).
func TestHiCacheStorageHitTTFT(t *testing.T) {
	t.Parallel()
	const pages = 32 * 16 * 131_072 // bytes of A's pages
	cfg, cost := hiConfig(64 * 16)
	load := func(tokens int64) time.Duration { return 3*time.Microsecond + time.Duration(tokens*131_072/64) }
	for _, c := range []struct {
		name              string
		disk, remote      int64
		policy            string
		timeout           time.Duration
		prefetch          time.Duration // the prefetch's time, as waited for
		storage, computed int64         // tokens from L3, tokens computed
	}{
		// The storage query, a round trip of the path (2 × (80 + 1)
		// µs), then the fetch: NVMe (80 µs, 8 GB/s) into host memory
		// (1 µs): 162 µs + 8,469,608 ns.
		{"nvme/wait_complete", 1000, 0, PrefetchWaitComplete, 0, 162*time.Microsecond + 81*time.Microsecond + pages/8, 496, 16},
		// The query, 2 × (400 + 1) µs, then RDMA (400 µs, 40 GB/s) into
		// host memory: 1,677,721.6 ns of bytes, the event at the next
		// whole nanosecond.
		{"remote/wait_complete", 0, 1000, PrefetchWaitComplete, 0, 802*time.Microsecond + 401*time.Microsecond + 1_677_722, 496, 16},
		// timeout at 5 ms: (5 ms − 162 µs − 81 µs) × 8 B/ns =
		// 38,056,000 B, 18 whole pages (288 tokens); the other 224 are
		// computed.
		{"nvme/timeout", 1000, 0, PrefetchTimeout, 5 * ms, 5 * ms, 288, 224},
		// best_effort: the queue is empty, C is scheduled as it
		// arrives, with nothing fetched yet.
		{"nvme/best_effort", 1000, 0, PrefetchBestEffort, 0, 0, 0, 512},
	} {
		spec := hiSpec(t, 40, c.disk, c.remote, c.policy, 1)
		if c.timeout > 0 {
			spec.HiCache.PrefetchTimeoutBase, spec.HiCache.PrefetchTimeoutPerPage = c.timeout, 0
		}
		got, _ := runTiers(t, cfg, cost, spec, abcRequests(1))
		C := got["C"]
		step := ms + time.Duration(c.computed)*10*time.Microsecond
		want := c.prefetch + step
		if c.storage > 0 {
			want += load(c.storage)
		}
		if ttft := ttftNs(C); ttft != want {
			t.Errorf("%s: C's TTFT %v, want %v", c.name, ttft, want)
		}
		hit := C.StorageHitTokens
		if c.remote > 0 {
			hit = C.RemoteHitTokens
		}
		if hit.V != c.storage || C.HostHitTokens.V != 0 || C.DeviceHitTokens.V != 0 {
			t.Errorf("%s: storage %v host %v device %v tokens, want %d from storage", c.name, hit, C.HostHitTokens, C.DeviceHitTokens, c.storage)
		}
		if c.storage > 0 {
			if w := c.prefetch + load(c.storage); C.KVFetchSec.V != w.Seconds() {
				t.Errorf("%s: kv_fetch_s %v, want %v", c.name, C.KVFetchSec.V, w.Seconds())
			}
			if C.StoragePrefetchIOSec.V != c.prefetch.Seconds() {
				t.Errorf("%s: storage_prefetch_io_s %v, want %v", c.name, C.StoragePrefetchIOSec.V, c.prefetch.Seconds())
			}
		}
	}
}

// Two L2 loads in one step share the GPU's PCIe H2D link: C1 and C2
// (A1's and A2's 256-token prompts, which B evicted from the GPU) are
// admitted together; each loads 15 pages (31,457,280 B) at 32 GB/s, both
// ending at 3 µs + 983,040 ns; then the step computes their 32 tokens.
func TestHiCacheConcurrentLoadsShareLink(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(64 * 16)
	reqs := []*trace.Request{
		withHashes(req("A1", 0, 256, 1), 64, ids(1, 4)...),
		withHashes(req("A2", 0, 256, 1), 64, ids(20, 4)...),
		withHashes(req("B", time.Second, 1012, 1), 64, ids(100, 16)...),
		withHashes(req("C1", 2*time.Second, 256, 1), 64, ids(1, 4)...),
		withHashes(req("C2", 2*time.Second, 256, 1), 64, ids(20, 4)...),
	}
	got, _ := runTiers(t, cfg, cost, hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1), reqs)
	want := 3*time.Microsecond + 2*(15*16*131_072/64) + ms + 32*10*time.Microsecond
	for _, id := range []string{"C1", "C2"} {
		if ttft := ttftNs(got[id]); ttft != want {
			t.Errorf("%s: TTFT %v, want %v", id, ttft, want)
		}
		if got[id].HostHitTokens.V != 240 {
			t.Errorf("%s: %d host hit tokens, want 240", id, got[id].HostHitTokens.V)
		}
	}
}

// The write policies: write_back writes A's pages to L2 only as the radix
// cache evicts them (B's admission), write_through_selective as A
// finishes; either way C then loads them from L2 as under write_through.
// Under write_back nothing reaches L3 (SGLang's write-back path does not
// back up to storage), so with an L2 too small to keep A's pages C
// computes its whole prompt; under write_through they come back from L3.
func TestHiCacheWritePolicies(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(64 * 16)
	const load = 3*time.Microsecond + 31*16*131_072/64
	step := ms + 16*10*time.Microsecond
	for _, p := range []string{WriteBack, WriteThroughSelective, WriteThrough} {
		spec := hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1)
		spec.WritePolicy = p
		got, _ := runTiers(t, cfg, cost, spec, abcRequests(1))
		if C := got["C"]; ttftNs(C) != load+step || C.HostHitTokens.V != 496 {
			t.Errorf("%s: C's TTFT %v with %d host hit tokens, want %v and 496", p, ttftNs(C), C.HostHitTokens.V, load+step)
		}
		spec = hiSpec(t, 40, 1000, 0, PrefetchWaitComplete, 1)
		spec.WritePolicy = p
		got, _ = runTiers(t, cfg, cost, spec, abcRequests(1))
		want := int64(496)
		if p == WriteBack {
			want = 0
		}
		if C := got["C"]; C.StorageHitTokens.V != want {
			t.Errorf("%s, small L2: %d storage hit tokens, want %d", p, C.StorageHitTokens.V, want)
		}
	}
}

// The per-second statistics of the tiers: A's 32 pages are offloaded in
// second 0 (67,108,864 B over D2H) and held in L2 from then on; C's 31
// pages load in second 2 (65,011,712 B over H2D: 0.1 % of its 64 GB/s
// for a second); nothing crosses NVMe or the NIC.
func TestHiCacheSeconds(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(64 * 16)
	st, err := RunInputs(cfg, cost, 0, Requests(abcRequests(1)), func(*trace.Request) error { return nil },
		Options{Offload: hiSpec(t, 1000, 0, 0, PrefetchBestEffort, 1), PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	const page = 16 * 131_072
	s := st.Seconds
	if len(s) != 3 {
		t.Fatalf("%d seconds", len(s))
	}
	if s[0].OffloadBytes != 32*page || s[0].LoadBytes != 0 || s[2].LoadBytes != 31*page || s[1].OffloadBytes != 63*page {
		t.Errorf("offload %d %d, load %d %d", s[0].OffloadBytes, s[1].OffloadBytes, s[0].LoadBytes, s[2].LoadBytes)
	}
	if s[1].HostKVBytes != 32*page || s[2].HostKVBytes != (32+63)*page {
		t.Errorf("L2 holds %d then %d bytes", s[1].HostKVBytes, s[2].HostKVBytes)
	}
	if want := 31.0 * page / 64e9; math.Abs(s[2].PCIeH2DUtil-want) > 1e-12 || s[0].PCIeD2HUtil != 32.0*page/64e9 {
		t.Errorf("PCIe H2D %v (want %v), D2H %v", s[2].PCIeH2DUtil, want, s[0].PCIeD2HUtil)
	}
	if s[2].NVMeUtil != 0 || s[2].NICUtil != 0 || s[2].HostMemUtil == 0 {
		t.Errorf("NVMe %v NIC %v DRAM %v", s[2].NVMeUtil, s[2].NICUtil, s[2].HostMemUtil)
	}
}

// BenchmarkReplayMooncakeHiCache replays the Mooncake conversation trace
// on 4 workers of Llama-3.1-8B on H100 under SGLang with HiCache: 64-token
// pages, an L2 of 64 GiB and a file (NVMe) L3 of 1 TiB a worker,
// write_through, wait_complete prefetch (OPALTRACE_BENCH_NO_TIERS: the
// same without tiers).
func BenchmarkReplayMooncakeHiCache(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	cfg := Config{Workers: 4, Scheduler: SchedulerConfig{Engine: EngineSGLang, SGLangConfig: SGLangConfig{PageSize: 64}}}
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	page := int64(64 * 131_072)
	off := &Offload{Node: n, GPUsPerWorker: 1, KVBytesPerToken: 131_072, BlockTokens: 64,
		HostBlocks: 64 << 30 / page, DiskBlocks: 1 << 40 / page,
		HiCache: &HiCache{PrefetchPolicy: PrefetchWaitComplete, PrefetchThreshold: 256, Layers: 32}}
	if os.Getenv("OPALTRACE_BENCH_NO_TIERS") != "" {
		off = nil
	}
	var st Stats
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		st, err = RunInputs(cfg, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, Options{Offload: off})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(st.Events), "events/op")
	b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "hit-rate")
}

// BenchmarkReplayMooncakeHiCachePage1 is HiCache at SGLang's default
// page_size of 1 (a tier entry and an index entry per token): the
// Mooncake conversation trace on 8 workers of Llama-3.1-8B on H100, an L2
// of 200 GiB a worker, write_through. It reports the page faults a replay
// takes (faults/op, minor faults: the tiers' index tables are hundreds of
// MB, fresh memory) besides its CPU time.
func BenchmarkReplayMooncakeHiCachePage1(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	cfg := Config{Workers: 8, Scheduler: SchedulerConfig{Engine: EngineSGLang, SGLangConfig: SGLangConfig{PageSize: 1}}}
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	off := &Offload{Node: n, GPUsPerWorker: 1, KVBytesPerToken: 131_072, BlockTokens: 1,
		HostBlocks: 200 << 30 / 131_072, HiCache: &HiCache{PrefetchPolicy: PrefetchBestEffort, PrefetchThreshold: 256, Layers: 32}}
	cpu0, faults0 := cpuTime(), minorFaults()
	for b.Loop() {
		if _, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, Options{Offload: off}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(minorFaults()-faults0)/float64(b.N), "faults/op")
}

// An L3 prefetch operation whose query finds nothing, after SGLang
// v0.5.2: _prefetch_kvcache issues one for every request whose prompt
// past its L1+L2 match is at least prefetch_threshold tokens, whatever
// L3 holds; under wait_complete and timeout the request is held until
// the query (one round trip of the L3 path: 2 × (400 + 1) µs) has
// revoked it, and never joins the batch built as the scheduler receives
// it; best_effort ends the operation at once.
//
// A (512 new tokens) reaches an idle worker at 0; D (200 tokens: below
// the threshold, no operation) at 1 ms and B (512 new tokens) at 1.5 ms,
// while A's step (1 ms + 512 × 10 µs = 6.12 ms) runs. Under
// wait_complete and timeout A starts after the query (0.802 ms); at A's
// end D and B are received, B's operation is issued and D runs alone
// (3 ms), B after it (6.12 ms). Under best_effort A starts at once, and D
// and B share a step (1 ms + 712 × 10 µs).
func TestHiCacheStorageQueryRevoked(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(200 * 16)
	reqs := func() []*trace.Request {
		return []*trace.Request{
			withHashes(req("A", 0, 512, 1), 64, ids(1, 8)...),
			withHashes(req("D", ms, 200, 1), 64, ids(50, 3)...),
			withHashes(req("B", 1500*time.Microsecond, 512, 1), 64, ids(100, 8)...),
		}
	}
	const rtt = 2 * 401 * time.Microsecond
	stepA := ms + 512*10*time.Microsecond
	for _, c := range []struct {
		policy           string
		ttftA, ttftD, tB time.Duration
	}{
		{PrefetchWaitComplete, rtt + stepA, rtt + stepA - ms + 3*ms, rtt + stepA + 3*ms + stepA - 1500*time.Microsecond},
		{PrefetchTimeout, rtt + stepA, rtt + stepA - ms + 3*ms, rtt + stepA + 3*ms + stepA - 1500*time.Microsecond},
		{PrefetchBestEffort, stepA, stepA - ms + ms + 712*10*time.Microsecond, stepA - 1500*time.Microsecond + ms + 712*10*time.Microsecond},
	} {
		got, _ := runTiers(t, cfg, cost, hiSpec(t, 1000, 0, 1000, c.policy, 1), reqs())
		for _, x := range []struct {
			id   string
			want time.Duration
		}{{"A", c.ttftA}, {"D", c.ttftD}, {"B", c.tB}} {
			if ttft := ttftNs(got[x.id]); ttft != x.want {
				t.Errorf("%s: %s's TTFT %v, want %v", c.policy, x.id, ttft, x.want)
			}
		}
		if h := got["B"].StorageHitTokens.Or(0); h != 0 {
			t.Errorf("%s: B has %d storage hit tokens", c.policy, h)
		}
	}
}

// The prefetch thread's time per storage query (HiCache.StorageQuery),
// which SGLang's one prefetch thread a rank spends on one operation
// after another (HiCacheController.prefetch_thread_func). A and B (512
// new tokens each, nothing in L3) reach an idle worker at 0 and their
// operations are issued at its first build, under wait_complete. With
// no query time both queries end after the round trip (0.802 ms) and A
// and B share a step (1 ms + 1,024 × 10 µs). With 10 ms a query, A's
// ends at 10 ms + the round trip and A runs alone (6.12 ms); B's starts
// when A's ends and B runs after it, at 20 ms + the round trip.
func TestHiCacheStorageQueryTime(t *testing.T) {
	t.Parallel()
	cfg, cost := hiConfig(200 * 16)
	const rtt = 2 * 401 * time.Microsecond
	stepA := ms + 512*10*time.Microsecond
	for _, c := range []struct {
		query        time.Duration
		ttftA, ttftB time.Duration
	}{
		{0, rtt + ms + 1024*10*time.Microsecond, rtt + ms + 1024*10*time.Microsecond},
		{10 * ms, 10*ms + rtt + stepA, 20*ms + rtt + stepA},
	} {
		spec := hiSpec(t, 1000, 0, 1000, PrefetchWaitComplete, 1)
		spec.HiCache.StorageQuery = c.query
		got, _ := runTiers(t, cfg, cost, spec, []*trace.Request{
			withHashes(req("A", 0, 512, 1), 64, ids(1, 8)...),
			withHashes(req("B", 0, 512, 1), 64, ids(100, 8)...),
		})
		for _, x := range []struct {
			id   string
			want time.Duration
		}{{"A", c.ttftA}, {"B", c.ttftB}} {
			if ttft := ttftNs(got[x.id]); ttft != x.want {
				t.Errorf("query %v: %s's TTFT %v, want %v", c.query, x.id, ttft, x.want)
			}
		}
	}
	spec := hiSpec(t, 1000, 0, 1000, PrefetchWaitComplete, 1)
	spec.HiCache.StorageQuery = -time.Nanosecond
	if err := spec.Validate(1); err == nil {
		t.Error("a negative storage query time passed Validate")
	}
}

// Under write_back the radix cache's evictions start stores to L2, so a
// step that allocates may start a transfer: fast-forward builds no step
// past an event then. It built them, and a store started ahead of a
// transfer's end failed the replay ("transfers completed … before their
// event") on bursts of the random trace; now it replays as the engine
// without fast-forward does.
func TestHiCacheWriteBackFastForward(t *testing.T) {
	t.Parallel()
	reqs := bursts(60, 10)
	for _, workers := range []int{1, 2, 4} {
		var dumps [2]string
		for k, fast := range []bool{true, false} {
			cfg, cost := hiConfig(512 * 16)
			cfg.Workers, cfg.Router = workers, RouterLeastRequests
			spec := hiSpec(t, 400, 0, 2000, PrefetchBestEffort, 1)
			spec.WritePolicy = WriteBack
			var out []*trace.Request
			st, err := RunInputs(cfg, cost, 0, Requests(reqs), func(r *trace.Request) error { out = append(out, r); return nil },
				Options{Offload: spec, test: testSwitches{noFastForward: !fast}})
			if err != nil || st.Completed != len(reqs) {
				t.Fatalf("%d workers, fast-forward %v: %v, %d of %d completed", workers, fast, err, st.Completed, len(reqs))
			}
			dumps[k] = dump(out)
		}
		if dumps[0] != dumps[1] {
			t.Errorf("%d workers: fast-forward changes the results", workers)
		}
	}
}
