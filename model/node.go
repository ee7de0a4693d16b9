package model

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Network profiles: how the node reaches a remote KV store over its NIC.
const (
	NetworkRDMA = "rdma" // one-sided reads over RoCE or InfiniBand (Mooncake store, 3FS, NIXL)
	NetworkTCP  = "tcp"  // a store reached through the kernel's TCP stack (Redis, LMCache server)
)

// Note: node presets. An HGX/DGX H100 or H200 server, from the NVIDIA DGX
// H100/H200 datasheet (the HGX boards OEMs build on are the same node):
//   - 8 GPUs, each on its own PCIe Gen5 x16 link to the host: 64 GB/s
//     each way (the GPU preset's PCIeBandwidth), per direction, so a load
//     (H2D) and a store (D2H) of one GPU do not share bandwidth;
//   - 2 TB of system memory (DDR5-4800, 2 × Xeon Platinum 8480C with 8
//     channels each: 2 × 8 × 38.4 GB/s = 614.4 GB/s peak), the host
//     tier's capacity and the bandwidth every GPU's copies share;
//   - internal storage 8 × 3.84 TB NVMe U.2 in RAID 0, 30.72 TB; per
//     drive the KIOXIA CM6-R 3.84 TB datasheet (one of the drives DGX
//     ships) gives 6,900 MB/s sequential and 1,400 K random 4 KiB read
//     IOPS, so the array 55.2 GB/s and 11.2 M IOPS; latency per read 80 µs
//     (typical NAND read plus the block layer);
//   - storage network: ConnectX-7 at 400 Gb/s (50 GB/s). The RDMA profile
//     takes 80 % of the line rate and 0.4 ms per transfer: Mooncake's
//     1P1D measurements on ConnectX-7 RoCE reach 71–82 % of the line rate
//     on 32k-token transfers, and their smallest transfers (20 MB in
//     0.54 ms at 145 GB/s asymptotic) leave about 0.4 ms of fixed cost
//     (../shared/data/measurements/mooncake_docs, pd_1p1d_*.csv). The TCP
//     profile is an uncalibrated 25 GB/s and 100 µs (DefaultNode's
//     network), to be overridden or calibrated.
//
// All figures are peaks or datasheet values; calibration or the cluster
// file's node_override adjusts them.
var nodePresets = []struct {
	name string
	gpu  string // the GPU preset whose PCIe link the node has
	node Node
}{
	{"hgx-h100", "h100", hgxNode("hgx-h100", 64e9)},
	{"hgx-h200", "h200", hgxNode("hgx-h200", 64e9)},
}

const tb = 1e12

func hgxNode(name string, pcie float64) Node {
	return Node{
		Name:         name,
		GPUs:         8,
		HostMemBytes: 2 * 1 << 40, // 2 TB as installed: 32 × 64 GiB DIMMs
		NVMeBytes:    int64(8 * 3.84 * tb),
		PCIe:         Link{Name: "pcie", Bandwidth: pcie, Latency: 2 * time.Microsecond},
		HostDRAM:     Link{Name: "host-dram", Bandwidth: 614.4e9, Latency: time.Microsecond},
		NVMe:         Link{Name: "nvme", Bandwidth: 8 * 6.9e9, IOPS: 8 * 1.4e6, Latency: 80 * time.Microsecond},
		Network:      rdmaLink(400e9 / 8),
	}
}

func rdmaLink(lineRate float64) Link {
	return Link{Name: "network", Bandwidth: 0.8 * lineRate, Latency: 400 * time.Microsecond}
}

func tcpLink() Link {
	return Link{Name: "network", Bandwidth: 25e9, Latency: 100 * time.Microsecond}
}

// NodeNames returns the node preset names in a fixed order.
func NodeNames() []string {
	names := make([]string, len(nodePresets))
	for i, p := range nodePresets {
		names[i] = p.name
	}
	return names
}

// NodeByName returns the node preset called name (case-insensitive).
func NodeByName(name string) (Node, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for _, p := range nodePresets {
		if p.name == key {
			return p.node, nil
		}
	}
	return Node{}, fmt.Errorf("unknown node %q (valid: %s)", name, strings.Join(NodeNames(), ", "))
}

// NodeFor returns the preset node of GPU hw (hgx-h100 for an h100), or,
// for a GPU without one, DefaultNode(hw) with 8 GPUs and no capacities.
func NodeFor(hw Hardware) Node {
	for _, p := range nodePresets {
		if p.gpu == hw.Name {
			n := p.node
			if hw.PCIeBandwidth > 0 {
				n.PCIe.Bandwidth = hw.PCIeBandwidth
			}
			return n
		}
	}
	n := DefaultNode(hw)
	n.Name, n.GPUs = "default", 8
	return n
}

// A NodeSpec changes a node's figures, in datasheet units: it is the
// `node_override:` map of a cluster file. An absent (nil) field keeps the
// node's value and a present one must be positive (latencies may be 0):
// a link of zero bandwidth is an error, not "keep the preset". Network
// picks a profile (rdma, tcp) before the other network figures apply.
type NodeSpec struct {
	GPUs             *int     `yaml:"gpus,omitempty" json:"gpus,omitempty"`
	HostMemGiB       *float64 `yaml:"host_mem_gib,omitempty" json:"host_mem_gib,omitempty"`
	HostMemGBps      *float64 `yaml:"host_mem_gbps,omitempty" json:"host_mem_gbps,omitempty"`
	PCIeGBps         *float64 `yaml:"pcie_gbps,omitempty" json:"pcie_gbps,omitempty"` // per GPU and direction
	PCIeLatencyUs    *float64 `yaml:"pcie_latency_us,omitempty" json:"pcie_latency_us,omitempty"`
	NVMeGiB          *float64 `yaml:"nvme_gib,omitempty" json:"nvme_gib,omitempty"`
	NVMeGBps         *float64 `yaml:"nvme_gbps,omitempty" json:"nvme_gbps,omitempty"`
	NVMeIOPS         *float64 `yaml:"nvme_iops,omitempty" json:"nvme_iops,omitempty"`
	NVMeLatencyUs    *float64 `yaml:"nvme_latency_us,omitempty" json:"nvme_latency_us,omitempty"`
	Network          string   `yaml:"network,omitempty" json:"network,omitempty"`   // rdma or tcp
	NICGbps          *float64 `yaml:"nic_gbps,omitempty" json:"nic_gbps,omitempty"` // line rate, 10⁹ bit/s
	NetworkGBps      *float64 `yaml:"network_gbps,omitempty" json:"network_gbps,omitempty"`
	NetworkLatencyUs *float64 `yaml:"network_latency_us,omitempty" json:"network_latency_us,omitempty"`
	GPUDirectStorage bool     `yaml:"gpudirect_storage,omitempty" json:"gpudirect_storage,omitempty"`
}

// A NodeSpecError names the node_override key that is wrong.
type NodeSpecError struct {
	Key string
	Msg string
}

func (e *NodeSpecError) Error() string { return "node_override: " + e.Key + ": " + e.Msg }

// With returns n with the non-zero fields of s applied. A negative or
// non-finite value, or an unknown network profile, is a *NodeSpecError.
func (n Node) With(s NodeSpec) (Node, error) {
	switch strings.ToLower(s.Network) {
	case "":
	case NetworkRDMA:
		n.Network = rdmaLink(400e9 / 8)
	case NetworkTCP:
		n.Network = tcpLink()
	default:
		return n, &NodeSpecError{"network", fmt.Sprintf("%q is not a profile (want %s or %s)", s.Network, NetworkRDMA, NetworkTCP)}
	}
	if s.NICGbps != nil {
		v := *s.NICGbps
		if !(v > 0) {
			return n, &NodeSpecError{"nic_gbps", fmt.Sprintf("%v is not a positive number", v)}
		}
		if v > 1e7 {
			return n, &NodeSpecError{"nic_gbps", fmt.Sprintf("%v is over the limit of %g", v, 1e7)}
		}
		if strings.EqualFold(s.Network, NetworkTCP) {
			n.Network.Bandwidth = min(n.Network.Bandwidth, v*1e9/8)
		} else {
			n.Network = rdmaLink(v * 1e9 / 8)
		}
	}
	if s.GPUs != nil {
		if *s.GPUs <= 0 {
			return n, &NodeSpecError{"gpus", fmt.Sprintf("%d: want a positive number", *s.GPUs)}
		}
		n.GPUs = *s.GPUs
	}
	// Note: each key's limit is far over any machine's and keeps the value
	// in its unit representable: nvme_gib: 1e12 (the former common limit)
	// made 1.07e21 bytes, an int64 overflow into a negative size.
	for _, f := range []struct {
		key  string
		v    *float64
		set  func(float64)
		unit float64
		zero bool    // 0 allowed (a latency)
		max  float64 // in the key's unit
	}{
		{"host_mem_gib", s.HostMemGiB, func(v float64) { n.HostMemBytes = int64(v) }, 1 << 30, false, 1 << 24},
		{"host_mem_gbps", s.HostMemGBps, func(v float64) { n.HostDRAM.Bandwidth = v }, 1e9, false, 1e6},
		{"pcie_gbps", s.PCIeGBps, func(v float64) { n.PCIe.Bandwidth = v }, 1e9, false, 1e6},
		{"pcie_latency_us", s.PCIeLatencyUs, func(v float64) { n.PCIe.Latency = time.Duration(math.Round(v)) }, 1e3, true, 3.6e9},
		{"nvme_gib", s.NVMeGiB, func(v float64) { n.NVMeBytes = int64(v) }, 1 << 30, false, 1 << 24},
		{"nvme_gbps", s.NVMeGBps, func(v float64) { n.NVMe.Bandwidth = v }, 1e9, false, 1e6},
		{"nvme_iops", s.NVMeIOPS, func(v float64) { n.NVMe.IOPS = v }, 1, false, 1e12},
		{"nvme_latency_us", s.NVMeLatencyUs, func(v float64) { n.NVMe.Latency = time.Duration(math.Round(v)) }, 1e3, true, 3.6e9},
		{"network_gbps", s.NetworkGBps, func(v float64) { n.Network.Bandwidth = v }, 1e9, false, 1e6},
		{"network_latency_us", s.NetworkLatencyUs, func(v float64) { n.Network.Latency = time.Duration(math.Round(v)) }, 1e3, true, 3.6e9},
	} {
		if f.v == nil {
			continue
		}
		v := *f.v
		switch {
		case f.zero && !(v >= 0):
			return n, &NodeSpecError{f.key, fmt.Sprintf("%v is not a non-negative number", v)}
		case !f.zero && !(v > 0):
			return n, &NodeSpecError{f.key, fmt.Sprintf("%v: want a positive number", v)}
		case v > f.max:
			return n, &NodeSpecError{f.key, fmt.Sprintf("%v is over the limit of %g", v, f.max)}
		}
		f.set(v * f.unit)
	}
	if s.GPUDirectStorage {
		n.GPUDirectStorage = true
	}
	return n, nil
}

// Validate reports a node whose links cannot carry data or whose counts
// are negative, naming the link.
func (n Node) Validate() error {
	if n.GPUs < 0 || n.HostMemBytes < 0 || n.NVMeBytes < 0 {
		return fmt.Errorf("node %q: %d GPUs, %d B host memory, %d B NVMe: none may be negative", n.Name, n.GPUs, n.HostMemBytes, n.NVMeBytes)
	}
	for _, l := range []Link{n.PCIe, n.HostDRAM, n.NVMe, n.Network} {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("node %q: %w", n.Name, err)
		}
	}
	return nil
}
