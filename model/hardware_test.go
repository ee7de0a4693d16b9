package model

import (
	"errors"
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
	for name, want := range map[string]string{
		"NVIDIA GeForce RTX 4090": "rtx-4090", "A100-SXM4-40GB": "a100-40gb", "NVIDIA-A100-SXM4-80GB": "a100-80gb",
		"RTX PRO 6000": "rtx-pro-6000", "RTXPRO6000": "rtx-pro-6000", "H800": "h800", "h20": "h20", "NVIDIA H100 80GB HBM3": "h100",
		// LambdaLabsML/vllm-benchmark names its result folders so.
		"H100-80GB-SXM": "h100", "A100-80GB-SXM": "a100-80gb",
	} {
		if h, err := HardwareByName(name); err != nil || h.Name != want {
			t.Errorf("%q = %q, %v; want %s", name, h.Name, err, want)
		}
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
		// as for every data-centre GPU since Volta, but the H20s, whose
		// compute export rules cut (37 and 31 FLOP/B). The smallest parts
		// (A10, RTX 4090) have 24 GB.
		ridge := h.PeakFLOPS / h.MemBandwidth
		low := 100.0
		if strings.HasPrefix(h.Name, "h20") {
			low = 30
		}
		if ridge < low || ridge > 600 || h.LinkBandwidth <= 0 || h.MemBytes < 22<<30 {
			t.Errorf("%s: ridge %.0f FLOP/B, link %g, mem %d", h.Name, ridge, h.LinkBandwidth, h.MemBytes)
		}
	}
}

// hardware_override's cuda_mem_mib and process_mib set what SGLang's pool
// starts from; a new mem_mib drops the preset's CUDA total (it was of the
// preset's board); totals that do not fit are errors naming the key.
func TestHardwareSpecStartupMemory(t *testing.T) {
	a10, err := HardwareByName("a10")
	if err != nil {
		t.Fatal(err)
	}
	if a10.CUDAMemBytes != 2207<<30/100 || a10.ProcessBytes <= 0 || a10.ProcessBytes >= 1<<30 {
		t.Fatalf("a10 preset: %d CUDA, %d process", a10.CUDAMemBytes, a10.ProcessBytes)
	}
	h, err := a10.With(HardwareSpec{CUDAMemMiB: 22000, ProcessMiB: 500})
	if err != nil || h.CUDAMemBytes != 22000*mib || h.ProcessBytes != 500*mib {
		t.Errorf("override: %+v, %v", h, err)
	}
	if h, err := a10.With(HardwareSpec{MemMiB: 24000}); err != nil || h.CUDAMemBytes != 0 || h.ProcessBytes != a10.ProcessBytes {
		t.Errorf("mem_mib alone: %+v, %v", h, err)
	}
	for _, c := range []struct {
		s   HardwareSpec
		key string
	}{
		{HardwareSpec{CUDAMemMiB: 30000}, "cuda_mem_mib"},
		{HardwareSpec{ProcessMiB: 23000}, "process_mib"},
		{HardwareSpec{ProcessMiB: -1}, "process_mib"},
	} {
		var e *HardwareSpecError
		if _, err := a10.With(c.s); !errors.As(err, &e) || e.Key != c.key {
			t.Errorf("%+v: %v, want an error of %s", c.s, err, c.key)
		}
	}
}
