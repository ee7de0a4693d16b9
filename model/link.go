package model

import (
	"fmt"
	"math"
	"time"
)

// A Link is the static price of one data path a KV transfer crosses: a
// fixed latency per transfer and a bandwidth. Alone on the link, a
// transfer of n bytes takes Latency + n/Bandwidth. How concurrent
// transfers share the bandwidth is replay/kvcache's job (Fabric).
type Link struct {
	Name      string
	Bandwidth float64       // bytes/s
	Latency   time.Duration // per transfer, before the first byte
	// IOPS bounds the I/O operations per second (an NVMe drive's random
	// read IOPS); 0: no bound. A transfer moved in I/Os of s bytes then
	// gets at most IOPS·s bytes/s (EffectiveBandwidth).
	IOPS float64
}

// Validate reports a link that cannot carry data.
func (l Link) Validate() error {
	if !(l.Bandwidth > 0) || math.IsInf(l.Bandwidth, 0) || l.Latency < 0 || !(l.IOPS >= 0) || math.IsInf(l.IOPS, 0) {
		return fmt.Errorf("link %q: bandwidth %g B/s, latency %v and %g IOPS: want a positive bandwidth, a non-negative latency and IOPS", l.Name, l.Bandwidth, l.Latency, l.IOPS)
	}
	return nil
}

// EffectiveBandwidth is the bandwidth of the link for transfers made of
// I/Os of ioBytes each: the bandwidth, or IOPS·ioBytes when that is less.
func (l Link) EffectiveBandwidth(ioBytes int64) float64 {
	if l.IOPS > 0 && ioBytes > 0 {
		return min(l.Bandwidth, l.IOPS*float64(ioBytes))
	}
	return l.Bandwidth
}

// TransferTime is the time of a transfer of n bytes alone on the link.
func (l Link) TransferTime(n int64) time.Duration {
	return l.Latency + time.Duration(math.Round(float64(n)/l.Bandwidth*1e9))
}

// Tiers a KV block can be loaded from or stored to, below GPU memory.
const (
	TierHost   = "host"   // CPU DRAM of the node
	TierNVMe   = "nvme"   // local NVMe of the node
	TierRemote = "remote" // remote or distributed storage over the network
)

// A Node holds the KV paths of one server. PCIe is per GPU and per
// direction; HostDRAM, NVMe and Network are shared by all workers of the
// node. Data from NVMe or the network lands in host memory and crosses
// PCIe to the GPU, unless GPUDirectStorage is set, in which case it goes
// straight over PCIe into GPU memory.
type Node struct {
	Name         string
	GPUs         int   // GPUs in the node: the workers that share its links
	HostMemBytes int64 // system memory: the bound of the host tiers of its workers
	NVMeBytes    int64 // local NVMe capacity: the bound of its NVMe tiers

	PCIe             Link
	HostDRAM         Link
	NVMe             Link
	Network          Link
	GPUDirectStorage bool
}

// Note: default node figures. PCIe comes from the GPU preset (H100: Gen5
// x16, 64 GB/s each way); the others are typical of a 2025 8-GPU server
// and are meant to be calibrated or overridden:
//   - host DRAM 100 GB/s usable for KV copies (8-channel DDR5 peaks near
//     300 GB/s; pinned-memory copies reach about a third), 1 µs latency;
//   - NVMe: one PCIe Gen4 x4 drive, 7 GB/s sequential read (Samsung 990
//     Pro, Micron 7450 datasheets), 80 µs per request;
//   - network to remote storage: a 200 Gb/s NIC, 25 GB/s, 100 µs.

// DefaultNode returns the default paths of a node of hw GPUs.
func DefaultNode(hw Hardware) Node {
	pcie := hw.PCIeBandwidth
	if pcie <= 0 {
		pcie = 32e9
	}
	return Node{
		PCIe:     Link{Name: "pcie", Bandwidth: pcie, Latency: 2 * time.Microsecond},
		HostDRAM: Link{Name: "host-dram", Bandwidth: 100e9, Latency: time.Microsecond},
		NVMe:     Link{Name: "nvme", Bandwidth: 7e9, Latency: 80 * time.Microsecond},
		Network:  Link{Name: "network", Bandwidth: 25e9, Latency: 100 * time.Microsecond},
	}
}

// Path returns the links, from the tier to the GPU, that a transfer
// between GPU memory and tier crosses.
func (n Node) Path(tier string) ([]Link, error) {
	switch tier {
	case TierHost:
		return []Link{n.HostDRAM, n.PCIe}, nil
	case TierNVMe:
		if n.GPUDirectStorage {
			return []Link{n.NVMe, n.PCIe}, nil
		}
		return []Link{n.NVMe, n.HostDRAM, n.PCIe}, nil
	case TierRemote:
		if n.GPUDirectStorage {
			return []Link{n.Network, n.PCIe}, nil
		}
		return []Link{n.Network, n.HostDRAM, n.PCIe}, nil
	}
	return nil, fmt.Errorf("unknown tier %q (want %s, %s or %s)", tier, TierHost, TierNVMe, TierRemote)
}

// PathTime is the time of an n-byte transfer alone on a path whose links
// forward data as it arrives (DMA in chunks): every link's latency, plus
// the bytes over the slowest link.
func PathTime(path []Link, n int64) time.Duration {
	if len(path) == 0 {
		return 0
	}
	var lat time.Duration
	bw := math.Inf(1)
	for _, l := range path {
		lat += l.Latency
		bw = min(bw, l.Bandwidth)
	}
	return lat + time.Duration(math.Round(float64(n)/bw*1e9))
}
