package model

import (
	"fmt"
	"strconv"
	"strings"
)

// SGLangMemFractionStatic is SGLang's default --mem-fraction-static for a
// server of tp GPUs by the rule of v0.4.0 to v0.4.5.post2 (server_args.py: 0.88
// at TP1, 0.87 at 2, 0.85 at 4, 0.81 at 8, 0.79 at 16 or more), the
// DataCrunch runs' (v0.4.0.post1). SGLangServeDefaults gives each
// version's rule, by GPU memory too.
func SGLangMemFractionStatic(tp int) float64 {
	return sglangTPFraction(tp)
}

// Note: how SGLang sizes its KV pool, and where each figure comes from.
//
// SGLang's model runner (model_executor/model_runner.py, the same formula
// from v0.4.0.post1 to v0.5.2) measures the free memory of each GPU with
// cudaMemGetInfo after torch.distributed and NCCL start (init_torch_
// distributed's min_per_gpu_memory, the least over the ranks), loads the
// weights, measures again, and gives the pool (profile_max_num_token)
//
//	free after loading − free before loading · (1 − mem_fraction_static)
//	  = free before loading · mem_fraction_static − what loading allocated
//
// over the KV bytes of one token on a rank, rounded down to whole pages
// (init_memory_pool). The device's total appears nowhere: what matters is
// the memory free when loading begins, which is less than the total
// nvidia-smi prints (Hardware.MemBytes) by
//
//   - the memory the driver keeps from CUDA: cudaMemGetInfo's total is
//     Hardware.CUDAMemBytes where a public log gives it;
//   - what the process holds before loading, outside PyTorch's allocator:
//     the CUDA context, NCCL communicators, custom all-reduce buffers
//     (Hardware.ProcessBytes where a public log gives it).
//
// A GPU without these figures is taken as wholly free (the caveats say
// so), which overstates the pool by mem_fraction_static times the missing
// memory. What loading allocates is the parameters per rank, the rotary
// embedding's cos/sin cache (max_position_embeddings × rotary dim), in
// float32 on CUDA from v0.4.2.post1 (sgl-project/sglang #3169, 988d0a4b,
// layers/rotary_embedding.py: "cache needs to be in FP32"), in the model
// dtype before (vLLM's get_rope, which v0.4.0.post1 imports), and what
// PyTorch's caching allocator reserves beyond them: it rounds a tensor of
// 10 MiB or more up to 2 MiB (torchalloc.go), and the log sees whole
// segments. For Qwen3-14B at TP4 the parameters and the rotary cache are
// 6.90 GiB, the rounding 0.18 GiB, and SGLang logs 7.08 GiB.
//
// The formula is checked against an SGLang log in sglangmemory_test.go
// (TestSGLangPoolFormulaLog).

// sglangFP32RotaryCache is the first release that keeps the rotary cache
// in float32 on CUDA.
var sglangFP32RotaryCache = mustSGLangVersion("0.4.2.post1")

// An SGLangMemory is one GPU's memory as SGLang's model runner divides it
// at start-up, in bytes (see the Note above).
type SGLangMemory struct {
	// Device is the driver's total (Hardware.MemBytes); Visible is
	// cudaMemGetInfo's (Hardware.CUDAMemBytes, or Device where unknown).
	Device, Visible int64
	// Process is what the process holds before loading
	// (Hardware.ProcessBytes).
	Process int64
	// FreeBeforeLoad is Visible − Process: profile_max_num_token's
	// total_gpu_memory.
	FreeBeforeLoad int64
	// MemFractionStatic is the fraction the division was made at.
	MemFractionStatic float64
	// Weights and RotaryCache are what loading allocates, and Rounding
	// what PyTorch's caching allocator reserves beyond those tensors
	// (torchReserved of sglangLoadSizes; 0 with a caveat for a model
	// sglangLoadSizes does not describe).
	Weights, RotaryCache, Rounding int64
	// Headroom is FreeBeforeLoad · (1 − mem_fraction_static), left for
	// activations and CUDA graphs.
	Headroom int64
	// KV is the pool's bytes: FreeBeforeLoad − Weights − RotaryCache −
	// Headroom; negative when the weights do not fit.
	KV int64
	// Tokens is the pool's capacity: KV over the KV bytes of a token on
	// a rank, rounded down to whole pages.
	Tokens int64
	// Caveats say which parts are not known for this deployment.
	Caveats []string
}

// String is the division, for a derivation line.
func (m SGLangMemory) String() string {
	const gib = 1 << 30
	g := func(b int64) string { return strconv.FormatFloat(float64(b)/gib, 'f', 2, 64) }
	s := fmt.Sprintf("%s GiB free before loading (%s CUDA total − %s process) × %g − %s weights − %s rotary cache − %s allocator rounding = %s GiB",
		g(m.FreeBeforeLoad), g(m.Visible), g(m.Process), m.MemFractionStatic, g(m.Weights), g(m.RotaryCache), g(m.Rounding), g(m.KV))
	if len(m.Caveats) > 0 {
		s += "; " + strings.Join(m.Caveats, "; ")
	}
	return s
}

// SGLangMemory returns how SGLang of version ("" for
// SGLangDefaultVersion) divides one GPU of d's memory at
// mem_fraction_static frac with pages of page tokens (≤ 1: one token). It
// is an error when the weights leave no room for a page.
func (d *Deployment) SGLangMemory(frac float64, version string, page int64) (SGLangMemory, error) {
	const gib = 1 << 30
	if !(frac > 0 && frac <= 1) {
		return SGLangMemory{}, fmt.Errorf("mem_fraction_static %v: must be in (0, 1]", frac)
	}
	hw := d.Hardware
	m := SGLangMemory{Device: hw.MemBytes, Visible: hw.CUDAMemBytes, Process: hw.ProcessBytes, MemFractionStatic: frac, Weights: d.WeightBytesPerRank()}
	if m.Visible <= 0 {
		m.Visible = m.Device
		m.Caveats = append(m.Caveats, "CUDA's total for "+hw.Name+" not known: the driver's taken")
	}
	if m.Process <= 0 {
		m.Process = 0
		m.Caveats = append(m.Caveats, "memory held before loading (CUDA context, NCCL) on "+hw.Name+" not known: none taken")
	}
	m.FreeBeforeLoad = m.Visible - m.Process
	v, ok := parseSGLangVersion(version)
	if !ok {
		v = mustSGLangVersion(SGLangDefaultVersion)
	}
	width := max(d.LLM.WeightBytes, 1)
	if !v.before(sglangFP32RotaryCache) {
		width = 4
	}
	m.RotaryCache = d.LLM.MaxPositionEmbeddings * d.LLM.rotaryDim() * width
	if sizes, ok := d.sglangLoadSizes(m.RotaryCache); ok {
		m.Rounding = torchReserved(sizes)
		for _, s := range sizes {
			m.Rounding -= s
		}
	} else {
		m.Caveats = append(m.Caveats, "the caching allocator's rounding of the weights not modelled for "+d.LLM.Name)
	}
	loaded := m.Weights + m.RotaryCache + m.Rounding
	m.Headroom = int64(float64(m.FreeBeforeLoad) * (1 - frac))
	m.KV = m.FreeBeforeLoad - m.Headroom - loaded
	m.Tokens = sglangPoolTokens(m.FreeBeforeLoad, loaded, frac, d.KVBytesPerTokenPerRank(), page)
	if m.Tokens == 0 {
		return m, fmt.Errorf("%s on %d×%s does not fit at mem_fraction_static %v: %.2f GiB of weights per GPU of %.2f GiB allowed (%s)",
			d.LLM.Name, d.TP, hw.Name, frac, float64(m.Weights)/gib, float64(m.FreeBeforeLoad)*frac/gib, m)
	}
	return m, nil
}

// sglangPoolTokens is profile_max_num_token with init_memory_pool's
// rounding: the memory free before loading less what loading allocated
// less the share 1 − frac of the former, over perToken bytes, in whole
// pages (≤ 1: one token); 0 when nothing is left.
func sglangPoolTokens(freeBefore, loaded int64, frac float64, perToken, page int64) int64 {
	rest := freeBefore - loaded - int64(float64(freeBefore)*(1-frac))
	if rest <= 0 || perToken <= 0 {
		return 0
	}
	page = max(page, 1)
	return rest / perToken / page * page
}

// SGLangKVCacheTokens is the number of tokens SGLang's KV pool holds at
// mem_fraction_static frac with SGLangDefaultVersion and pages of one
// token (SGLangMemory).
func (d *Deployment) SGLangKVCacheTokens(frac float64) (int64, error) {
	m, err := d.SGLangMemory(frac, "", 1)
	return m.Tokens, err
}
