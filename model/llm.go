package model

// An LLM is the shape of a decoder-only transformer as far as cost goes:
// the sizes of its matrices and the bytes of its weights and KV cache. The
// thin slice covers dense models with grouped-query attention (Llama,
// Mistral, Qwen2/3); mixture-of-experts, MLA and sliding-window layers are
// rejected by ParseConfig until they are modelled.
type LLM struct {
	Name      string // preset or directory name; empty when parsed from bytes
	ModelType string // config.json model_type, e.g. "llama"

	HiddenSize       int64
	NumLayers        int64
	NumHeads         int64 // query heads
	NumKVHeads       int64 // key/value heads (GQA groups)
	HeadDim          int64
	IntermediateSize int64
	VocabSize        int64

	TieWordEmbeddings bool
	AttentionBias     bool // bias on q, k, v (and o when OutputBias)
	OutputBias        bool // bias on the attention output projection
	MLPBias           bool
	QKNorm            bool // per-head RMSNorm on q and k (Qwen3)

	MaxPositionEmbeddings int64

	// DType is the serving dtype of the weights ("bfloat16", "float16",
	// "float8_e4m3fn"); WeightBytes and KVBytes are its width and the KV
	// cache's in bytes per element.
	DType       string
	WeightBytes int64
	KVBytes     int64
}

// EmbeddingParams is the size of the input embedding table.
func (m *LLM) EmbeddingParams() int64 { return m.VocabSize * m.HiddenSize }

// LMHeadParams is the size of the output projection to the vocabulary,
// whether or not it shares storage with the embedding.
func (m *LLM) LMHeadParams() int64 { return m.VocabSize * m.HiddenSize }

// LayerParams is the parameter count of one decoder layer: attention q, k,
// v, o, the gated MLP (gate, up, down), their biases if any, and the two
// RMSNorm weight vectors.
func (m *LLM) LayerParams() int64 {
	q := m.NumHeads * m.HeadDim
	kv := m.NumKVHeads * m.HeadDim
	p := m.HiddenSize*q + 2*m.HiddenSize*kv + q*m.HiddenSize
	if m.AttentionBias {
		p += q + 2*kv
	}
	if m.OutputBias {
		p += m.HiddenSize
	}
	p += 3 * m.HiddenSize * m.IntermediateSize
	if m.MLPBias {
		p += 2*m.IntermediateSize + m.HiddenSize
	}
	p += 2 * m.HiddenSize
	if m.QKNorm {
		p += 2 * m.HeadDim
	}
	return p
}

// Params is the total parameter count as a checkpoint stores it: the
// embedding, the layers, the final norm, and the LM head unless tied.
// Llama-3.1-8B gives 8,030,261,248.
func (m *LLM) Params() int64 {
	p := m.EmbeddingParams() + m.NumLayers*m.LayerParams() + m.HiddenSize
	if !m.TieWordEmbeddings {
		p += m.LMHeadParams()
	}
	return p
}

// ActiveParams is the parameter count a token passes through. For a dense
// model it equals Params; mixture-of-experts models will count only the
// routed experts here.
func (m *LLM) ActiveParams() int64 { return m.Params() }

// ModelBytes is the weight memory of the whole model (all ranks together).
func (m *LLM) ModelBytes() int64 { return m.Params() * m.WeightBytes }

// layerMatmulParams counts the weights of one layer that multiply every
// token: everything but the norms and biases, whose FLOPs are negligible.
func (m *LLM) layerMatmulParams() int64 {
	q := m.NumHeads * m.HeadDim
	kv := m.NumKVHeads * m.HeadDim
	return 2*m.HiddenSize*q + 2*m.HiddenSize*kv + 3*m.HiddenSize*m.IntermediateSize
}

// KVBytesPerToken is the KV cache one token occupies across all layers and
// ranks: 2 (K and V) · layers · kv_heads · head_dim · KV dtype bytes.
// Llama-3.1-8B in bf16 gives 131,072.
func (m *LLM) KVBytesPerToken() int64 {
	return 2 * m.NumLayers * m.NumKVHeads * m.HeadDim * m.KVBytes
}

// attnFLOPsPerPair is the attention FLOPs for one query token against one
// key token over all layers: QKᵀ and PV each cost 2·head_dim multiply-adds
// per head.
func (m *LLM) attnFLOPsPerPair() float64 {
	return 4 * float64(m.NumLayers) * float64(m.NumHeads) * float64(m.HeadDim)
}

// FLOPsPerToken is the forward FLOPs of one token that attends to context
// earlier tokens and to itself, including its LM-head projection:
// 2·(matmul weights) + 4·layers·heads·head_dim·(context+1). The embedding
// lookup is a gather and costs nothing here.
func (m *LLM) FLOPsPerToken(context int64) float64 {
	w := float64(m.NumLayers*m.layerMatmulParams() + m.LMHeadParams())
	return 2*w + m.attnFLOPsPerPair()*float64(context+1)
}
