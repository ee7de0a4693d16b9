package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

func resolveFile(t *testing.T, text string) (*Setup, error) {
	t.Helper()
	c, err := ParseCluster("c.yaml", []byte(text))
	if err != nil {
		return nil, err
	}
	return Resolve(c, trace.Run{}, Overrides{})
}

// The engines' own keys become tiers of the right size on the GPU's node.
func TestOffloadKeys(t *testing.T) {
	s, err := resolveFile(t, "workers: 2\nscheduler:\n  kv_offloading_size: 64\n")
	if err != nil {
		t.Fatal(err)
	}
	o := s.Offload
	// Llama-3.1-8B: 131,072 B a token; 16-token blocks of 2 MiB; 64 GiB.
	if o == nil || o.Node.Name != "hgx-h100" || o.KVBytesPerToken != 131_072 || o.BlockTokens != 16 || o.HostBlocks != 32768 || o.DiskBlocks != 0 {
		t.Fatalf("native offload %+v", o)
	}
	s, err = resolveFile(t, `workers: 2
tp: 2
kv_store_gib: 1000
scheduler:
  kv_offloading_backend: lmcache
  lmcache:
    chunk_size: 256
    max_local_cpu_size: 32
    local_disk: file:///nvme/lmcache
    max_local_disk_size: 512
    remote_url: mooncakestore://store:50051
node_override:
  network: tcp
`)
	if err != nil {
		t.Fatal(err)
	}
	o = s.Offload
	// 256-token chunks of 32 MiB: 32 GiB is 1,024, 512 GiB 16,384 and
	// 1,000 GiB 32,000; a TP2 worker moves its KV over 2 PCIe links.
	if o.BlockTokens != 256 || o.HostBlocks != 1024 || o.DiskBlocks != 16384 || o.RemoteBlocks != 32000 || o.GPUsPerWorker != 2 || o.Node.Network.Bandwidth != 25e9 {
		t.Fatalf("lmcache offload %+v", o)
	}
	if s, err := resolveFile(t, "workers: 2\n"); err != nil || s.Offload != nil {
		t.Errorf("no tier asked: %+v, %v", s.Offload, err)
	}
	if !strings.Contains(s.Cluster.YAML(), "kv_offloading_backend: lmcache") {
		t.Errorf("the effective cluster does not record the tiers:\n%s", s.Cluster.YAML())
	}
}

// Bad tier settings: an error naming the key and the line.
func TestOffloadBadInput(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"workers: 8\nscheduler:\n  kv_offloading_size: 300\n",
			"c.yaml:3: scheduler.kv_offloading_size: 300: 8 workers of node hgx-h100 need 2400 GiB of host memory; it has 2048 GiB"},
		{"scheduler:\n  kv_offloading_backend: lmcache\n  lmcache:\n    chunk_size: 100\n",
			"c.yaml:4: scheduler.lmcache.chunk_size: 100: a chunk must be whole KV blocks of 16 tokens (scheduler.block_size)"},
		{"scheduler:\n  kv_offloading_size: 8\nnode_override:\n  pcie_gbps: 0\n",
			"c.yaml:4: node_override.pcie_gbps: 0: want a positive number"},
		{"scheduler:\n  kv_offloading_size: 0\n",
			"c.yaml:2: scheduler.kv_offloading_size: 0: want a CPU tier size in GiB above 0"},
		{"scheduler:\n  kv_offloading_backend: lmcache\n  lmcache:\n    remote_url: redis://x:6379\n",
			"c.yaml:4: scheduler.lmcache.remote_url: a remote tier needs the store's size, kv_store_gib"},
		{"node: dgx-a1\nscheduler:\n  kv_offloading_size: 8\n",
			"c.yaml:1: node: unknown node \"dgx-a1\""},
		{"scheduler:\n  kv_offloading_backend: tape\n",
			"scheduler.kv_offloading_backend"},
	} {
		_, err := resolveFile(t, c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
}
