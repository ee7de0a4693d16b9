package model

import "sort"

// PyTorch's CUDA caching allocator, as far as it decides how much device
// memory a sequence of allocations reserves (c10/cuda/CUDACachingAllocator
// with the constants of c10's AllocatorConfig.h, default configuration,
// one stream, nothing freed): every size is rounded up to 512 bytes;
// sizes up to 1 MiB are "small" and come from 2 MiB segments, larger ones
// from the "large" pool, whose new segments are 20 MiB for sizes under 10
// MiB and the size rounded up to 2 MiB otherwise; a request takes the
// smallest free block of its pool that fits, and the block is split when
// what remains is at least 512 bytes (small) or more than 1 MiB (large),
// the rest staying free for later requests. cudaMemGetInfo sees whole
// segments, so what SGLang's start-up log reports as the weights' "mem
// usage" is the segments' total, not the tensors'.
const (
	torchMinBlock     = 512
	torchSmallSize    = 1 << 20
	torchSmallBuffer  = 2 << 20
	torchLargeBuffer  = 20 << 20
	torchMinLargeSize = 10 << 20
	torchRoundLarge   = 2 << 20
)

// torchReserved returns the bytes of device memory the caching allocator
// reserves for tensors of sizes allocated in order and kept.
func torchReserved(sizes []int64) int64 {
	var free [2][]int64 // free blocks of the small and the large pool, ascending
	var reserved int64
	for _, s := range sizes {
		s = max(torchMinBlock, (s+torchMinBlock-1)/torchMinBlock*torchMinBlock)
		pool := 1
		if s <= torchSmallSize {
			pool = 0
		}
		f := free[pool]
		i := sort.Search(len(f), func(i int) bool { return f[i] >= s })
		var block int64
		if i < len(f) {
			block = f[i]
			f = append(f[:i], f[i+1:]...)
		} else {
			switch {
			case s <= torchSmallSize:
				block = torchSmallBuffer
			case s < torchMinLargeSize:
				block = torchLargeBuffer
			default:
				block = (s + torchRoundLarge - 1) / torchRoundLarge * torchRoundLarge
			}
			reserved += block
		}
		if rest := block - s; pool == 0 && rest >= torchMinBlock || pool == 1 && rest > torchSmallSize {
			j := sort.Search(len(f), func(j int) bool { return f[j] >= rest })
			f = append(f, 0)
			copy(f[j+1:], f[j:])
			f[j] = rest
		}
		free[pool] = f
	}
	return reserved
}

// sglangLoadSizes returns the sizes in bytes of the tensors SGLang's
// model runner allocates on one rank when it builds a dense model, in the
// order it builds them (models/llama.py, qwen2.py, qwen3.py): the
// embedding, then per layer the fused q/k/v projection (a rank's query
// heads and its key/value heads, at least one), its bias, the output
// projection and its bias, the rotary cache (once, shared: rotary bytes),
// the per-head q/k norms, the fused gate/up and the down projection and
// their biases, the two layer norms; the final norm and an untied LM head.
// The vocabulary is padded to a multiple of 64 and split (SGLang's
// VocabParallelEmbedding). ok is false for what this does not describe:
// mixtures of experts, MLA, attention sinks, quantized weights, pipeline
// stages.
func (d *Deployment) sglangLoadSizes(rotary int64) (sizes []int64, ok bool) {
	m := &d.LLM
	tp := d.tp()
	if m.IsMoE() || m.IsMLA() || m.AttentionSinks || m.linearBytes() != float64(m.WeightBytes) || d.pp() > 1 || m.NumHeads%tp != 0 {
		return nil, false
	}
	wb, h := max(m.WeightBytes, 1), m.HiddenSize
	vocab := (m.VocabSize + 63) / 64 * 64 / tp * h * wb
	qh, kvh, width := m.NumHeads/tp, max(m.NumKVHeads/tp, 1), m.IntermediateSize/tp
	sizes = append(sizes, vocab)
	for l := range m.NumLayers {
		qkv := (qh + 2*kvh) * m.HeadDim
		sizes = append(sizes, qkv*h*wb)
		if m.AttentionBias {
			sizes = append(sizes, qkv*wb)
		}
		sizes = append(sizes, h*qh*m.HeadDim*wb)
		if m.OutputBias {
			sizes = append(sizes, h*wb)
		}
		if l == 0 && rotary > 0 {
			sizes = append(sizes, rotary)
		}
		if m.QKNorm {
			sizes = append(sizes, m.HeadDim*wb, m.HeadDim*wb)
		}
		sizes = append(sizes, 2*width*h*wb)
		if m.MLPBias {
			sizes = append(sizes, 2*width*wb)
		}
		sizes = append(sizes, h*width*wb)
		if m.MLPBias {
			sizes = append(sizes, h*wb)
		}
		sizes = append(sizes, h*wb, h*wb)
	}
	sizes = append(sizes, h*wb)
	if !m.TieWordEmbeddings {
		sizes = append(sizes, vocab)
	}
	return sizes, true
}
