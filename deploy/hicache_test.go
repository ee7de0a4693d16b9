package deploy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// SGLang's hicache_* keys become HiCache tiers: L2 of hicache_ratio times
// the device pool or hicache_size GB a GPU, L3 by backend, the prefetch
// settings from the extra-config JSON.
func TestHiCacheKeys(t *testing.T) {
	s, err := resolveFile(t, `workers: 2
kv_store_gib: 100
scheduler:
  engine: sglang
  page_size: 64
  enable_hierarchical_cache: true
  hicache_storage_backend: mooncake
  hicache_storage_prefetch_policy: timeout
  hicache_storage_backend_extra_config: '{"prefetch_threshold": 128, "prefetch_timeout_base": 0.5}'
  hicache_storage_query_s: 0.141
`)
	if err != nil {
		t.Fatal(err)
	}
	o := s.Offload
	// Llama-3.1-8B: 131,072 B a token, 8 MiB pages; L2 twice the
	// device pool; 100 GiB of store is 12,800 pages.
	if o == nil || o.HiCache == nil || o.BlockTokens != 64 || o.HostBlocks != 2*s.KVTokens/64 || o.RemoteBlocks != 12800 || o.DiskBlocks != 0 {
		t.Fatalf("hicache %+v (KV pool %d tokens)", o, s.KVTokens)
	}
	h := o.HiCache
	if h.PrefetchPolicy != replay.PrefetchTimeout || h.PrefetchThreshold != 128 || h.PrefetchTimeoutBase != 500*time.Millisecond ||
		h.PrefetchTimeoutPerPage != time.Second/64 || h.StorageQuery != 141*time.Millisecond || h.Layers != 32 || o.WritePolicy != replay.WriteThrough {
		t.Errorf("hicache settings %+v, write policy %q", h, o.WritePolicy)
	}
	s, err = resolveFile(t, "workers: 8\nscheduler:\n  engine: sglang\n  page_size: 64\n  enable_hierarchical_cache: true\n  hicache_size: 100\n  hicache_write_policy: write_back\n  hicache_storage_backend: file\n")
	if err != nil {
		t.Fatal(err)
	}
	// 100 GB a GPU is 762,939 tokens, 11,920 pages (11,920.9); the
	// node's 8 NVMe drives (8 × 3.84 TB) shared by 8 workers.
	if o := s.Offload; o.HostBlocks != 11920 || o.DiskBlocks != o.Node.NVMeBytes/8/(64*131072) || o.WritePolicy != replay.WriteBack {
		t.Errorf("hicache_size: %+v", o)
	}
}

// Bad HiCache settings: an error naming the key and the line.
func TestHiCacheBadInput(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"workers: 8\nscheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_size: 400\n",
			"c.yaml:5: scheduler.hicache_size: 400: 8 workers of node hgx-h100 need 2980 GiB of host memory; it has 2048 GiB"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_ratio: 0.5\n",
			"c.yaml:4: scheduler.hicache_ratio: 0.5: a host pool of"},
		{"scheduler:\n  engine: sglang\n  page_size: 1000000\n  enable_hierarchical_cache: true\n",
			"c.yaml:3: scheduler.page_size: 1000000: a page larger than what llama-3.1-8b can use"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\nnode_override:\n  pcie_gbps: 0\n",
			"c.yaml:5: node_override.pcie_gbps: 0: want a positive number"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_backend: mooncake\n",
			"c.yaml:4: scheduler.hicache_storage_backend: mooncake: a shared store needs its size, kv_store_gib"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_backend: tape\n",
			"scheduler.hicache_storage_backend"},
		{"scheduler:\n  engine: sglang\n  hicache_ratio: 3\n",
			"scheduler.enable_hierarchical_cache"},
		{"scheduler:\n  enable_hierarchical_cache: true\n",
			"c.yaml:2: scheduler.enable_hierarchical_cache: SGLang's HiCache needs engine: sglang"},
		{"scheduler:\n  engine: sglang\n  kv_offloading_size: 8\n",
			"c.yaml:3: scheduler.kv_offloading_size: vLLM's offloading; SGLang's tiers are its HiCache"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_backend: file\n  hicache_storage_backend_extra_config: '{\"prefetch_threshold\": 1.5}'\n",
			"c.yaml:5: scheduler.hicache_storage_backend_extra_config: prefetch_threshold: want a whole number"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_backend: file\n  hicache_storage_query_s: -0.1\n",
			"c.yaml:5: scheduler.hicache_storage_query_s: -0.1: want a time in seconds from 0 to 3600"},
		{"scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_query_s: 0.1\n",
			"c.yaml:4: scheduler.hicache_storage_query_s: 0.1: a storage query needs an L3 tier"},
		{"scheduler:\n  hicache_storage_query_s: 0.1\n",
			"c.yaml:2: scheduler.hicache_storage_query_s: SGLang's HiCache needs engine: sglang"},
	} {
		_, err := resolveFile(t, c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
}

// FuzzHiCacheExtraConfig: SGLang's extra-config JSON never panics, and
// what it accepts is a threshold and timeouts that are not negative.
func FuzzHiCacheExtraConfig(f *testing.F) {
	for _, s := range []string{`{"prefetch_threshold": 256}`, `{"prefetch_timeout_base": 0.5, "prefetch_timeout_per_ki_token": 0.25}`, `{}`, `[]`, `{"prefetch_threshold": -1}`, `{"prefetch_timeout_base": 1e400}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, extra string) {
		text := "scheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\n  hicache_storage_backend: file\n  hicache_storage_backend_extra_config: " + strconv.Quote(extra) + "\n"
		c, err := ParseCluster("f.yaml", []byte(text))
		if err != nil {
			return
		}
		s, err := Resolve(c, trace.Run{}, Overrides{})
		if err != nil {
			return
		}
		if h := s.Offload.HiCache; h.PrefetchThreshold < 0 || h.PrefetchTimeoutBase < 0 || h.PrefetchTimeoutPerPage < 0 {
			t.Fatalf("%q accepted as %+v", extra, h)
		}
	})
}
