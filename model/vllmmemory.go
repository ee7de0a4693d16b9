package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Note: how vLLM sizes its KV cache, and where each figure comes from.
//
// vLLM's GPU worker (v1/worker/gpu_worker.py determine_available_memory,
// with utils' memory_profiling) loads the weights, runs profile_run — a
// dummy forward pass of max_num_batched_tokens tokens, then a dummy
// sampler run on the last token of min(max_num_seqs,
// max_num_batched_tokens) requests — and gives the KV cache
//
//	gpu_memory_utilization · CUDA's total (Hardware.CUDATotal)
//	  − weights (model_memory_usage, what loading allocated)
//	  − torch peak increase of profile_run (the activations)
//	  − non-torch increase (NCCL and custom all-reduce buffers, cuBLAS
//	    workspaces)
//	  − the CUDA-graph estimate, from vLLM 0.21 on.
//
// The parts are modelled as follows.
//
//   - The device's memory: the total torch.cuda.mem_get_info reports
//     (gpu_worker.py init_device: requested_memory =
//     init_snapshot.total_memory · gpu_memory_utilization, MemorySnapshot
//     measuring torch.cuda.mem_get_info; vLLM 0.11.0), which is less
//     than nvidia-smi's total by what the driver keeps: 79.18 GiB on an
//     H100 against 81,559 MiB (79.65 GiB).
//   - Weights: the parameters per rank, plus the rotary embedding's
//     cos/sin cache (max_position_embeddings × rotary dim in the model
//     dtype), which loading allocates as well: Llama-3.1-8B's 14.99 GiB
//     "Model loading took" (llm-d-benchmark's measurement below) is its
//     14.957 GiB of parameters plus that 0.031 GiB cache.
//   - Activations: the larger of the forward pass's peak and the sampler
//     run's. The sampler's dominates for every model measured: its
//     logits are gathered over the whole vocabulary on every rank, and
//     the dummy sampling metadata asks for top-k and top-p, so the
//     sampler holds the logits, their float32 copy, the sorted values and
//     int64 indices, the probabilities and the random draws at once —
//     SamplerBytesPerLogit bytes per request and vocabulary entry — while
//     the forward pass's last hidden states (tokens × hidden × dtype
//     width) are still held. The forward pass's own peak, one MLP's input,
//     residual, gate-up and activation outputs per rank, is smaller for
//     every model measured, but it is the larger when the token budget is
//     large and the vocabulary small.
//   - Non-torch memory: vLLM 0.11's measured increase on an H100,
//     NonTorchBytesTP1 at TP 1 and NonTorchBytesTP2 at TP 2 (NCCL's and the
//     custom all-reduce's buffers). Larger TP degrees have no published
//     measurement; the TP 2 figure stands for them and the derivation says
//     so.
//   - CUDA graphs: vLLM captures them after allocating the KV cache, so
//     before 0.21 their memory comes out of the headroom
//     gpu_memory_utilization leaves and not out of the KV cache. From 0.21
//     on (vLLM PR #30515, default since v0.21.0 as its start-up log says)
//     the profiler also subtracts an estimate made by capturing graphs
//     during profiling; that estimate is not modelled here and the
//     derivation says so.
//
// Sources: llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-
// results.md (vLLM v0.11.0 on an H100, 79.18 GiB: weights, activation,
// non-torch, CUDA graph and KV cache per model; the table is
// testdata/vllm_memory_llmd_h100.csv, and TestSamplerBytesPerLogit
// refits SamplerBytesPerLogit from it); vLLM's engine defaults
// (arg_utils: max_num_seqs 1024 and max_num_batched_tokens 8192 for an
// API server on a GPU of 70 GiB or more other than the A100, 256 and 2048
// otherwise), which those runs used.

const (
	// SamplerBytesPerLogit is what vLLM's dummy sampler run holds per
	// request and vocabulary entry at its peak: the least-squares fit of
	// the activation column of llm-d-benchmark's seven text-model rows
	// (vLLM 0.11, H100, 8,192 batched tokens, 1,024 sequences) to
	// tokens·hidden·2 + b·1024·vocab, b = 38.33 B; every row is
	// reproduced within 0.6 %.
	SamplerBytesPerLogit = 38.33
	// NonTorchBytesTP1 and NonTorchBytesTP2 are vLLM 0.11's measured
	// non-torch memory increase during profiling on an H100 at TP 1
	// (0.13 GiB, four models) and TP 2 (0.54–0.55 GiB, two models),
	// from the same llm-d-benchmark table.
	NonTorchBytesTP1 int64 = 13 << 30 / 100
	NonTorchBytesTP2 int64 = 55 << 30 / 100
)

// A VLLMProfile is what vLLM's start-up memory profile depends on besides
// the deployment: the memory fraction it may use, the batch its dummy
// forward pass and sampler run are sized by, and its version.
type VLLMProfile struct {
	GPUMemoryUtilization float64
	MaxNumBatchedTokens  int64
	MaxNumSeqs           int64
	// Version is the vLLM version ("0.19.0"); "" when unknown.
	Version string
}

// A VLLMMemory is one GPU's memory as vLLM divides it at start-up, in
// bytes, part by part (see the Note above VLLMProfile). KV is what is
// left for the KV cache; it is negative when the rest does not fit.
type VLLMMemory struct {
	// Device is CUDA's total (Hardware.CUDATotal), Budget its share
	// gpu_memory_utilization.
	Device, Budget int64
	Weights        int64 // parameters per rank
	RotaryCache    int64 // the rotary embedding's cos/sin cache
	// Activation is max(Forward, Hidden + Sampler): the forward pass's
	// peak, and the sampler run's logits and sampling tensors over the
	// forward pass's last hidden states.
	Activation, Forward, Hidden, Sampler int64
	NonTorch                             int64
	CUDAGraphs                           int64
	KV                                   int64
	// Caveats say which parts are not modelled for this deployment.
	Caveats []string
}

// VLLMMemory returns how vLLM divides one GPU of d's memory under p.
func (d *Deployment) VLLMMemory(p VLLMProfile) (VLLMMemory, error) {
	if !(p.GPUMemoryUtilization > 0 && p.GPUMemoryUtilization <= 1) {
		return VLLMMemory{}, fmt.Errorf("gpu memory utilization %v: must be in (0, 1]", p.GPUMemoryUtilization)
	}
	if p.MaxNumBatchedTokens <= 0 || p.MaxNumSeqs <= 0 {
		return VLLMMemory{}, fmt.Errorf("vLLM memory profile: max_num_batched_tokens %d and max_num_seqs %d must be positive", p.MaxNumBatchedTokens, p.MaxNumSeqs)
	}
	if err := checkShape(d.Hardware, d.LLM, d.TP); err != nil {
		return VLLMMemory{}, err
	}
	m := &d.LLM
	wb := max(m.WeightBytes, 1)
	tp := int64(d.tp())
	tokens := p.MaxNumBatchedTokens
	rows := min(p.MaxNumSeqs, tokens)
	v := VLLMMemory{
		Device:      d.Hardware.CUDATotal(),
		Budget:      int64(float64(d.Hardware.CUDATotal()) * p.GPUMemoryUtilization),
		Weights:     d.WeightBytesPerRank(),
		RotaryCache: m.MaxPositionEmbeddings * m.rotaryDim() * wb,
		Hidden:      tokens * m.HiddenSize * wb,
		Sampler:     int64(float64(rows) * float64(m.VocabSize) * SamplerBytesPerLogit),
	}
	// One MLP at its widest: input and residual (hidden each), gate-up
	// output (2·width/TP) and activation output (width/TP).
	width := m.IntermediateSize
	if m.IsMoE() {
		width = max(width, m.ExpertsPerToken*m.MoEIntermediateSize)
	}
	v.Forward = tokens * (2*m.HiddenSize + 3*width/tp) * wb
	v.Activation = max(v.Forward, v.Hidden+v.Sampler)
	switch {
	case d.tp() == 1:
		v.NonTorch = NonTorchBytesTP1
	default:
		v.NonTorch = NonTorchBytesTP2
		if d.tp() > 2 {
			v.Caveats = append(v.Caveats, fmt.Sprintf("non-torch memory at TP%d not measured: TP2's", d.tp()))
		}
	}
	if versionAtLeast(p.Version, 0, 21) {
		v.Caveats = append(v.Caveats, "vLLM "+p.Version+" also subtracts its CUDA-graph estimate (default since 0.21): not modelled")
	}
	v.KV = v.Budget - v.Weights - v.RotaryCache - v.Activation - v.NonTorch - v.CUDAGraphs
	return v, nil
}

// String is the derivation in one line, in GiB.
func (v VLLMMemory) String() string {
	const gib = 1 << 30
	g := func(b int64) string { return strconv.FormatFloat(float64(b)/gib, 'f', 2, 64) }
	s := fmt.Sprintf("%s GiB allowed − %s weights − %s rotary cache − %s activations (max(forward %s, hidden %s + sampler %s)) − %s non-torch − %s CUDA graphs = %s GiB",
		g(v.Budget), g(v.Weights), g(v.RotaryCache), g(v.Activation), g(v.Forward), g(v.Hidden), g(v.Sampler), g(v.NonTorch), g(v.CUDAGraphs), g(v.KV))
	if len(v.Caveats) > 0 {
		s += "; " + strings.Join(v.Caveats, "; ")
	}
	return s
}

// rotaryDim is the width of the rotary embedding vLLM caches cos and sin
// for: the shared rotary key's under MLA, a head's otherwise.
func (m *LLM) rotaryDim() int64 {
	if m.IsMLA() {
		return m.QKRopeHeadDim
	}
	return m.HeadDim
}

// versionAtLeast reports whether version ("0.19.0", "v0.11.2.dev358")
// is major.minor or later; an unknown version is not.
func versionAtLeast(version string, major, minor int) bool {
	f := strings.FieldsFunc(strings.TrimPrefix(version, "v"), func(r rune) bool { return r == '.' || r == '+' || r == '-' })
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
