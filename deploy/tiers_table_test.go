package deploy

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

var tierTable = flag.Bool("tiertable", false, "replay the Mooncake conversation trace with GPU+CPU caches of 4 sizes under both engines and write testdata/tiers_mooncake.md")

// TestTierTableMooncake replays the whole Mooncake conversation trace on
// 16 workers of Llama-3.1-8B on H100 (round-robin, the roofline) under
// vLLM (native CPU offloading, kv_offloading_size) and SGLang (HiCache L2,
// hicache_size; page_size 64), each without a CPU tier and with three
// sizes, and writes the prefix hit rate, the ideal LRU hit rate of
// `stats --cache-curve` at the same total capacity (16 × GPU+CPU tokens a
// worker) and TTFT p50/p99 to testdata/tiers_mooncake.md (run with
// -tiertable; 8 replays of 12,031 requests). It fails when a replay hits
// more than the ideal LRU cache of its capacity could, or when p99 TTFT
// rises as the cache grows.
func TestTierTableMooncake(t *testing.T) {
	var reqs []*trace.Request
	if _, _, err := ingest.Files([]string{shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl")}, ingest.Options{Format: "mooncake"},
		func(r *trace.Request) error { reqs = append(reqs, r.Clone()); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	curve, err := analyze.ComputeCacheCurve(reqs)
	if err != nil {
		t.Fatal(err)
	}
	const base = "workers: 16\nhardware: h100\nmodel: llama-3.1-8b\nscheduler:\n  block_size: 16\n"
	runs := []struct{ engine, cpu, yaml string }{
		{"vllm", "none", base},
		{"vllm", "64 GiB", base + "  kv_offloading_size: 64\n"},
		{"vllm", "128 GiB", base + "  kv_offloading_size: 128\n"},
		{"vllm", "240 GiB", base + "  kv_offloading_size: 240\n"},
		{"sglang", "none", base + "  engine: sglang\n  page_size: 64\n"},
		{"sglang", "64 GB", base + "  engine: sglang\n  page_size: 64\n  enable_hierarchical_cache: true\n  hicache_size: 64\n"},
		{"sglang", "128 GB", base + "  engine: sglang\n  page_size: 64\n  enable_hierarchical_cache: true\n  hicache_size: 128\n"},
		{"sglang", "256 GB", base + "  engine: sglang\n  page_size: 64\n  enable_hierarchical_cache: true\n  hicache_size: 256\n"},
	}
	lastP99 := map[string]float64{}
	var b strings.Builder
	b.WriteString("# GPU+CPU KV caches on the Mooncake conversation trace\n\n")
	b.WriteString("12,031 requests, open loop at the trace's times, 16 workers of Llama-3.1-8B on one H100 each, round-robin,\n")
	b.WriteString("roofline; vLLM v1 defaults with native CPU offloading (kv_offloading_size, GiB), SGLang with HiCache's L2\n")
	b.WriteString("(hicache_size, GB a GPU; page_size 64; write_through). C: tokens a worker caches, GPU + CPU. Hit rate:\n")
	b.WriteString("prefix-hit tokens / prompt tokens (GPU and CPU hits). Ideal: the hit rate of one LRU cache of 16 × C tokens\n")
	b.WriteString("in 512-token blocks (`opaltrace stats --cache-curve`), which no replay can beat.\n")
	b.WriteString("Regenerate: go test ./deploy -run TestTierTableMooncake -tiertable -timeout 30m\n\n")
	b.WriteString("| engine | CPU tier | C (tokens/worker) | hit rate | of which CPU | ideal at 16 × C | TTFT p50 (s) | TTFT p99 (s) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, rn := range runs {
		c, err := ParseCluster("tiers.yaml", []byte(rn.yaml))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Resolve(c, trace.Run{}, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		C := s.KVTokens
		if o := s.Offload; o != nil {
			C += o.HostBlocks * o.BlockTokens
		}
		var ttft []float64
		var host int64
		st, err := replay.RunInputs(s.Config, s.Step, s.KVBlocks, replay.Requests(reqs), func(r *trace.Request) error {
			if r.Status == trace.StatusOK {
				ttft = append(ttft, r.TTFTSec.V)
				host += r.HostHitTokens.Or(0)
			}
			return nil
		}, replay.Options{Offload: s.Offload, Transient: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed != len(reqs) {
			t.Errorf("%s %s: %d of %d requests completed", rn.engine, rn.cpu, st.Completed, len(reqs))
		}
		d := analyze.NewDist(ttft)
		hit := float64(st.CachedTokens) / float64(st.PromptTokens)
		_, ideal := curve.HitRate(16 * C / curve.BlockSize)
		if hit > ideal {
			t.Errorf("%s %s: hit rate %.4f above the ideal LRU cache's %.4f at %d tokens", rn.engine, rn.cpu, hit, ideal, 16*C)
		}
		if p, ok := lastP99[rn.engine]; ok && d.Percentile(99) > p {
			t.Errorf("%s %s: TTFT p99 %.3f s rose from %.3f s with a larger cache", rn.engine, rn.cpu, d.Percentile(99), p)
		}
		lastP99[rn.engine] = d.Percentile(99)
		fmt.Fprintf(&b, "| %s | %s | %d | %.4f | %.4f | %.4f | %.3f | %.3f |\n", rn.engine, rn.cpu, C, hit,
			float64(host)/float64(st.PromptTokens), ideal, d.Percentile(50), d.Percentile(99))
	}
	t.Log("\n" + b.String())
	// The table is a golden file: every run checks it, the flag (or
	// -update) rewrites it.
	golden.CheckOrWrite(t, filepath.Join("testdata", "tiers_mooncake.md"), []byte(b.String()), *tierTable)
}
