package replay

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// tierConfig is one worker with 64 KV blocks of 16 tokens and a cost of
// 1 ms + 10 µs a token.
func tierConfig() (Config, linearCost) {
	cfg := DefaultConfig()
	cfg.Scheduler.KVCacheTokens = 64 * 16
	return cfg, linearCost{Base: ms, PerToken: 10 * time.Microsecond}
}

// tierSpec is Llama-3.1-8B's KV (131,072 B a token) on one H100 of an
// HGX node, with 16-token tier blocks (vLLM's native offloading with its
// default block size) and the tiers given.
func tierSpec(t *testing.T, host, disk, remote int64) *Offload {
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	n.NVMe.Bandwidth = 8e9 // whole nanoseconds in the hand computations
	return &Offload{Node: n, GPUsPerWorker: 1, KVBytesPerToken: 131_072, BlockTokens: 16,
		HostBlocks: host, DiskBlocks: disk, RemoteBlocks: remote}
}

// runTiers replays reqs with the KV tiers off (nil) or on, per second,
// every step and record checked by the validator.
func runTiers(t *testing.T, cfg Config, cost model.StepModel, off *Offload, reqs []*trace.Request) (map[string]*trace.Request, Stats) {
	t.Helper()
	var all []*trace.Request
	byID := map[string]*trace.Request{}
	v := newValidator(t, cfg, reqs)
	st, err := RunInputs(cfg, cost, 0, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		byID[r.RequestID] = r
		return v.output(r)
	}, Options{Offload: off, Observe: v.step, PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	v.finish(all)
	return byID, st
}

// abcRequests are the tier tests' three requests, of out output tokens
// each: A (512 tokens) runs and its 32 blocks (HiCache: pages) are
// written through to the tier; B (1,012 tokens) takes the worker's 64 GPU
// blocks (HiCache: the pool), evicting A's; C, with A's prompt, misses
// the GPU.
func abcRequests(out int64) []*trace.Request {
	return []*trace.Request{
		withHashes(req("A", 0, 512, out), 64, ids(1, 8)...),
		withHashes(req("B", time.Second, 1012, out), 64, ids(100, 16)...),
		withHashes(req("C", 2*time.Second, 512, out), 64, ids(1, 8)...),
	}
}

// ids returns n trace block ids from base, for 64-token trace blocks.
func ids(base int64, n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = base + int64(i)
	}
	return s
}

// The physics of a tier hit, to the nanosecond. A (512 tokens) runs and
// its 32 blocks are written through to the tier; B (1,012 tokens) takes
// all 64 GPU blocks, evicting A's; C, with A's prompt, misses the GPU and
// loads 31 blocks (496 tokens: one token is left to compute, so the last
// block is computed) from the tier: 65,011,712 bytes. With the prefix
// still in GPU memory C's TTFT is one step of its 16 new tokens; from the
// tier it is that plus the load: every link latency of the path plus the
// bytes over the bottleneck.
func TestTierHitTTFT(t *testing.T) {
	t.Parallel()
	const loadBytes = 31 * 16 * 131_072
	step := ms + 16*10*time.Microsecond // C's 16 computed tokens
	cfg, cost := tierConfig()
	big := cfg
	big.Scheduler.KVCacheTokens = 200 * 16
	gpu, _ := runTiers(t, big, cost, tierSpec(t, 1000, 0, 0), abcRequests(1))
	if got := gpu["C"].TTFTSec.V; got != step.Seconds() {
		t.Fatalf("GPU hit: TTFT %v, want %v", got, step.Seconds())
	}
	if gpu["C"].DeviceHitTokens.V != 496 || gpu["C"].HostHitTokens.V != 0 {
		t.Errorf("GPU hit: device %d host %d tokens", gpu["C"].DeviceHitTokens.V, gpu["C"].HostHitTokens.V)
	}
	for _, c := range []struct {
		name               string
		host, disk, remote int64
		load               time.Duration
		field              func(r *trace.Request) trace.Opt[int64]
	}{
		// Host DRAM (1 µs) and PCIe H2D (2 µs, 64 GB/s): 1,015,808 ns.
		{"host", 1000, 0, 0, 3*time.Microsecond + loadBytes/64, func(r *trace.Request) trace.Opt[int64] { return r.HostHitTokens }},
		// NVMe (80 µs, 8 GB/s) through host memory: 8,126,464 ns.
		{"nvme", 0, 1000, 0, 83*time.Microsecond + loadBytes/8, func(r *trace.Request) trace.Opt[int64] { return r.StorageHitTokens }},
		// Remote over RDMA (400 µs, 40 GB/s) through host memory:
		// 1,625,292.8 ns, the completion rounded to the nanosecond.
		{"remote", 0, 0, 1000, 403*time.Microsecond + 1_625_293, func(r *trace.Request) trace.Opt[int64] { return r.RemoteHitTokens }},
	} {
		got, st := runTiers(t, cfg, cost, tierSpec(t, c.host, c.disk, c.remote), abcRequests(1))
		C := got["C"]
		want := time.Duration(C.Arrival.V) + c.load + step
		if ttft := time.Duration(trace.Time(C.TTFTSec.V*1e9+0.5) + C.Arrival.V); ttft != want {
			t.Errorf("%s: C's first token at %v, want %v (load %v + step %v)", c.name, ttft, want, c.load, step)
		}
		if C.TTFTSec.V-gpu["C"].TTFTSec.V != c.load.Seconds() && time.Duration((C.TTFTSec.V-gpu["C"].TTFTSec.V)*1e9+0.5) != c.load {
			t.Errorf("%s: TTFT %v = GPU-hit TTFT %v + %v, want + %v", c.name, C.TTFTSec.V, gpu["C"].TTFTSec.V, C.TTFTSec.V-gpu["C"].TTFTSec.V, c.load)
		}
		if h := c.field(C); !h.OK || h.V != 496 || C.DeviceHitTokens.V != 0 {
			t.Errorf("%s: tier hit %v tokens, device %d", c.name, h, C.DeviceHitTokens.V)
		}
		if C.KVFetchSec.V != c.load.Seconds() {
			t.Errorf("%s: kv_fetch_s %v, want %v", c.name, C.KVFetchSec.V, c.load.Seconds())
		}
		if st.Evictions == 0 {
			t.Errorf("%s: B evicted nothing", c.name)
		}
	}
}

// Two loads into one GPU share its PCIe H2D link: C1 and C2 (A1's and
// A2's prompts, which B evicted) arrive together; each load gets 32 GB/s
// and both end at 3 µs + 2 × 1,015,808 ns; then one step computes both
// requests' 16 tokens.
func TestTierConcurrentLoadsShareLink(t *testing.T) {
	t.Parallel()
	cfg, cost := tierConfig()
	reqs := []*trace.Request{
		withHashes(req("A1", 0, 512, 1), 64, ids(1, 8)...),
		withHashes(req("A2", 0, 512, 1), 64, ids(20, 8)...),
		withHashes(req("B", time.Second, 1012, 1), 64, ids(100, 16)...),
		withHashes(req("C1", 2*time.Second, 512, 1), 64, ids(1, 8)...),
		withHashes(req("C2", 2*time.Second, 512, 1), 64, ids(20, 8)...),
	}
	got, _ := runTiers(t, cfg, cost, tierSpec(t, 1000, 0, 0), reqs)
	load := 3*time.Microsecond + 2*(31*16*131_072/64)
	want := load + ms + 32*10*time.Microsecond
	for _, id := range []string{"C1", "C2"} {
		if ttft := time.Duration(got[id].TTFTSec.V*1e9 + 0.5); ttft != want {
			t.Errorf("%s: TTFT %v, want %v", id, ttft, want)
		}
		if got[id].KVFetchSec.V != load.Seconds() {
			t.Errorf("%s: kv_fetch_s %v, want %v", id, got[id].KVFetchSec.V, load.Seconds())
		}
	}
}

// Tiers change nothing about fast-forward's promise: the same records
// with and without it, and with the per-step validator, under load that
// evicts, preempts, loads from every tier and times requests out;
// disaggregated too, with the prefill pool's tiers and the decode pool's.
func TestTierFastForwardSameResults(t *testing.T) {
	t.Parallel()
	decodeTiers := pdConfig(1)
	decodeTiers.DecodeKVTiers = true
	for _, c := range []struct {
		name    string
		timeout float64
		policy  string
		pd      DisaggregationConfig
	}{
		{"write-through", 0, "", DisaggregationConfig{}},
		{"write-back+timeouts", 0.04, WriteBack, DisaggregationConfig{}},
		{"disaggregated", 0, "", pdConfig(1)},
		{"disaggregated+timeouts, decode tiers", 0.04, "", decodeTiers},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Workers = 3
			cfg.Disaggregation = c.pd
			cfg.Scheduler.KVCacheTokens = 150 * 16
			cfg.Scheduler.MaxNumBatchedTokens = 512
			cfg.Client.TimeoutSec = c.timeout
			cost := linearCost{Base: ms, PerToken: 20 * time.Microsecond, PerContext: 10 * time.Nanosecond}
			spec := tierSpec(t, 100, 200, 400)
			spec.BlockTokens = 32
			spec.WritePolicy = c.policy
			reqs := randomTrace(7, 400, 40)
			run := func(fast bool) (string, Stats) {
				var all []*trace.Request
				opts := Options{Offload: spec, test: testSwitches{noFastForward: !fast, noPreRoute: !fast, noLoneMemo: !fast}}
				var v *validator
				if !fast {
					v = newValidator(t, cfg, reqs)
					opts.Observe = v.step
				}
				st, err := RunInputs(cfg, cost, 0, Requests(reqs), func(r *trace.Request) error {
					all = append(all, r)
					if v != nil {
						return v.output(r)
					}
					return nil
				}, opts)
				if err != nil {
					t.Fatal(err)
				}
				if v != nil {
					v.finish(all)
				}
				var loaded [numTiers]int64
				for _, r := range all {
					loaded[tierHost] += r.HostHitTokens.V
					loaded[tierDisk] += r.StorageHitTokens.V
					loaded[tierRemote] += r.RemoteHitTokens.V
				}
				for tier, n := range loaded {
					if n == 0 {
						t.Errorf("fast %v: nothing loaded from tier %d", fast, tier)
					}
				}
				return dump(all), st
			}
			slow, sst := run(false)
			fast, fst := run(true)
			if slow != fast {
				t.Errorf("records differ with fast-forward:\n%s", firstDiff(slow, fast))
			}
			sst.Events, fst.Events = 0, 0
			if !reflect.DeepEqual(sst, fst) {
				t.Errorf("stats differ: %+v\n%+v", sst, fst)
			}
			if c.timeout > 0 && fst.TimedOut == 0 {
				t.Error("no request timed out")
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "- " + al[i] + "\n+ " + bl[i]
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// BenchmarkReplayMooncakeTiers replays the whole Mooncake conversation
// trace on 4 workers (Llama-3.1-8B, H100 of an HGX node) with a 64 GiB
// CPU tier and a 1 TiB NVMe tier per worker in LMCache's 256-token
// chunks.
func BenchmarkReplayMooncakeTiers(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	cfg := Config{Workers: 4}
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	chunk := int64(256 * 131_072)
	off := &Offload{Node: n, GPUsPerWorker: 1, KVBytesPerToken: 131_072, BlockTokens: 256,
		HostBlocks: 64 << 30 / chunk, DiskBlocks: 1 << 40 / chunk}
	if os.Getenv("OPALTRACE_BENCH_NO_TIERS") != "" {
		off = nil // the same replay without tiers, for comparison
	}
	var st Stats
	var loaded int64
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		loaded = 0
		st, err = RunInputs(cfg, cost, blocks, Requests(reqs), func(r *trace.Request) error {
			loaded += r.HostHitTokens.V + r.StorageHitTokens.V
			return nil
		}, Options{Offload: off})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(st.Events), "events/op")
	b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "hit-rate")
	b.ReportMetric(float64(loaded)/float64(st.PromptTokens), "tier-hit-rate")
}

// TestOffloadStallSaysWhy replays a workload on a GPU cache so small
// (100 blocks of 8 tokens, prompts up to some 650 tokens) that, with a
// CPU tier, a preempted request comes to the queue's front needing more
// blocks than are free while a request behind it holds the blocks of its
// finished load, and nothing runs: the replay must stop with an error
// that says so, not an internal error.
func TestOffloadStallSaysWhy(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(13, 400, 100)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	cfg := Config{Workers: 1, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 8}}
	_, err := RunInputs(cfg, cost, 100, Requests(reqs), func(*trace.Request) error { return nil }, Options{Offload: tierSpec(t, 60, 0, 0)})
	want := "replay: worker w0 stalls: request 7 at its queue's front cannot get the KV blocks it needs (70 free of 100), " +
		"requests behind it (1) hold 30 blocks that their loads from a KV tier filled, and none is running to free any; " +
		"give the workers more KV cache"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
