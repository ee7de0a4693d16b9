package model

import (
	"testing"
	"time"
)

// 1 GB over a 10 GB/s link with 10 µs latency: 10 µs + 100 ms.
func TestLinkTransferTime(t *testing.T) {
	l := Link{Name: "x", Bandwidth: 10e9, Latency: 10 * time.Microsecond}
	if got := l.TransferTime(1e9); got != 100_010*time.Microsecond {
		t.Errorf("TransferTime = %v, want 100.01ms", got)
	}
	if l.TransferTime(0) != 10*time.Microsecond {
		t.Error("empty transfer must cost the latency")
	}
	for _, bad := range []Link{{Bandwidth: 0}, {Bandwidth: 1, Latency: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v valid", bad)
		}
	}
}

// A 41,943,040-byte Llama-3.1-8B chunk of 320 tokens (131,072 B each)
// from NVMe: through host memory, latencies 80 + 1 + 2 µs and the 7 GB/s
// drive as bottleneck: 83 µs + 5,991,863 ns. With GPUDirect Storage the
// host-memory hop (and its latency) is skipped.
func TestNodePaths(t *testing.T) {
	n := DefaultNode(h100(t))
	if n.PCIe.Bandwidth != 64e9 {
		t.Errorf("H100 PCIe %g, want 64e9 per direction", n.PCIe.Bandwidth)
	}
	p, err := n.Path(TierNVMe)
	if err != nil || len(p) != 3 {
		t.Fatalf("nvme path %v, %v", p, err)
	}
	const bytes = 320 * 131_072
	if got := PathTime(p, bytes); got != (83_000+5_991_863)*time.Nanosecond {
		t.Errorf("NVMe → GPU = %d ns", got)
	}
	n.GPUDirectStorage = true
	p, _ = n.Path(TierNVMe)
	if got := PathTime(p, bytes); got != (82_000+5_991_863)*time.Nanosecond {
		t.Errorf("GDS NVMe → GPU = %d ns", got)
	}
	p, _ = n.Path(TierHost)
	// Host: PCIe (64 GB/s) is slower than DRAM (100 GB/s): 655,360 ns + 3 µs.
	if got := PathTime(p, bytes); got != (655_360+3_000)*time.Nanosecond {
		t.Errorf("host → GPU = %d ns", got)
	}
	if _, err := n.Path("tape"); err == nil {
		t.Error("unknown tier accepted")
	}
}
