package model

import (
	"fmt"
	"time"
)

// Transports between the nodes of a worker that spans several.
const (
	TransportTCP           = "tcp"            // NCCL's socket transport: through host memory and the kernel's TCP stack
	TransportRDMA          = "rdma"           // InfiniBand or RoCE verbs, staged through host memory
	TransportGPUDirectRDMA = "gpudirect-rdma" // InfiniBand or RoCE straight between GPU memory and the NIC
)

// An InterNode is the network between the nodes of one worker whose GPUs
// span several nodes (TP or PP across nodes). The worker's TP·PP GPUs are
// laid out as vLLM lays them out: TP ranks are consecutive, filling a
// node before the next, and pipeline stages follow one another.
type InterNode struct {
	Nodes     int     // nodes per worker, at least 2
	Transport string  // TransportTCP, TransportRDMA or TransportGPUDirectRDMA
	Bandwidth float64 // bytes/s of one link, each way
	// LinkPerGPU says every GPU has a link of its own (rail-optimised
	// clusters: one NIC per GPU); otherwise the node's GPUs share one.
	LinkPerGPU bool
	// Latency is paid by every collective or stage send that crosses
	// nodes, besides the Deployment's CollectiveLatency.
	Latency time.Duration
}

// Note: how a worker spanning nodes is priced. With g = TP·PP/Nodes GPUs
// per node:
//   - TP ≤ g: each TP group sits in one node and its all-reduces stay on
//     NVLink; of the PP−1 stage sends, Nodes−1 cross a node boundary (a
//     stage is never split) and go over the inter-node link, the others
//     over NVLink.
//   - TP > g: a TP group spans TP/g nodes; its ring all-reduce crosses
//     every node boundary, and NCCL's rings enter and leave each node once
//     per ring, so the node's links carry each rank's 2(TP−1)/TP share of
//     the buffer once in total: the all-reduce runs at the slower of NVLink
//     and the node's aggregate inter-node bandwidth (g links with
//     LinkPerGPU, else one). Every stage send crosses nodes.
//   - A stage send is one rank's activations over one link.
//   - Transport: gpudirect-rdma moves data between GPU memory and the NIC
//     directly; rdma and tcp stage it through host memory, so each GPU's
//     share also crosses its PCIe link (Hardware.PCIeBandwidth) and a link
//     is bounded by the slower of the two.
//   - EP all-to-alls, when the worker spans nodes, are priced as the TP
//     all-reduces are (at the slower of NVLink and the inter-node link).
//
// The bandwidths are datasheet figures given by the cluster file;
// LinkEfficiency applies to them as to NVLink, and calibration fits it.

// Validate reports an inter-node network the deployment cannot use.
func (n *InterNode) validate(tp, pp int) error {
	switch n.Transport {
	case TransportTCP, TransportRDMA, TransportGPUDirectRDMA:
	default:
		return fmt.Errorf("inter-node transport %q: want %s, %s or %s", n.Transport, TransportTCP, TransportRDMA, TransportGPUDirectRDMA)
	}
	if !(n.Bandwidth > 0) || n.Latency < 0 {
		return fmt.Errorf("inter-node link: bandwidth %g B/s and latency %v: want a positive bandwidth and a non-negative latency", n.Bandwidth, n.Latency)
	}
	gpus := tp * pp
	if n.Nodes < 2 || gpus%n.Nodes != 0 {
		return fmt.Errorf("%d nodes per worker: the worker's %d GPUs (TP%d × PP%d) do not divide evenly over them", n.Nodes, gpus, tp, pp)
	}
	g := gpus / n.Nodes
	switch {
	case tp <= g && g%tp != 0:
		return fmt.Errorf("%d nodes per worker: %d GPUs per node do not hold whole TP%d groups", n.Nodes, g, tp)
	case tp > g && tp%g != 0:
		return fmt.Errorf("%d nodes per worker: a TP%d group does not span whole nodes of %d GPUs", n.Nodes, tp, g)
	}
	return nil
}

// gpusPerNode is the worker's GPUs in each of its nodes.
func (n *InterNode) gpusPerNode(tp, pp int) int { return tp * pp / n.Nodes }

// linkBandwidth is one inter-node link's usable bandwidth for one GPU's
// data: the link, bounded by the GPU's PCIe link when the transport
// stages through host memory.
func (n *InterNode) linkBandwidth(hw Hardware) float64 {
	bw := n.Bandwidth
	if n.Transport != TransportGPUDirectRDMA && hw.PCIeBandwidth > 0 {
		bw = min(bw, hw.PCIeBandwidth)
	}
	return bw
}

// ringBandwidth is the bandwidth of a ring all-reduce whose group spans
// nodes: the slower of NVLink and the node's aggregate inter-node links.
func (n *InterNode) ringBandwidth(hw Hardware, tp, pp int) float64 {
	agg := n.linkBandwidth(hw)
	if n.LinkPerGPU {
		agg *= float64(n.gpusPerNode(tp, pp))
	}
	return min(hw.LinkBandwidth, agg)
}
