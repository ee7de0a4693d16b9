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
	// "Total", which SGLang's default mem_fraction_static is chosen by:
	// srt/utils.py get_nvgpu_memory_capacity, v0.5.2).
	// It is less than the datasheet's decimal GB for HBM parts (H100:
	// 81,559 MiB, not 80 GiB or 80 GB), and more than CUDA's total
	// (CUDAMemBytes).
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
	// CUDAMemBytes is the device total CUDA itself reports
	// (cudaMemGetInfo, torch's "total capacity"), less than MemBytes by
	// what the driver keeps; 0 where no public log gives it. SGLang sizes
	// its KV pool from CUDA's free memory (SGLangMemory).
	CUDAMemBytes int64
	// ProcessBytes is what a serving process holds on each GPU before it
	// loads weights, outside PyTorch's allocator: the CUDA context, NCCL
	// communicators and custom all-reduce buffers; 0 where no public log
	// gives it.
	ProcessBytes int64
}

const mib = 1 << 20

// CUDATotal is the device total CUDA reports (CUDAMemBytes), or the
// driver's (MemBytes) where no public log gives CUDA's: what vLLM
// multiplies by gpu_memory_utilization.
func (h Hardware) CUDATotal() int64 {
	if h.CUDAMemBytes > 0 {
		return h.CUDAMemBytes
	}
	return h.MemBytes
}

// The A10's CUDA total and a serving process's memory before loading, from
// the log the Note below cites: 22.07 GiB; 22.05 GiB in use less 21.68
// GiB allocated and 24.24 MiB reserved by PyTorch. Printed to 0.01 GiB.
const (
	a10CUDAMemBytes = 2207 << 30 / 100
	a10ProcessBytes = (2205-2168)<<30/100 - 2424<<20/100
)

// The CUDA total of an 80 GB H100 SXM board and what an SGLang server at
// TP 8 holds on each of its GPUs before loading, from the logs the Note
// below cites: 79.18 GiB; 79.18 − 77.43 GiB. The H800 SXM5 is the same
// board with slower NVLink and takes both.
const (
	h100CUDAMemBytes    = 7918 << 30 / 100
	h100TP8ProcessBytes = (7918 - 7743) << 30 / 100
)

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
//   - A100 SXM4 40GB (NVIDIA A100 datasheet): as the 80 GB part but 40 GB
//     HBM2 at 1,555 GB/s. Driver total 40,960 MiB.
//   - H800 SXM5 80GB (NVIDIA H800 datasheet, the export variant of the
//     H100 SXM): the H100's compute and HBM3 (3.35 TB/s), NVLink 400 GB/s
//     (200 each way). Driver total 81,559 MiB (the H100 board; the
//     Mooncake H800 runs in ../shared/data say 81 GB), and the H100's CUDA
//     total, 79.18 GiB; no public log of an H800's was found. Its only
//     replay is at TP 8 (SGLang, the Mooncake documentation's HiCache
//     runs), so it takes the H100 TP 8 log's 1.75 GiB held before loading
//     as ProcessBytes. An SGLang log on H800s (DeepSeek-V4, TP 16 over two
//     nodes) shows "Load weight begin. avail mem=77.75 GB", as high as an
//     80 GB board allows.
//   - H20 (NVIDIA HGX H20 product brief): BF16 148 TFLOPS dense (296
//     sparse), FP8 296 dense; 96 GB HBM3 at 4.0 TB/s; NVLink 900 GB/s
//     (450 each way); PCIe Gen5 x16. Driver total 97,871 MiB. Its ridge
//     point (37 FLOP/B) is far below other data-centre parts': decode is
//     cheap, prefill dear.
//   - H20-3e: the H20 with 141 GB HBM3e at 4.8 TB/s (the H200's memory;
//     the Mooncake SGLang runs in ../shared/data say 143 GB); driver
//     total as the H200's, 143,771 MiB. Compute as the H20.
//   - A10 (NVIDIA A10 datasheet): BF16 125 TFLOPS dense (250 sparse), no
//     FP8; 24 GB GDDR6 at 600 GB/s; no NVLink, PCIe Gen4 x16 (32 GB/s each
//     way). Driver total 23,028 MiB. (AWS's A10G is a different clock and
//     has no NVIDIA datasheet: not a preset.) CUDA's total 22.07 GiB and
//     0.35 GiB held by a serving process before its weights load, both
//     from one log of Oracle's (oracle-samples/oci-data-science-ai-samples
//     ai-quick-actions/troubleshooting-tips.md, an A10 shape, vLLM with
//     more than one GPU): vLLM prints "total_gpu_memory (22.07GiB)" and
//     torch's out-of-memory error during load_model "GPU 1 has a total
//     capacity of 22.07 GiB ... this process has 22.05 GiB memory in use.
//     Of the allocated memory 21.68 GiB is allocated by PyTorch, and 24.24
//     MiB is reserved by PyTorch but unallocated": 22.05 − 21.68 − 0.02
//     GiB outside PyTorch (the context, NCCL and custom all-reduce, which
//     SGLang's start-up creates as vLLM's does). An SGLang v0.5.3 log on
//     one A10G (the same 24 GB board, TP1: no NCCL) agrees: "Load weight
//     begin. avail mem=21.82 GB", 0.25 GiB under 22.07.
//   - GeForce RTX 4090 (NVIDIA Ada Lovelace architecture whitepaper,
//     appendix table): BF16 tensor with FP32 accumulate 165.2 TFLOPS dense
//     (330.4 sparse), FP8 with FP32 accumulate 330.3 dense; 24 GB GDDR6X
//     at 1,008 GB/s; no NVLink, PCIe Gen4 x16 (32 GB/s each way). Memory
//     25,250,627,584 B, the device total torch reported (and vLLM
//     multiplied) in the LLMServingSim RTX 4090 run in ../shared/data
//     (nvidia-smi prints 24,564 MiB, which includes the driver's reserve).
//   - RTX PRO 6000 Blackwell (NVIDIA RTX PRO 6000 Blackwell datasheet and
//     RTX Blackwell whitepaper): BF16 tensor with FP32 accumulate 503.8
//     TFLOPS dense, FP8 1,007.6 dense (4,000 "AI TOPS" is FP4 sparse); 96
//     GB GDDR7 at 1,792 GB/s; no NVLink, PCIe Gen5 x16 (64 GB/s each way).
//     Driver total 97,887 MiB.
//
// Driver totals are the nvidia-smi "Total" values seen in public logs of
// each part; the A800's is the A100's (same board).
var hardwarePresets = []Hardware{
	{Name: "h100", PeakFLOPS: 989.5e12, PeakFP8FLOPS: 1979e12, MemBandwidth: 3.35e12, MemBytes: 81559 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9,
		CUDAMemBytes: h100CUDAMemBytes},
	{Name: "h200", PeakFLOPS: 989.5e12, PeakFP8FLOPS: 1979e12, MemBandwidth: 4.8e12, MemBytes: 143771 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9},
	{Name: "a100-80gb", PeakFLOPS: 312e12, MemBandwidth: 2.039e12, MemBytes: 81920 * mib, LinkBandwidth: 300e9, PCIeBandwidth: 32e9},
	{Name: "a800-80gb", PeakFLOPS: 312e12, MemBandwidth: 2.039e12, MemBytes: 81920 * mib, LinkBandwidth: 200e9, PCIeBandwidth: 32e9},
	{Name: "l40s", PeakFLOPS: 362.05e12, PeakFP8FLOPS: 733e12, MemBandwidth: 864e9, MemBytes: 46068 * mib, LinkBandwidth: 32e9, PCIeBandwidth: 32e9},
	{Name: "b200", PeakFLOPS: 2250e12, PeakFP8FLOPS: 4500e12, MemBandwidth: 8e12, MemBytes: 183359 * mib, LinkBandwidth: 900e9, PCIeBandwidth: 64e9},
	{Name: "a100-40gb", PeakFLOPS: 312e12, MemBandwidth: 1.555e12, MemBytes: 40960 * mib, LinkBandwidth: 300e9, PCIeBandwidth: 32e9},
	{Name: "h800", PeakFLOPS: 989.5e12, PeakFP8FLOPS: 1979e12, MemBandwidth: 3.35e12, MemBytes: 81559 * mib, LinkBandwidth: 200e9, PCIeBandwidth: 64e9,
		CUDAMemBytes: h100CUDAMemBytes, ProcessBytes: h100TP8ProcessBytes},
	{Name: "h20", PeakFLOPS: 148e12, PeakFP8FLOPS: 296e12, MemBandwidth: 4.0e12, MemBytes: 97871 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9},
	{Name: "h20-3e", PeakFLOPS: 148e12, PeakFP8FLOPS: 296e12, MemBandwidth: 4.8e12, MemBytes: 143771 * mib, LinkBandwidth: 450e9, PCIeBandwidth: 64e9},
	{Name: "a10", PeakFLOPS: 125e12, MemBandwidth: 600e9, MemBytes: 23028 * mib, LinkBandwidth: 32e9, PCIeBandwidth: 32e9,
		CUDAMemBytes: a10CUDAMemBytes, ProcessBytes: a10ProcessBytes},
	{Name: "rtx-4090", PeakFLOPS: 165.2e12, PeakFP8FLOPS: 330.3e12, MemBandwidth: 1.008e12, MemBytes: 25_250_627_584, LinkBandwidth: 32e9, PCIeBandwidth: 32e9},
	{Name: "rtx-pro-6000", PeakFLOPS: 503.8e12, PeakFP8FLOPS: 1007.6e12, MemBandwidth: 1.792e12, MemBytes: 97887 * mib, LinkBandwidth: 64e9, PCIeBandwidth: 64e9},
}

// hardwareAliases maps other common spellings to preset names, after
// normalisation (lower case, "nvidia" and "geforce" dropped, spaces and
// underscores as dashes: "NVIDIA GeForce RTX 4090" is "rtx-4090", torch's
// and nvidia-smi's device names are found as they print them).
var hardwareAliases = map[string]string{
	"h100-sxm":                              "h100",
	"h100-80gb":                             "h100",
	"h100-sxm5":                             "h100",
	"h100-sxm5-80gb":                        "h100",
	"h100-80gb-hbm3":                        "h100",
	"h100-80gb-sxm":                         "h100", // LambdaLabsML/vllm-benchmark's "1xH100-80GB-SXM"
	"h200-sxm":                              "h200",
	"h200-141gb":                            "h200",
	"a100":                                  "a100-80gb",
	"a100-sxm-80gb":                         "a100-80gb",
	"a100-sxm4-80gb":                        "a100-80gb",
	"a100-80gb-sxm":                         "a100-80gb",
	"a100-40g":                              "a100-40gb",
	"a100-sxm4-40gb":                        "a100-40gb",
	"a100-sxm-40gb":                         "a100-40gb",
	"a800":                                  "a800-80gb",
	"a800-sxm4-80gb":                        "a800-80gb",
	"h800-sxm":                              "h800",
	"h800-80gb":                             "h800",
	"h800-sxm5":                             "h800",
	"h20-96gb":                              "h20",
	"h20-141gb":                             "h20-3e",
	"rtx4090":                               "rtx-4090",
	"4090":                                  "rtx-4090",
	"rtxpro6000":                            "rtx-pro-6000",
	"rtx-pro-6000-blackwell":                "rtx-pro-6000",
	"rtx-pro-6000-blackwell-server":         "rtx-pro-6000",
	"rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000",
	"rtx-pro-6000-blackwell-workstation-edition": "rtx-pro-6000",
}

// normalHardwareName lower-cases name, drops the vendor and product line
// words and joins the rest with dashes.
func normalHardwareName(name string) string {
	f := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == ' ' || r == '_' || r == '-' })
	out := f[:0]
	for _, w := range f {
		if w != "nvidia" && w != "geforce" && w != "tesla" {
			out = append(out, w)
		}
	}
	return strings.Join(out, "-")
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
	key := normalHardwareName(name)
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
