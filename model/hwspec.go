package model

import (
	"fmt"
	"strings"
)

// A HardwareSpec changes a preset's figures, in datasheet units. A zero
// field keeps the preset's value. It is the `hardware_override:` map of a
// cluster file; with `hardware: custom` it describes a GPU from scratch
// and then peak_bf16_tflops, mem_mib and mem_bandwidth_tbps are required.
type HardwareSpec struct {
	PeakBF16TFLOPS   float64 `yaml:"peak_bf16_tflops,omitempty" json:"peak_bf16_tflops,omitempty"`     // dense, 10¹² FLOP/s
	PeakFP8TFLOPS    float64 `yaml:"peak_fp8_tflops,omitempty" json:"peak_fp8_tflops,omitempty"`       // dense, 10¹² FLOP/s
	MemMiB           float64 `yaml:"mem_mib,omitempty" json:"mem_mib,omitempty"`                       // driver-reported total, MiB
	MemBandwidthTBps float64 `yaml:"mem_bandwidth_tbps,omitempty" json:"mem_bandwidth_tbps,omitempty"` // 10¹² B/s
	LinkGBps         float64 `yaml:"link_gbps,omitempty" json:"link_gbps,omitempty"`                   // GPU-GPU per direction, 10⁹ B/s
	PCIeGBps         float64 `yaml:"pcie_gbps,omitempty" json:"pcie_gbps,omitempty"`                   // GPU-host per direction, 10⁹ B/s
	// CUDAMemMiB and ProcessMiB are Hardware.CUDAMemBytes and
	// Hardware.ProcessBytes in MiB: CUDA's total and what a serving
	// process holds before loading weights (SGLang's KV pool).
	CUDAMemMiB float64 `yaml:"cuda_mem_mib,omitempty" json:"cuda_mem_mib,omitempty"`
	ProcessMiB float64 `yaml:"process_mib,omitempty" json:"process_mib,omitempty"`
}

// CustomHardwareName is the hardware name that starts from no preset.
const CustomHardwareName = "custom"

// A HardwareSpecError names the hardware_override key that is wrong, so a
// cluster file can point at its line; Key is empty when the map as a whole
// is incomplete (hardware: custom without the required figures).
type HardwareSpecError struct {
	Key string
	Msg string
}

func (e *HardwareSpecError) Error() string {
	if e.Key == "" {
		return "hardware custom: hardware_override " + e.Msg
	}
	return "hardware_override: " + e.Key + ": " + e.Msg
}

// With returns h with the non-zero fields of s applied. Negative or
// non-finite values are a *HardwareSpecError.
func (h Hardware) With(s HardwareSpec) (Hardware, error) {
	for _, f := range []struct {
		name string
		v    float64
		dst  *float64
		unit float64
	}{
		{"peak_bf16_tflops", s.PeakBF16TFLOPS, &h.PeakFLOPS, 1e12},
		{"peak_fp8_tflops", s.PeakFP8TFLOPS, &h.PeakFP8FLOPS, 1e12},
		{"mem_bandwidth_tbps", s.MemBandwidthTBps, &h.MemBandwidth, 1e12},
		{"link_gbps", s.LinkGBps, &h.LinkBandwidth, 1e9},
		{"pcie_gbps", s.PCIeGBps, &h.PCIeBandwidth, 1e9},
	} {
		if !(f.v >= 0) {
			return h, &HardwareSpecError{f.name, fmt.Sprintf("%v is not a non-negative number", f.v)}
		}
		if f.v > 1e9 {
			return h, &HardwareSpecError{f.name, fmt.Sprintf("%v is over the limit of %g", f.v, 1e9)}
		}
		if f.v > 0 {
			*f.dst = f.v * f.unit
		}
	}
	for _, f := range []struct {
		name string
		v    float64
		dst  *int64
	}{
		{"mem_mib", s.MemMiB, &h.MemBytes},
		{"cuda_mem_mib", s.CUDAMemMiB, &h.CUDAMemBytes},
		{"process_mib", s.ProcessMiB, &h.ProcessBytes},
	} {
		if !(f.v >= 0) {
			return h, &HardwareSpecError{f.name, fmt.Sprintf("%v is not a non-negative number", f.v)}
		}
		if f.v > 1<<30 {
			return h, &HardwareSpecError{f.name, fmt.Sprintf("%v is over the limit of %d", f.v, 1<<30)}
		}
		if f.v > 0 {
			*f.dst = int64(f.v * mib)
		}
	}
	if s.MemMiB > 0 && s.CUDAMemMiB == 0 {
		h.CUDAMemBytes = 0 // the preset's CUDA total was of its own board
	}
	visible := h.MemBytes
	if h.CUDAMemBytes > 0 {
		visible = h.CUDAMemBytes
	}
	if h.CUDAMemBytes > h.MemBytes {
		return h, &HardwareSpecError{"cuda_mem_mib", fmt.Sprintf("%v is more than the device's %d MiB", s.CUDAMemMiB, h.MemBytes/mib)}
	}
	if h.ProcessBytes >= visible {
		return h, &HardwareSpecError{"process_mib", fmt.Sprintf("%d MiB leaves nothing of the %d MiB CUDA has", h.ProcessBytes/mib, visible/mib)}
	}
	return h, nil
}

// ResolveHardware returns the preset name with override applied, or, for
// name "custom", the GPU override describes. override may be nil.
func ResolveHardware(name string, override *HardwareSpec) (Hardware, error) {
	var h Hardware
	if strings.EqualFold(strings.TrimSpace(name), CustomHardwareName) {
		if override == nil || override.PeakBF16TFLOPS <= 0 || override.MemMiB <= 0 || override.MemBandwidthTBps <= 0 {
			return h, &HardwareSpecError{"", "must give peak_bf16_tflops, mem_mib and mem_bandwidth_tbps"}
		}
		h.Name = CustomHardwareName
	} else {
		var err error
		if h, err = HardwareByName(name); err != nil {
			return h, err
		}
	}
	if override == nil {
		return h, nil
	}
	return h.With(*override)
}
