package calibrate

import (
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/trace"
)

// The links calibrate --server-side fits reach the node the replay's
// tiers run on: the PCIe bandwidth, fitted on a worker's whole KV load,
// becomes each of its GPUs' share; a node_override in the cluster file
// still wins over the fit.
func TestFittedLinksReachTheReplayNode(t *testing.T) {
	cm, err := ParseCostModel("cm.yaml", []byte(`opaltrace_cost_model: 1
form: roofline
hardware: h100
model: llama-3.1-8b
tp: 2
coefficients:
  pcie_bandwidth_bytes_per_s: {value: 50e9, unit: B/s, from: host_fetch_s.s_per_byte}
  pcie_latency_s: {value: 20e-6, unit: s, from: host_fetch_s.latency}
  nvme_bandwidth_bytes_per_s: {value: 6e9, unit: B/s, from: storage_fetch_s.s_per_byte}
`))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(text string) *deploy.Setup {
		t.Helper()
		c, err := deploy.ParseCluster("c.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		s, err := deploy.Resolve(c, trace.Run{}, deploy.Overrides{CostModel: cm, CostModelText: "cm.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const tiers = "tp: 2\nscheduler:\n  kv_offloading_size: 64\n"
	s := resolve(tiers)
	n := s.Offload.Node
	if !slices.Contains(s.Notes, "node links from the cost model: nvme_bandwidth_bytes_per_s, pcie_bandwidth_bytes_per_s, pcie_latency_s (node_override keys win)") {
		t.Errorf("notes %q: the fitted links are not named", s.Notes)
	}
	if n.PCIe.Bandwidth != 25e9 || n.PCIe.Latency != 20*time.Microsecond || n.NVMe.Bandwidth != 6e9 {
		t.Errorf("node links: PCIe %g B/s %v, NVMe %g B/s; want the fit's 50 GB/s over 2 GPUs = 25 GB/s, 20µs, 6 GB/s",
			n.PCIe.Bandwidth, n.PCIe.Latency, n.NVMe.Bandwidth)
	}
	n = resolve(tiers + "node_override:\n  pcie_gbps: 10\n").Offload.Node
	if n.PCIe.Bandwidth != 10e9 || n.PCIe.Latency != 20*time.Microsecond {
		t.Errorf("node_override under a fit: PCIe %g B/s %v, want the file's 10 GB/s and the fit's 20µs", n.PCIe.Bandwidth, n.PCIe.Latency)
	}
}
