package model

import (
	"fmt"
	"strings"
)

// A Hardware is one GPU as the roofline sees it: peak dense 16-bit tensor
// throughput, HBM bandwidth and capacity, and the bandwidth of the link that
// carries tensor-parallel collectives. All figures are per GPU.
type Hardware struct {
	Name string
	// PeakFLOPS is the dense (no 2:4 sparsity) BF16 tensor-core peak in
	// FLOP/s. Datasheets print the sparse figure first; it is twice this.
	PeakFLOPS float64
	// MemBandwidth is the HBM (or GDDR) bandwidth in bytes/s.
	MemBandwidth float64
	// MemBytes is the device memory the driver reports (nvidia-smi's
	// "Total", torch.cuda.mem_get_info's total): what vLLM multiplies by
	// gpu_memory_utilization. It is less than the datasheet's decimal GB
	// for HBM parts (H100: 81,559 MiB, not 80 GiB or 80 GB).
	MemBytes int64
	// LinkBandwidth is the per-direction GPU-to-GPU bandwidth in bytes/s
	// used by all-reduce: NVLink where the part has it, else PCIe.
	LinkBandwidth float64
	// PeakFP8FLOPS is the dense FP8 tensor-core peak in FLOP/s, or 0 for
	// parts without FP8 tensor cores (A100, A800).
	PeakFP8FLOPS float64
	// PCIeBandwidth is the host link of one GPU, per direction, in
	// bytes/s: what KV offload to and from CPU memory moves over.
	PCIeBandwidth float64
}

const mib = 1 << 20

// Note: datasheet sources, as printed by NVIDIA (dense = sparse/2):
//
//   - H100 SXM5 80GB (NVIDIA H100 Tensor Core GPU datasheet): BF16 Tensor
//     Core 1,979 TFLOPS with sparsity → 989.5 dense; FP8 3,958 → 1,979
//     dense; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s (bidirectional, so
//     450 GB/s each way); PCIe Gen5 x16 128 GB/s (64 each way).
//     Driver total 81,559 MiB.
//   - H200 SXM 141GB (NVIDIA H200 datasheet): BF16 1,979 TFLOPS sparse →
//     989.5 dense, FP8 3,958 → 1,979 (same GH100 die); 141 GB HBM3e at
//     4.8 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s. Driver total
//     143,771 MiB.
//   - A100 SXM4 80GB (NVIDIA A100 datasheet): BF16 312 TFLOPS dense (624
//     sparse), no FP8; 80 GB HBM2e at 2,039 GB/s; NVLink 600 GB/s (300
//     each way); PCIe Gen4 64 GB/s (32 each way). Driver total 81,920 MiB.
//   - A800 SXM4 80GB (NVIDIA A800 datasheet, the export variant of the
//     A100): as the A100 but NVLink 400 GB/s (200 each way).
//   - L40S (NVIDIA L40S datasheet): BF16 362.05 TFLOPS dense (733 sparse),
//     FP8 733 dense (1,466 sparse); 48 GB GDDR6 at 864 GB/s; no NVLink,
//     PCIe Gen4 x16 64 GB/s bidirectional (32 each way). Driver total
//     46,068 MiB.
//   - B200 (NVIDIA HGX B200 datasheet, 1,000 W): FP16/BF16 4.5 PFLOPS
//     sparse per GPU → 2.25 dense, FP8 9 → 4.5 dense; HBM3e at 8 TB/s;
//     NVLink 5 1.8 TB/s (900 GB/s each way); PCIe Gen5 x16 to the host
//     (64 GB/s each way). Driver total 183,359 MiB.
//
// Driver totals are the nvidia-smi "Total" values seen in public logs of
// each part; the A800's is the A100's (same board).
var hardwarePresets = []Hardware{
	{Name: "h100", PeakFLOPS: 989.5e12, PeakFP8FLOPS: 1979e12, MemBandwidth: 3.35e12, MemBytes: 81559 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9},
	{Name: "h200", PeakFLOPS: 989.5e12, PeakFP8FLOPS: 1979e12, MemBandwidth: 4.8e12, MemBytes: 143771 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9},
	{Name: "a100-80gb", PeakFLOPS: 312e12, MemBandwidth: 2.039e12, MemBytes: 81920 * mib, LinkBandwidth: 300e9, PCIeBandwidth: 32e9},
	{Name: "a800-80gb", PeakFLOPS: 312e12, MemBandwidth: 2.039e12, MemBytes: 81920 * mib, LinkBandwidth: 200e9, PCIeBandwidth: 32e9},
	{Name: "l40s", PeakFLOPS: 362.05e12, PeakFP8FLOPS: 733e12, MemBandwidth: 864e9, MemBytes: 46068 * mib, LinkBandwidth: 32e9, PCIeBandwidth: 32e9},
	{Name: "b200", PeakFLOPS: 2250e12, PeakFP8FLOPS: 4500e12, MemBandwidth: 8e12, MemBytes: 183359 * mib, LinkBandwidth: 900e9, PCIeBandwidth: 64e9},
}

// hardwareAliases maps other common spellings to preset names.
var hardwareAliases = map[string]string{
	"h100-sxm":      "h100",
	"h100-80gb":     "h100",
	"h100-sxm5":     "h100",
	"h200-sxm":      "h200",
	"a100":          "a100-80gb",
	"a100-sxm-80gb": "a100-80gb",
	"a800":          "a800-80gb",
}

// HardwareNames returns the preset names in a fixed order.
func HardwareNames() []string {
	names := make([]string, len(hardwarePresets))
	for i, h := range hardwarePresets {
		names[i] = h.Name
	}
	return names
}

// HardwareByName returns the preset called name (case-insensitive; "a100"
// and "h100-sxm" style aliases are accepted). The error lists valid names.
func HardwareByName(name string) (Hardware, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	if a, ok := hardwareAliases[key]; ok {
		key = a
	}
	for _, h := range hardwarePresets {
		if h.Name == key {
			return h, nil
		}
	}
	return Hardware{}, fmt.Errorf("unknown hardware %q (valid: %s)", name, strings.Join(HardwareNames(), ", "))
}
