package model

import (
	"fmt"
	"math"
	"time"
)

// Default coefficients of a Deployment. They are starting points for
// calibration, not measurements.
const (
	// DefaultMFU is the fraction of peak FLOPs a serving forward pass
	// reaches in its compute-bound regime; 0.5 is typical of large-batch
	// prefill with FlashAttention on Hopper.
	DefaultMFU = 0.5
	// DefaultBandwidthEfficiency is the fraction of datasheet HBM
	// bandwidth that weight and KV streaming reach (≈ 0.8 in memcpy-like
	// kernels on H100).
	DefaultBandwidthEfficiency = 0.8
	// DefaultLinkEfficiency is the fraction of per-direction link
	// bandwidth a ring all-reduce reaches (NCCL bus bandwidth on 8×H100
	// NVLink is ≈ 360 of 450 GB/s).
	DefaultLinkEfficiency = 0.8
	// DefaultStepOverhead is the fixed cost of a step outside the GPU
	// kernels: scheduling, input preparation, sampling, kernel launches.
	DefaultStepOverhead = 300 * time.Microsecond
	// DefaultActivationReserve is the per-GPU memory vLLM holds back from
	// the KV cache besides the weights: the profiled activation peak of a
	// max_num_batched_tokens forward pass plus non-torch allocations
	// (NCCL, CUDA context). 2 GiB is typical for an 8B model at 8,192
	// batched tokens.
	DefaultActivationReserve = 2 << 30
	// DefaultBlockSize is vLLM's KV block size on CUDA, in tokens.
	DefaultBlockSize = 16
)

// A Deployment is one model served on TP GPUs of one kind, priced as a
// roofline. It implements StepModel.
//
// A step is one forward pass over the whole mixed batch, as vLLM runs it:
// the prefill chunks and decode tokens of a step share one pass and their
// work adds up (Opal instead takes the max of the parts; see opal-notes.md
// §2 Q8). Per GPU of the tensor-parallel group:
//
//	compute = FLOPs / TP / (PeakFLOPS · MFU)
//	memory  = (weights/TP + KV read + KV written) / (MemBandwidth · BandwidthEfficiency)
//	comm    = 2 all-reduces per layer, ring: 2·layers · 2(TP−1)/TP · tokens·hidden·bytes / (LinkBandwidth · LinkEfficiency)
//	step    = max(compute, memory) + comm + StepOverhead
//
// FLOPs = 2·(layer weights)·tokens + 2·(LM head)·sequences + attention,
// where a chunk of t new tokens over c cached ones costs
// 4·layers·heads·head_dim·t·(c + (t+1)/2) in attention, and a decode token
// over c cached ones is a chunk with t = 1. The LM head runs once per
// sequence (vLLM computes logits only at each request's last scheduled
// token). KV read is Σ c · KV bytes per token, KV written is tokens · KV
// bytes per token, both per rank.
//
// Note: Hardware, LLM and TP are fixed by NewDeployment, which
// precomputes the per-step constants from them; build a new Deployment
// to change them. The coefficients (MFU, BandwidthEfficiency,
// LinkEfficiency, StepOverhead, ActivationReserve, BlockSize) may be
// changed at any time, which is what calibration does.
type Deployment struct {
	Hardware Hardware
	LLM      LLM
	TP       int

	MFU                 float64
	BandwidthEfficiency float64
	LinkEfficiency      float64
	StepOverhead        time.Duration
	// ActivationReserve is per-GPU bytes kept out of the KV cache besides
	// the weights (see DefaultActivationReserve).
	ActivationReserve int64
	// BlockSize is the KV block size in tokens; KVCacheTokens rounds down
	// to whole blocks.
	BlockSize int64

	k stepConsts
}

// stepConsts are the per-rank shape constants StepTime needs, so that a
// step costs a few multiply-adds per batch entry and no allocation.
type stepConsts struct {
	linearFLOPsPerToken float64 // 2 · layer matmul weights / TP
	lmHeadFLOPsPerSeq   float64 // 2 · vocab · hidden / TP
	attnFLOPsPerPair    float64 // 4 · layers · heads · head_dim / TP
	weightBytes         float64 // per rank, read once per step
	kvBytesPerToken     float64 // per rank
	commBytesPerToken   float64 // all-reduce bytes each rank sends per token
}

// NewDeployment prices llm on tp GPUs of kind hw with the default
// coefficients. tp must divide the attention heads.
func NewDeployment(hw Hardware, llm LLM, tp int) (*Deployment, error) {
	if err := checkShape(hw, llm, tp); err != nil {
		return nil, err
	}
	d := &Deployment{
		Hardware:            hw,
		LLM:                 llm,
		TP:                  tp,
		MFU:                 DefaultMFU,
		BandwidthEfficiency: DefaultBandwidthEfficiency,
		LinkEfficiency:      DefaultLinkEfficiency,
		StepOverhead:        DefaultStepOverhead,
		ActivationReserve:   DefaultActivationReserve,
		BlockSize:           DefaultBlockSize,
	}
	d.k = d.consts()
	return d, nil
}

func checkShape(hw Hardware, llm LLM, tp int) error {
	switch {
	case tp < 1:
		return fmt.Errorf("tensor parallel size %d: must be at least 1", tp)
	case llm.NumHeads <= 0 || llm.NumLayers <= 0 || llm.HiddenSize <= 0 || llm.WeightBytes <= 0 || llm.KVBytes <= 0:
		return fmt.Errorf("model %q: incomplete shape (use ParseConfig or LoadConfig)", llm.Name)
	case llm.NumHeads%int64(tp) != 0:
		return fmt.Errorf("tensor parallel size %d does not divide the %d attention heads of %q", tp, llm.NumHeads, llm.Name)
	case hw.PeakFLOPS <= 0 || hw.MemBandwidth <= 0 || hw.MemBytes <= 0:
		return fmt.Errorf("hardware %q: peak FLOPs, memory bandwidth and memory must be positive", hw.Name)
	case tp > 1 && hw.LinkBandwidth <= 0:
		return fmt.Errorf("hardware %q: tensor parallel size %d needs a link bandwidth", hw.Name, tp)
	}
	return nil
}

// KVHeadsPerRank is the KV heads each GPU holds. As in vLLM, heads are
// split across ranks, and replicated when TP exceeds their number.
func (d *Deployment) KVHeadsPerRank() int64 {
	return max(1, d.LLM.NumKVHeads/d.tp())
}

// KVBytesPerTokenPerRank is the KV cache one token occupies on each GPU.
func (d *Deployment) KVBytesPerTokenPerRank() int64 {
	m := &d.LLM
	return 2 * m.NumLayers * d.KVHeadsPerRank() * m.HeadDim * m.KVBytes
}

// WeightBytesPerRank is the weight memory on each GPU. The matrices
// (embedding and LM head included: vLLM splits them by vocabulary) are
// split TP ways; the norm vectors are replicated.
func (d *Deployment) WeightBytesPerRank() int64 {
	m := &d.LLM
	norms := (2*m.NumLayers + 1) * m.HiddenSize
	return ((m.Params()-norms)/d.tp() + norms) * m.WeightBytes
}

// tp is TP, read as 1 when a literal Deployment leaves it zero.
func (d *Deployment) tp() int64 { return max(int64(d.TP), 1) }

func (d *Deployment) consts() stepConsts {
	m := &d.LLM
	tp := float64(d.tp())
	k := stepConsts{
		linearFLOPsPerToken: 2 * float64(m.NumLayers*m.layerMatmulParams()) / tp,
		lmHeadFLOPsPerSeq:   2 * float64(m.LMHeadParams()) / tp,
		attnFLOPsPerPair:    m.attnFLOPsPerPair() / tp,
		kvBytesPerToken:     float64(d.KVBytesPerTokenPerRank()),
	}
	// Every step streams all weights but the embedding table, of which it
	// gathers only the rows of its tokens (negligible). A tied LM head
	// reads the table as the head.
	w := m.Params()
	if !m.TieWordEmbeddings {
		w -= m.EmbeddingParams()
	}
	norms := (2*m.NumLayers + 1) * m.HiddenSize
	k.weightBytes = float64(((w-norms)/d.tp() + norms) * m.WeightBytes)
	if d.tp() > 1 {
		// Two all-reduces per layer (after attention o_proj and after
		// the MLP down projection) of tokens·hidden activations; a ring
		// all-reduce sends 2(TP−1)/TP of the buffer from each rank.
		// Activations stay 16-bit even when the weights are fp8.
		k.commBytesPerToken = 2 * float64(m.NumLayers) * 2 * (tp - 1) / tp *
			float64(m.HiddenSize*max(m.WeightBytes, 2))
	}
	return k
}

// StepTime prices one forward pass over b. An empty batch costs 0. It
// does not allocate.
func (d *Deployment) StepTime(b *Batch) time.Duration {
	if b == nil || len(b.Prefill) == 0 && len(b.Decode) == 0 {
		return 0
	}
	k := d.k
	if k.attnFLOPsPerPair == 0 {
		// A Deployment built as a literal rather than by NewDeployment.
		k = d.consts()
	}
	var tokens, ctxRead, pairs float64
	for i := range b.Prefill {
		t, c := float64(b.Prefill[i].Tokens), float64(b.Prefill[i].Context)
		tokens += t
		ctxRead += c
		pairs += t * (c + (t+1)/2)
	}
	for _, c := range b.Decode {
		cf := float64(c)
		ctxRead += cf
		pairs += cf + 1
	}
	nDecode := float64(len(b.Decode))
	tokens += nDecode
	seqs := float64(len(b.Prefill)) + nDecode

	flops := k.linearFLOPsPerToken*tokens + k.lmHeadFLOPsPerSeq*seqs + k.attnFLOPsPerPair*pairs
	compute := flops / (d.Hardware.PeakFLOPS * d.MFU)
	bytes := k.weightBytes + k.kvBytesPerToken*(ctxRead+tokens)
	memory := bytes / (d.Hardware.MemBandwidth * d.BandwidthEfficiency)
	sec := max(compute, memory)
	if k.commBytesPerToken > 0 {
		sec += k.commBytesPerToken * tokens / (d.Hardware.LinkBandwidth * d.LinkEfficiency)
	}
	return time.Duration(math.Round(sec*1e9)) + d.StepOverhead
}

var _ StepModel = (*Deployment)(nil)
