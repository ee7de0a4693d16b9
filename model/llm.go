package model

// An LLM is the shape of a decoder-only transformer as far as cost goes:
// the sizes of its matrices and the bytes of its weights and KV cache.
// ParseConfig fills it from a Hugging Face config.json. It covers dense
// and mixture-of-experts MLPs, grouped-query and multi-head latent
// attention, sliding-window and hybrid attention layers, and 16-bit, fp8
// and block-quantized (mxfp4, 4/8-bit) weights.
type LLM struct {
	Name      string // preset or directory name; empty when parsed from bytes
	ModelType string // config.json model_type, e.g. "llama"

	HiddenSize       int64
	NumLayers        int64
	NumHeads         int64 // query heads
	NumKVHeads       int64 // key/value heads (GQA groups); unused by MLA
	HeadDim          int64
	IntermediateSize int64 // dense MLP width (the dense layers of an MoE model)
	VocabSize        int64

	TieWordEmbeddings bool
	AttentionBias     bool // bias on q, k, v (and o when OutputBias)
	OutputBias        bool // bias on the attention output projection
	MLPBias           bool
	QKNorm            bool // per-head RMSNorm on q and k (Qwen3)
	AttentionSinks    bool // one learned sink logit per head and layer (gpt-oss)

	// Multi-head latent attention (DeepSeek-V2/V3), used when KVLoraRank > 0.
	// The KV cache holds, per token and layer, the compressed latent
	// (KVLoraRank) and the shared rotary key (QKRopeHeadDim).
	QLoraRank     int64 // 0: queries are projected directly from the hidden state
	KVLoraRank    int64
	QKNopeHeadDim int64
	QKRopeHeadDim int64
	VHeadDim      int64

	// Sliding-window attention. LayerSliding[i] tells whether layer i
	// attends only to the last SlidingWindow tokens; nil means no layer
	// does.
	SlidingWindow int64
	LayerSliding  []bool

	// Mixture of experts, used when NumExperts > 0. Layers before
	// FirstDenseLayers keep a dense MLP of IntermediateSize.
	NumExperts          int64 // routed experts per MoE layer
	ExpertsPerToken     int64 // routed experts each token goes through (top-k)
	MoEIntermediateSize int64 // width of one routed expert
	NumSharedExperts    int64 // experts every token goes through (DeepSeek, Qwen2-MoE)
	SharedIntermediate  int64 // width of one shared expert
	FirstDenseLayers    int64 // DeepSeek first_k_dense_replace
	ExpertBias          bool  // biases on expert projections (gpt-oss)
	RouterBias          int64 // bias or score-correction entries per router (gpt-oss, DeepSeek-V3)

	MaxPositionEmbeddings int64

	// DType is the serving dtype of the unquantized weights ("bfloat16",
	// "float16", "float8_e4m3fn"); WeightBytes is its width and KVBytes the
	// KV cache's, in bytes per element.
	DType       string
	WeightBytes int64
	KVBytes     int64
	// Quantization is the checkpoint's quant_method ("fp8", "mxfp4",
	// "gptq", ...) or "". LinearBytes and ExpertBytes are the bytes per
	// element of the decoder layers' matrices (attention and dense MLP)
	// and of the routed experts; embeddings, LM head, norms and biases stay
	// WeightBytes wide.
	Quantization string
	LinearBytes  float64
	ExpertBytes  float64
	// FP8Compute is true when the matmuls run on fp8 tensor cores (an fp8
	// checkpoint served W8A8, as vLLM does on Hopper and later).
	FP8Compute bool
}

// IsMLA reports whether the model uses multi-head latent attention.
func (m *LLM) IsMLA() bool { return m.KVLoraRank > 0 }

// IsMoE reports whether the model has routed experts.
func (m *LLM) IsMoE() bool { return m.NumExperts > 0 }

// EmbeddingParams is the size of the input embedding table.
func (m *LLM) EmbeddingParams() int64 { return m.VocabSize * m.HiddenSize }

// LMHeadParams is the size of the output projection to the vocabulary,
// whether or not it shares storage with the embedding.
func (m *LLM) LMHeadParams() int64 { return m.VocabSize * m.HiddenSize }

// attnParts returns the parameters of one attention block: matmul
// weights, and the small vectors (biases, norms, sinks).
func (m *LLM) attnParts() (matmul, small int64) {
	h := m.HiddenSize
	if m.IsMLA() {
		qk := m.QKNopeHeadDim + m.QKRopeHeadDim
		if m.QLoraRank > 0 {
			matmul += h*m.QLoraRank + m.QLoraRank*m.NumHeads*qk
			small += m.QLoraRank // q_a_layernorm
		} else {
			matmul += h * m.NumHeads * qk
		}
		matmul += h*(m.KVLoraRank+m.QKRopeHeadDim) + m.KVLoraRank*m.NumHeads*(m.QKNopeHeadDim+m.VHeadDim)
		small += m.KVLoraRank // kv_a_layernorm
		matmul += m.NumHeads * m.VHeadDim * h
	} else {
		q := m.NumHeads * m.HeadDim
		kv := m.NumKVHeads * m.HeadDim
		matmul = h*q + 2*h*kv + q*h
		if m.AttentionBias {
			small += q + 2*kv
		}
		if m.OutputBias {
			small += h
		}
		if m.QKNorm {
			small += 2 * m.HeadDim
		}
	}
	if m.AttentionSinks {
		small += m.NumHeads
	}
	return matmul, small
}

// denseMLPParts returns the parameters of a dense gated MLP of width w.
func (m *LLM) denseMLPParts(w int64, bias bool) (matmul, small int64) {
	matmul = 3 * m.HiddenSize * w
	if bias {
		small = 2*w + m.HiddenSize
	}
	return matmul, small
}

func (m *LLM) numMoELayers() int64 {
	if !m.IsMoE() {
		return 0
	}
	return max(m.NumLayers-m.FirstDenseLayers, 0)
}

// expertParams is the size of one routed expert, biases included.
func (m *LLM) expertParams() int64 {
	mat, small := m.denseMLPParts(m.MoEIntermediateSize, m.ExpertBias)
	return mat + small
}

// layerCounts splits the parameters of the decoder layers by how they are
// stored and split: linear are the attention and dense (or shared-expert)
// matmuls, experts the routed experts, small the replicated vectors
// (norms, biases, sinks) and the routers. activeExperts counts the routed
// expert parameters one token passes through.
type layerCounts struct {
	linear, experts, small, activeExperts int64
}

func (m *LLM) layerCounts() layerCounts {
	var c layerCounts
	am, as := m.attnParts()
	c.linear = m.NumLayers * am
	c.small = m.NumLayers * (as + 2*m.HiddenSize) // + input and post-attention RMSNorm
	dense := m.NumLayers - m.numMoELayers()
	dm, ds := m.denseMLPParts(m.IntermediateSize, m.MLPBias)
	c.linear += dense * dm
	c.small += dense * ds
	if n := m.numMoELayers(); n > 0 {
		sm, ss := m.denseMLPParts(m.SharedIntermediate, false)
		c.linear += n * m.NumSharedExperts * sm
		c.small += n * (m.NumSharedExperts*ss + m.HiddenSize*m.NumExperts + m.RouterBias)
		c.experts = n * m.NumExperts * m.expertParams()
		c.activeExperts = n * m.ExpertsPerToken * m.expertParams()
	}
	return c
}

// LayerParams is the mean parameter count of one decoder layer; for a
// dense model every layer has exactly this many: attention q, k, v, o,
// the gated MLP (gate, up, down), their biases if any, and the two
// RMSNorm weight vectors.
func (m *LLM) LayerParams() int64 {
	c := m.layerCounts()
	return (c.linear + c.experts + c.small) / m.NumLayers
}

// Params is the total parameter count as a checkpoint stores it: the
// embedding, the layers, the final norm, and the LM head unless tied.
// Llama-3.1-8B gives 8,030,261,248; DeepSeek-V3 671,026,419,200 (without
// its multi-token-prediction module, which serving does not load unless
// it speculates with it).
func (m *LLM) Params() int64 {
	c := m.layerCounts()
	p := m.EmbeddingParams() + c.linear + c.experts + c.small + m.HiddenSize
	if !m.TieWordEmbeddings {
		p += m.LMHeadParams()
	}
	return p
}

// ActiveParams is the parameter count a token passes through: Params with
// only ExpertsPerToken of each MoE layer's routed experts. Like Params it
// includes the embedding table; model cards differ on that (Mixtral's
// 12.9B includes it, gpt-oss's 3.61B and DeepSeek-V3's 36.6B do not).
func (m *LLM) ActiveParams() int64 {
	c := m.layerCounts()
	return m.Params() - c.experts + c.activeExperts
}

// ModelBytes is the weight memory of the whole model (all ranks together).
func (m *LLM) ModelBytes() int64 {
	c := m.layerCounts()
	b := float64(m.Params()-c.linear-c.experts)*float64(m.WeightBytes) +
		float64(c.linear)*m.linearBytes() + float64(c.experts)*m.expertBytes()
	return int64(b)
}

// linearBytes and expertBytes read zero (a literal LLM) as WeightBytes.
func (m *LLM) linearBytes() float64 {
	if m.LinearBytes > 0 {
		return m.LinearBytes
	}
	return float64(m.WeightBytes)
}

func (m *LLM) expertBytes() float64 {
	if m.ExpertBytes > 0 {
		return m.ExpertBytes
	}
	return m.linearBytes()
}

func (m *LLM) activeMatmulParams() int64 {
	c := m.layerCounts()
	p := c.linear
	if n := m.numMoELayers(); n > 0 {
		mat, _ := m.denseMLPParts(m.MoEIntermediateSize, false)
		p += n * (m.ExpertsPerToken*mat + m.HiddenSize*m.NumExperts)
	}
	return p
}

// attnFLOPsPerPairLayer is the attention FLOPs of one query token against
// one key token in one layer: QKᵀ and PV cost 2 FLOPs per multiply-add.
// For MLA, the prefill (non-absorbed) form: the keys are qk_nope+qk_rope
// wide, the values v_head_dim.
func (m *LLM) attnFLOPsPerPairLayer() float64 {
	if m.IsMLA() {
		return 2 * float64(m.NumHeads) * float64(m.QKNopeHeadDim+m.QKRopeHeadDim+m.VHeadDim)
	}
	return 4 * float64(m.NumHeads) * float64(m.HeadDim)
}

// numSlidingLayers counts the layers with a sliding window.
func (m *LLM) numSlidingLayers() int64 {
	if m.SlidingWindow <= 0 {
		return 0
	}
	var n int64
	for _, s := range m.LayerSliding {
		if s {
			n++
		}
	}
	return n
}

// KVBytesPerTokenPerLayer is the KV cache one token occupies in one layer:
// 2 (K and V) · kv_heads · head_dim · KV dtype bytes, or for MLA the
// latent and rotary key, (kv_lora_rank + qk_rope_head_dim) · bytes, as
// vLLM caches it.
func (m *LLM) KVBytesPerTokenPerLayer() int64 {
	if m.IsMLA() {
		return (m.KVLoraRank + m.QKRopeHeadDim) * m.KVBytes
	}
	return 2 * m.NumKVHeads * m.HeadDim * m.KVBytes
}

// KVBytesPerToken is the KV cache one token occupies across all layers and
// ranks while it is inside every window. Llama-3.1-8B in bf16 gives
// 131,072; DeepSeek-V3 (MLA, 61 layers of 576 bf16 values) 70,272.
func (m *LLM) KVBytesPerToken() int64 {
	return m.NumLayers * m.KVBytesPerTokenPerLayer()
}

// A KVGroup is a set of layers whose KV cache grows alike: full-attention
// layers keep every token, sliding-window layers the last Window.
type KVGroup struct {
	Kind          string // "full" or "sliding"
	Layers        int64
	Window        int64 // tokens kept; 0 for full attention
	BytesPerToken int64 // per token, all layers of the group
}

// KVGroups returns the KV cache groups by layer type, full attention
// first; groups without layers are left out.
func (m *LLM) KVGroups() []KVGroup {
	s := m.numSlidingLayers()
	per := m.KVBytesPerTokenPerLayer()
	var g []KVGroup
	if f := m.NumLayers - s; f > 0 {
		g = append(g, KVGroup{Kind: "full", Layers: f, BytesPerToken: f * per})
	}
	if s > 0 {
		g = append(g, KVGroup{Kind: "sliding", Layers: s, Window: m.SlidingWindow, BytesPerToken: s * per})
	}
	return g
}

// KVBytesForContext is the KV cache of one sequence of n tokens: full
// layers hold all n, sliding layers at most their window.
func (m *LLM) KVBytesForContext(n int64) int64 {
	var b int64
	for _, g := range m.KVGroups() {
		k := n
		if g.Window > 0 {
			k = min(n, g.Window)
		}
		b += k * g.BytesPerToken
	}
	return b
}

// FLOPsPerToken is the forward FLOPs of one token that attends to context
// earlier tokens and to itself, including its LM-head projection:
// 2·(active matmul weights) + attention over context+1 keys (at most the
// window in sliding layers). The embedding lookup is a gather and costs
// nothing here.
func (m *LLM) FLOPsPerToken(context int64) float64 {
	w := float64(m.activeMatmulParams() + m.LMHeadParams())
	s := m.numSlidingLayers()
	keys := float64(context + 1)
	f := 2*w + float64(m.NumLayers-s)*m.attnFLOPsPerPairLayer()*keys
	if s > 0 {
		f += float64(s) * m.attnFLOPsPerPairLayer() * float64(min(context+1, m.SlidingWindow))
	}
	return f
}

// slidingPairs is the number of (query, key) pairs in a sliding layer of
// window w for t new tokens after c cached: Σ_{p=c+1}^{c+t} min(p, w).
func slidingPairs(t, c, w float64) float64 {
	lo, hi := c+1, c+t
	if hi <= w {
		return t * (lo + hi) / 2
	}
	if lo > w {
		return t * w
	}
	// lo..w grow, w+1..hi are capped.
	return (w-lo+1)*(lo+w)/2 + (hi-w)*w
}
