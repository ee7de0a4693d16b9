package model

import (
	"errors"
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
