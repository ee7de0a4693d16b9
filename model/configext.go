package model

import (
	"fmt"
	"slices"
)

// failFunc builds a ConfigError for a field, as parseConfig's fail does.
type failFunc func(field, format string, args ...any) (LLM, error)

func (f failFunc) err(field, format string, args ...any) error {
	_, err := f(field, format, args...)
	return err
}

// hfQuant is the part of quantization_config that decides weight widths.
type hfQuant struct {
	QuantMethod         string   `json:"quant_method"`
	Bits                *int64   `json:"bits"`
	ModulesToNotConvert []string `json:"modules_to_not_convert"`
}

// positive checks an optional size key: absent gives def, present must be
// in 1..limit.
func positive(fail failFunc, field string, v *int64, def, limit int64) (int64, error) {
	if v == nil {
		return def, nil
	}
	if *v <= 0 || *v > limit {
		return 0, fail.err(field, "%d out of range (1..%d)", *v, limit)
	}
	return *v, nil
}

// parseAttention reads MLA and sliding-window keys.
func parseAttention(c *hfConfig, m *LLM, fail failFunc) error {
	if c.KVLoraRank != nil && *c.KVLoraRank != 0 {
		var err error
		if m.KVLoraRank, err = positive(fail, "kv_lora_rank", c.KVLoraRank, 0, maxDim); err != nil {
			return err
		}
		if c.QLoraRank != nil && *c.QLoraRank != 0 { // null or absent: no query compression (V2-Lite)
			if m.QLoraRank, err = positive(fail, "q_lora_rank", c.QLoraRank, 0, maxDim); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			v    *int64
			dst  *int64
		}{
			{"qk_nope_head_dim", c.QKNopeHeadDim, &m.QKNopeHeadDim},
			{"qk_rope_head_dim", c.QKRopeHeadDim, &m.QKRopeHeadDim},
			{"v_head_dim", c.VHeadDim, &m.VHeadDim},
		} {
			if f.v == nil {
				return fail.err(f.name, "missing (needed with kv_lora_rank)")
			}
			if *f.dst, err = positive(fail, f.name, f.v, 0, maxDim); err != nil {
				return err
			}
		}
		m.HeadDim = m.VHeadDim
		if m.NumHeads*(m.QKNopeHeadDim+m.QKRopeHeadDim+m.VHeadDim) > 4*maxDim {
			return fail.err("num_attention_heads", "%d heads give an attention width out of range", m.NumHeads)
		}
	}
	if m.ModelType == "gpt_oss" {
		// gpt-oss: biases on q, k, v and o, and a learned sink per head.
		m.AttentionBias, m.OutputBias, m.AttentionSinks = true, true, true
	}

	window := int64(0)
	if c.SlidingWindow != nil && *c.SlidingWindow > 0 {
		w := *c.SlidingWindow
		if w != float64(int64(w)) || w > 1<<40 {
			return fail.err("sliding_window", "%v is not a token count", w)
		}
		window = int64(w)
	}
	m.SlidingWindow = window
	switch {
	case len(c.LayerTypes) > 0:
		if int64(len(c.LayerTypes)) != m.NumLayers {
			return fail.err("layer_types", "%d entries for %d layers", len(c.LayerTypes), m.NumLayers)
		}
		m.LayerSliding = make([]bool, m.NumLayers)
		for i, t := range c.LayerTypes {
			switch t {
			case "full_attention":
			case "sliding_attention":
				if window == 0 {
					return fail.err("sliding_window", "missing, but layer %d is sliding_attention", i)
				}
				m.LayerSliding[i] = true
			default:
				return fail.err("layer_types", "layer %d: unknown layer type %q (want full_attention or sliding_attention)", i, t)
			}
		}
		if !slices.Contains(m.LayerSliding, true) {
			m.LayerSliding, m.SlidingWindow = nil, 0
		}
	case window > 0 && (c.UseSlidingWindow == nil || *c.UseSlidingWindow):
		// Mistral: every layer slides. Qwen2/3 with use_sliding_window:
		// layers from max_window_layers on slide (HF Qwen2Attention).
		from := int64(0)
		if c.UseSlidingWindow != nil && c.MaxWindowLayers != nil {
			from = min(max(*c.MaxWindowLayers, 0), m.NumLayers)
		}
		m.LayerSliding = make([]bool, m.NumLayers)
		for i := from; i < m.NumLayers; i++ {
			m.LayerSliding[i] = true
		}
		if from == m.NumLayers {
			m.LayerSliding, m.SlidingWindow = nil, 0
		}
	default:
		m.SlidingWindow = 0
	}
	return nil
}

// parseMoE reads the expert keys of Mixtral, Qwen2/3-MoE, DeepSeek and
// gpt-oss.
func parseMoE(c *hfConfig, m *LLM, fail failFunc) error {
	field, n := "", (*int64)(nil)
	switch {
	case c.NRoutedExperts != nil:
		field, n = "n_routed_experts", c.NRoutedExperts
	case c.NumLocalExperts != nil:
		field, n = "num_local_experts", c.NumLocalExperts
	case c.NumExperts != nil:
		field, n = "num_experts", c.NumExperts
	}
	if n == nil || *n == 0 {
		return nil
	}
	var err error
	if m.NumExperts, err = positive(fail, field, n, 0, 1<<16); err != nil {
		return err
	}
	k := c.NumExpertsPerTok
	if k == nil {
		k = c.ExpertsPerToken
	}
	if k == nil {
		return fail.err("num_experts_per_tok", "missing (needed with %s)", field)
	}
	if m.ExpertsPerToken, err = positive(fail, "num_experts_per_tok", k, 0, m.NumExperts); err != nil {
		return err
	}
	// Mixtral and gpt-oss size experts by intermediate_size; Qwen MoE
	// and DeepSeek by moe_intermediate_size.
	if m.MoEIntermediateSize, err = positive(fail, "moe_intermediate_size", c.MoEIntermediateSize, m.IntermediateSize, maxDim); err != nil {
		return err
	}
	if c.NSharedExperts != nil && *c.NSharedExperts > 0 {
		if m.NumSharedExperts, err = positive(fail, "n_shared_experts", c.NSharedExperts, 0, 1<<10); err != nil {
			return err
		}
		m.SharedIntermediate = m.MoEIntermediateSize
	}
	if c.SharedExpertIntermed != nil && *c.SharedExpertIntermed > 0 {
		return fail.err("shared_expert_intermediate_size", "gated shared experts (Qwen2-MoE) are not supported yet")
	}
	if v := c.FirstKDenseReplace; v != nil {
		if *v < 0 || *v > m.NumLayers {
			return fail.err("first_k_dense_replace", "%d out of range (0..%d)", *v, m.NumLayers)
		}
		m.FirstDenseLayers = *v
	}
	if c.MoELayerFreq != nil && *c.MoELayerFreq != 1 {
		return fail.err("moe_layer_freq", "%d: only every layer (1) is supported", *c.MoELayerFreq)
	}
	if c.DecoderSparseStep != nil && *c.DecoderSparseStep != 1 {
		return fail.err("decoder_sparse_step", "%d: only every layer (1) is supported", *c.DecoderSparseStep)
	}
	if len(c.MLPOnlyLayers) > 0 {
		return fail.err("mlp_only_layers", "dense layers among MoE layers are not supported yet")
	}
	switch {
	case m.ModelType == "gpt_oss":
		m.ExpertBias, m.RouterBias = true, m.NumExperts
	case c.TopKMethod == "noaux_tc":
		// DeepSeek-V3's e_score_correction_bias, one per expert.
		m.RouterBias = m.NumExperts
	}
	if float64(m.numMoELayers())*float64(m.NumExperts)*float64(m.expertParams()) > maxParams {
		return fail.err(field, "experts give more than %d parameters", int64(maxParams))
	}
	return nil
}

// parseQuantization reads quantization_config. torch_dtype then names
// the activations and the unquantized tensors, not the quantized ones.
func parseQuantization(c *hfConfig, m *LLM, fail failFunc) error {
	q := c.Quantization
	if q == nil {
		return nil
	}
	m.Quantization = q.QuantMethod
	switch q.QuantMethod {
	case "fp8", "fbgemm_fp8":
		// Block- or channel-scaled e4m3 matmuls; embeddings, LM head and
		// norms stay 16-bit. vLLM runs them W8A8 on fp8 tensor cores.
		m.LinearBytes, m.ExpertBytes, m.FP8Compute = 1, 1, true
	case "mxfp4":
		// OCP MX: 4-bit values plus one 8-bit scale per 32, on the MoE
		// experts only (vLLM's Mxfp4Config quantizes FusedMoE layers;
		// gpt-oss lists self_attn, router, embeddings and LM head in
		// modules_to_not_convert).
		if !m.IsMoE() {
			return fail.err("quantization_config", "mxfp4 on a model without experts is not supported")
		}
		m.ExpertBytes = 4.25 / 8
	case "gptq", "awq":
		if q.Bits == nil || (*q.Bits != 4 && *q.Bits != 8) {
			return fail.err("quantization_config", "%s: bits must be 4 or 8", q.QuantMethod)
		}
		// Group scales (≈ 0.25 bit per weight at group 128) are left out.
		b := float64(*q.Bits) / 8
		m.LinearBytes, m.ExpertBytes = b, b
	case "":
		return fail.err("quantization_config", "quant_method missing")
	default:
		return fail.err("quantization_config", "quant_method %q is not supported (fp8, mxfp4, gptq, awq)", q.QuantMethod)
	}
	return nil
}

// WithKVCacheDType returns m with its KV cache stored as dtype, as vLLM's
// --kv-cache-dtype sets it ("auto" keeps the model's).
func (m LLM) WithKVCacheDType(dtype string) (LLM, error) {
	switch dtype {
	case "", "auto":
		return m, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2":
		m.KVBytes = 1
	case "bfloat16", "float16", "half":
		m.KVBytes = 2
	default:
		return m, fmt.Errorf("kv cache dtype %q: want auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16 or float16", dtype)
	}
	return m, nil
}
