package model

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestNodePresets(t *testing.T) {
	n, err := NodeByName("HGX-H100")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	if n.GPUs != 8 || n.HostMemBytes != 2<<40 || n.PCIe.Bandwidth != 64e9 || n.NVMe.Bandwidth != 55.2e9 || n.Network.Bandwidth != 40e9 {
		t.Errorf("hgx-h100 = %+v", n)
	}
	if _, err := NodeByName("dgx-a1"); err == nil {
		t.Error("unknown node accepted")
	}
	if got := NodeFor(h100(t)); got.Name != "hgx-h100" {
		t.Errorf("NodeFor(h100) = %q", got.Name)
	}
	hw, _ := HardwareByName("l40s")
	if got := NodeFor(hw); got.Name != "default" || got.PCIe.Bandwidth != 32e9 || got.HostMemBytes != 0 {
		t.Errorf("NodeFor(l40s) = %+v", got)
	}
}

// An NVMe array bounded by IOPS: 1,000 IOPS of 4 KiB reads is 4.096 MB/s
// whatever the drive's bandwidth; large I/Os get the bandwidth.
func TestLinkEffectiveBandwidth(t *testing.T) {
	l := Link{Name: "nvme", Bandwidth: 7e9, IOPS: 1000}
	if got := l.EffectiveBandwidth(4096); got != 4.096e6 {
		t.Errorf("4 KiB I/Os: %g B/s", got)
	}
	if got := l.EffectiveBandwidth(1 << 30); got != 7e9 {
		t.Errorf("1 GiB I/Os: %g B/s", got)
	}
	if (Link{Bandwidth: 1, IOPS: -1}).Validate() == nil {
		t.Error("negative IOPS accepted")
	}
}

func f64(v float64) *float64 { return &v }

func TestNodeWith(t *testing.T) {
	n, _ := NodeByName("hgx-h200")
	gpus := 4
	m, err := n.With(NodeSpec{GPUs: &gpus, HostMemGiB: f64(512), PCIeGBps: f64(50), PCIeLatencyUs: f64(0), Network: "tcp", NVMeIOPS: f64(1e6)})
	if err != nil {
		t.Fatal(err)
	}
	if m.GPUs != 4 || m.HostMemBytes != 512<<30 || m.PCIe.Bandwidth != 50e9 || m.PCIe.Latency != 0 || m.Network.Bandwidth != 25e9 || m.NVMe.IOPS != 1e6 {
		t.Errorf("override gave %+v", m)
	}
	m, _ = n.With(NodeSpec{NICGbps: f64(200)})
	if m.Network.Bandwidth != 20e9 || m.Network.Latency != 400*time.Microsecond {
		t.Errorf("rdma 200 Gb/s: %+v", m.Network)
	}
	for key, s := range map[string]NodeSpec{
		"pcie_gbps":       {PCIeGBps: f64(0)},
		"nvme_gbps":       {NVMeGBps: f64(-1)},
		"network":         {Network: "carrier-pigeon"},
		"nic_gbps":        {NICGbps: f64(0)},
		"nvme_latency_us": {NVMeLatencyUs: f64(-3)},
	} {
		_, err := n.With(s)
		var e *NodeSpecError
		if !errors.As(err, &e) || e.Key != key {
			t.Errorf("%s: error %v", key, err)
		}
	}
}

// TestNodeWithLimits: a value past its key's limit is an error with the
// limit, not an overflow (nvme_gib: 1e12 once made a negative size).
func TestNodeWithLimits(t *testing.T) {
	n, _ := NodeByName("hgx-h200")
	for _, c := range []struct {
		s    NodeSpec
		want string
	}{
		{NodeSpec{NVMeGiB: f64(1e12)}, "node_override: nvme_gib: 1e+12 is over the limit of 1.6777216e+07"},
		{NodeSpec{HostMemGiB: f64(1e300)}, "node_override: host_mem_gib: 1e+300 is over the limit of 1.6777216e+07"},
		{NodeSpec{NVMeLatencyUs: f64(1e300)}, "node_override: nvme_latency_us: 1e+300 is over the limit of 3.6e+09"},
		{NodeSpec{NVMeLatencyUs: f64(math.NaN())}, "node_override: nvme_latency_us: NaN is not a non-negative number"},
		{NodeSpec{PCIeGBps: f64(math.Inf(1))}, "node_override: pcie_gbps: +Inf is over the limit of 1e+06"},
		{NodeSpec{NICGbps: f64(1e300)}, "node_override: nic_gbps: 1e+300 is over the limit of 1e+07"},
	} {
		if _, err := n.With(c.s); err == nil || err.Error() != c.want {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if m, err := n.With(NodeSpec{NVMeGiB: f64(1 << 24)}); err != nil || m.NVMeBytes != 1<<54 {
		t.Errorf("nvme_gib at the limit: %d, %v", m.NVMeBytes, err)
	}
	if _, err := (Hardware{}).With(HardwareSpec{PeakBF16TFLOPS: 1e10}); err == nil || err.Error() != "hardware_override: peak_bf16_tflops: 1e+10 is over the limit of 1e+09" {
		t.Errorf("peak_bf16_tflops: %v", err)
	}
}
