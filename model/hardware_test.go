package model

import (
	"strings"
	"testing"
)

func TestHardwareByName(t *testing.T) {
	h, err := HardwareByName("H100")
	if err != nil {
		t.Fatal(err)
	}
	// NVIDIA H100 SXM datasheet: 1,979 TFLOPS BF16 with sparsity, 3.35 TB/s.
	if h.PeakFLOPS != 989.5e12 || h.MemBandwidth != 3.35e12 || h.MemBytes != 85_520_809_984 {
		t.Errorf("h100 = %+v", h)
	}
	h, err = HardwareByName("h200")
	if err != nil || h.MemBandwidth != 4.8e12 || h.PeakFLOPS != 989.5e12 {
		t.Errorf("h200 = %+v, %v", h, err)
	}
	if a, err := HardwareByName("a100"); err != nil || a.Name != "a100-80gb" {
		t.Errorf("alias a100 = %+v, %v", a, err)
	}
	_, err = HardwareByName("tpu-v5")
	if err == nil || !strings.Contains(err.Error(), "h100, h200, a100-80gb, a800-80gb, l40s, b200") {
		t.Errorf("unknown name error = %v, want the list of valid names", err)
	}
}

func TestHardwarePresetsSane(t *testing.T) {
	for _, h := range hardwarePresets {
		// Every preset is roofline-shaped: a ridge point (FLOPs per byte
		// where compute and memory take equal time) between 100 and 600,
		// as for every data-centre GPU since Volta.
		ridge := h.PeakFLOPS / h.MemBandwidth
		if ridge < 100 || ridge > 600 || h.LinkBandwidth <= 0 || h.MemBytes < 40<<30 {
			t.Errorf("%s: ridge %.0f FLOP/B, link %g, mem %d", h.Name, ridge, h.LinkBandwidth, h.MemBytes)
		}
	}
}
