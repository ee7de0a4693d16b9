package model

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"testing"
)

// Published facts about the shipped shapes. Where a model card rounds, the
// test checks the rounding; the exact counts come from summing the tensor
// shapes of the architecture by hand (comments) or are the checkpoint's.
func TestShippedShapesPublished(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params int64   // exact, from the architecture
		card   float64 // the model card's total, in billions
		// active parameters per token without the input embedding (a
		// gather), as DeepSeek and OpenAI count them; 0 for dense models.
		activeNoEmb float64
		kv          int64 // KV bytes per token, all layers, bf16
	}{
		// Meta's Llama 3.1 405B: 405,853,388,800 in the HF checkpoint index.
		{"llama-3.1-405b", 405_853_388_800, 405.85, 0, 2 * 126 * 8 * 128 * 2},
		// Llama 3.3 70B is the 3.1 70B architecture.
		{"llama-3.3-70b", 70_553_706_496, 70.55, 0, 327_680},
		// Qwen3-32B card: 32.8B, 31.2B non-embedding.
		{"qwen3-32b", 32_762_123_264, 32.76, 0, 2 * 64 * 8 * 128 * 2},
		// DeepSeek-V2 paper: V2-Lite 15.7B total, 2.4B activated. MLA KV:
		// 27 layers · (512 latent + 64 rope) · 2 B.
		{"deepseek-v2-lite", 15_706_484_224, 15.71, 2.45, 27 * 576 * 2},
		// DeepSeek-V2 paper (arXiv:2405.04434): 236B total, 21B activated
		// per token. Per layer MLA: q_a 5120·1536 + q_b 1536·128·192 +
		// kv_a 5120·576 + kv_b 512·128·256 + o 128·128·5120 =
		// 149,225,472, + norms 1536 + 512 + 2·5120. MoE: 160+2 experts of
		// 3·5120·1536 and a 5120·160 router in 59 of 60 layers; the first
		// has a 3·5120·12288 dense MLP. Embedding and LM head 102400·5120.
		{"deepseek-v2", 235_741_434_880, 235.74, 20.85, 60 * 576 * 2},
		// DeepSeek-V3 README_WEIGHTS: 671B main model, 36.6B activated
		// (including the 0.9B output head, not the embedding).
		// Per layer MLA: q_a 7168·1536 + q_b 1536·128·192 + kv_a
		// 7168·576 + kv_b 512·128·256 + o 128·128·7168 = 187,105,280,
		// + norms 1536 + 512 + 2·7168. MoE: 256+1 experts of 3·7168·2048
		// and a 7168·256 router with 256 correction biases, in 58 of 61
		// layers; the first 3 have a 3·7168·18432 dense MLP.
		{"deepseek-v3", 671_026_419_200, 671.03, 36.63, 61 * 576 * 2},
		// gpt-oss model card (arXiv:2508.10925, Table 1): 20.91B total,
		// 3.61B active. KV: 24 layers · 2·8·64·2 B; half of them slide
		// over 128 tokens.
		{"gpt-oss-20b", 20_914_757_184, 20.91, 3.61, 24 * 2 * 8 * 64 * 2},
		// granite-3.3-8b: 8,170,864,640 in the checkpoint; Opal's estimate
		// (opal-notes §1) is this without the final norm, 8,170,860,544.
		{"granite-3.3-8b-instruct", 8_170_864_640, 8.17, 0, 163_840},
		// Meta's Llama 3 model card: 8B (the Llama 3 paper's Table 3 gives
		// the 8B's shapes, which Llama 3.1 kept): the 3.1 8B's count.
		{"llama-3-8b", 8_030_261_248, 8.03, 0, 2 * 32 * 8 * 128 * 2},
		// Yi-1.5-34B model card: 34.4B. Per layer: q and o 2·7168², k
		// and v 2·7168·1024, MLP 3·7168·20480, two norms of 7168; ×60,
		// + embedding and LM head 2·64000·7168 and the final norm.
		{"yi-1.5-34b", 34_388_917_248, 34.39, 0, 2 * 60 * 8 * 128 * 2},
	} {
		m := loadSample(t, tc.name)
		if got := m.Params(); got != tc.params {
			t.Errorf("%s: Params = %d, want %d", tc.name, got, tc.params)
		}
		if got := float64(m.Params()) / 1e9; math.Abs(got-tc.card) > 0.005 {
			t.Errorf("%s: %.3fB parameters, card says %.2fB", tc.name, got, tc.card)
		}
		if tc.activeNoEmb > 0 {
			got := float64(m.ActiveParams()-m.EmbeddingParams()) / 1e9
			if math.Abs(got-tc.activeNoEmb) > 0.005 {
				t.Errorf("%s: %.3fB active without embedding, card says %.2fB", tc.name, got, tc.activeNoEmb)
			}
		} else if m.ActiveParams() != m.Params() {
			t.Errorf("%s: dense model with ActiveParams %d != Params %d", tc.name, m.ActiveParams(), m.Params())
		}
		if got := m.KVBytesPerToken(); got != tc.kv {
			t.Errorf("%s: KVBytesPerToken = %d, want %d", tc.name, got, tc.kv)
		}
	}
}

// Two MoE models that are not shipped, from their published configs:
// Mixtral-8x7B (46.7B total, 12.9B active per Mistral's announcement,
// both counting the embedding) and Qwen3-30B-A3B (30.5B total, 3.3B
// active per its card).
func TestMoEActiveParams(t *testing.T) {
	mixtral, err := ParseConfig([]byte(`{"model_type":"mixtral","hidden_size":4096,"num_hidden_layers":32,
		"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"vocab_size":32000,
		"num_local_experts":8,"num_experts_per_tok":2,"sliding_window":null,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Per layer: attention 41,943,040 + 8 experts of 176,160,768 + router
	// 32,768 + norms 8,192; ×32, + embeddings 2·131,072,000 + 4,096.
	if mixtral.Params() != 46_702_792_704 || mixtral.ActiveParams() != 12_879_925_248 {
		t.Errorf("mixtral: params %d, active %d", mixtral.Params(), mixtral.ActiveParams())
	}
	qwen, err := ParseConfig([]byte(`{"model_type":"qwen3_moe","hidden_size":2048,"num_hidden_layers":48,
		"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"intermediate_size":6144,
		"moe_intermediate_size":768,"num_experts":128,"num_experts_per_tok":8,"decoder_sparse_step":1,
		"mlp_only_layers":[],"vocab_size":151936,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(qwen.Params()) / 1e9; math.Abs(got-30.53) > 0.01 {
		t.Errorf("qwen3-30b-a3b: %.3fB params, card 30.5B", got)
	}
	if got := float64(qwen.ActiveParams()) / 1e9; math.Abs(got-3.35) > 0.01 {
		t.Errorf("qwen3-30b-a3b: %.3fB active, card 3.3B", got)
	}
}

func TestQuantizedWeightBytes(t *testing.T) {
	// gpt-oss-20b: experts in mxfp4 (4.25 bits), the rest bf16: the
	// checkpoint is 13.8 GB on the hub.
	oss := loadSample(t, "gpt-oss-20b")
	if oss.Quantization != "mxfp4" || oss.ExpertBytes != 4.25/8 || oss.LinearBytes != 2 || oss.FP8Compute {
		t.Errorf("gpt-oss quantization: %+v", oss)
	}
	if gb := float64(oss.ModelBytes()) / 1e9; gb < 13.7 || gb > 13.8 {
		t.Errorf("gpt-oss-20b weights %.2f GB, want ≈13.75", gb)
	}
	// DeepSeek-V3: fp8 matmuls, bf16 embeddings, head and norms.
	v3 := loadSample(t, "deepseek-v3")
	if !v3.FP8Compute || v3.LinearBytes != 1 || v3.WeightBytes != 2 || v3.KVBytes != 2 {
		t.Errorf("deepseek-v3 dtypes: %+v", v3)
	}
	want := v3.Params() + 2*v3.EmbeddingParams() + (61*2+1)*7168 + 1536*61 + 512*61 + 58*256*(7168+1)
	if got := v3.ModelBytes(); got != want {
		t.Errorf("deepseek-v3 ModelBytes = %d, want %d", got, want)
	}
	// --kv-cache-dtype fp8 halves the KV.
	l, err := loadSample(t, "llama-3.1-8b").WithKVCacheDType("fp8")
	if err != nil || l.KVBytesPerToken() != 65_536 {
		t.Errorf("fp8 KV: %d, %v", l.KVBytesPerToken(), err)
	}
	if _, err := l.WithKVCacheDType("int2"); err == nil {
		t.Error("kv dtype int2 accepted")
	}
}

func TestSlidingWindowShapes(t *testing.T) {
	oss := loadSample(t, "gpt-oss-20b")
	if oss.SlidingWindow != 128 || oss.numSlidingLayers() != 12 || !oss.LayerSliding[0] || oss.LayerSliding[1] {
		t.Fatalf("gpt-oss layers: window %d, sliding %v", oss.SlidingWindow, oss.LayerSliding)
	}
	// 1,000 tokens: full layers hold all, sliding ones 128.
	if got, want := oss.KVBytesForContext(1000), int64(1000*24_576+128*24_576); got != want {
		t.Errorf("KVBytesForContext(1000) = %d, want %d", got, want)
	}
	if got, want := oss.KVBytesForContext(100), int64(100*49_152); got != want {
		t.Errorf("KVBytesForContext(100) = %d, want %d", got, want)
	}
	// Attention FLOPs stop growing with context in sliding layers:
	// d/dctx = 12 full layers · 4·64·64.
	if d := oss.FLOPsPerToken(5001) - oss.FLOPsPerToken(5000); d != 12*4*64*64 {
		t.Errorf("FLOPs per extra context token = %.0f, want %d", d, 12*4*64*64)
	}
	// Mistral-style: a window on every layer.
	mis, err := ParseConfig([]byte(llamaWith(`"sliding_window": 4096`)))
	if err != nil || mis.numSlidingLayers() != 2 {
		t.Errorf("mistral-style window: %v, %d sliding", err, mis.numSlidingLayers())
	}
	// Qwen2 with use_sliding_window and max_window_layers 1: layer 1 slides.
	q, err := ParseConfig([]byte(llamaWith(`"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 1`)))
	if err != nil || q.LayerSliding[0] || !q.LayerSliding[1] {
		t.Errorf("max_window_layers: %v, %v", err, q.LayerSliding)
	}
}

func TestSlidingPairs(t *testing.T) {
	// Brute force against the closed form.
	for _, tc := range [][3]float64{{10, 0, 4}, {3, 0, 8}, {5, 6, 8}, {7, 20, 8}, {1, 8, 8}, {16, 2, 8}} {
		t0, c, w := tc[0], tc[1], tc[2]
		var want float64
		for p := c + 1; p <= c+t0; p++ {
			want += min(p, w)
		}
		if got := slidingPairs(t0, c, w); got != want {
			t.Errorf("slidingPairs(%v, %v, %v) = %v, want %v", t0, c, w, got, want)
		}
	}
}

// DeepSeek-V2's paper (arXiv:2405.04434) gives 236B parameters and 21B
// activated per token, rounded to the billion; the FP8 checkpoint of the
// DataCrunch run's first launch line has the same shapes in one byte per
// matmul weight.
func TestDeepSeekV2Published(t *testing.T) {
	bf16 := loadSample(t, "deepseek-v2")
	if got := math.Round(float64(bf16.Params()) / 1e9); got != 236 {
		t.Errorf("deepseek-v2: %.0fB parameters, paper says 236B", got)
	}
	for _, active := range []int64{bf16.ActiveParams(), bf16.ActiveParams() - bf16.EmbeddingParams()} {
		if got := math.Round(float64(active) / 1e9); got != 21 {
			t.Errorf("deepseek-v2: %.0fB activated, paper says 21B", got)
		}
	}
	fp8 := loadSample(t, "deepseek-coder-v2-instruct-fp8")
	if fp8.Params() != bf16.Params() || fp8.KVBytesPerToken() != bf16.KVBytesPerToken() {
		t.Errorf("fp8 checkpoint: %d parameters, %d KV bytes; bf16 %d, %d", fp8.Params(), fp8.KVBytesPerToken(), bf16.Params(), bf16.KVBytesPerToken())
	}
	if !fp8.FP8Compute || fp8.LinearBytes != 1 || fp8.ExpertBytes != 1 || bf16.FP8Compute || bf16.WeightBytes != 2 {
		t.Errorf("dtypes: fp8 %+v; bf16 %+v", fp8, bf16)
	}
	// Embedding and LM head stay 16-bit: 2 · 102400 · 5120 · 2 bytes, the
	// rest one byte a parameter (norms and routers at 2).
	emb := 2 * bf16.EmbeddingParams()
	if got, want := bf16.ModelBytes()-fp8.ModelBytes(), bf16.Params()-emb-smallParams(bf16); got != want {
		t.Errorf("bf16 − fp8 weight bytes = %d, want %d (one byte less per matmul weight)", got, want)
	}
}

// smallParams is what layerCounts keeps at the model dtype besides the
// embeddings: norms, routers, the final norm.
func smallParams(m LLM) int64 { return m.layerCounts().small + m.HiddenSize }

// Qwen3-30B-A3B-Instruct-2507's model card: 30.5B parameters in total,
// 29.9B without the embedding and LM head, 3.3B activated (Qwen gives
// one decimal, cut rather than rounded: 3.35B by the shapes, with the
// embedding and head, as Qwen counts). 48 layers of 32 Q and 4 KV heads
// of 128 with q/k norms; 128 experts of 768, top 8, in every layer.
func TestQwen3MoEPublished(t *testing.T) {
	m := loadSample(t, "qwen3-30b-a3b-instruct-2507")
	if !m.QKNorm || m.NumExperts != 128 || m.ExpertsPerToken != 8 || m.MaxPositionEmbeddings != 262_144 {
		t.Fatalf("shapes: %+v", m)
	}
	// Per layer: q 2048·4096, k and v 2·2048·512, o 4096·2048, q/k norms
	// 2·128, router 2048·128, 128 experts of 3·2048·768, two norms of
	// 2048; ×48, + embedding and LM head 2·151936·2048 and the final norm.
	const want = 30_532_122_624
	if got := m.Params(); got != want {
		t.Errorf("Params = %d, want %d", got, want)
	}
	if got := math.Round(float64(m.Params())/1e8) / 10; got != 30.5 {
		t.Errorf("%.1fB parameters, card says 30.5B", got)
	}
	if got := math.Round(float64(m.Params()-2*m.EmbeddingParams())/1e8) / 10; got != 29.9 {
		t.Errorf("%.1fB without embedding and head, card says 29.9B", got)
	}
	if got := math.Floor(float64(m.ActiveParams())/1e8) / 10; got != 3.3 {
		t.Errorf("%.1fB activated, card says 3.3B", got)
	}
	// KV: 48 layers · 2 · 4 heads · 128 · 2 bytes.
	if got := m.KVBytesPerToken(); got != 48*2*4*128*2 {
		t.Errorf("KVBytesPerToken = %d", got)
	}
}

// Llama 3 and Llama 3.1 8B have the same shapes; Llama 3 was trained to
// 8,192 positions with plain RoPE, where 3.1 scales RoPE (llama3, ×8) to
// 131,072 (Llama 3 model card: context length 8k; the Llama 3 paper).
func TestLlama3Versus31(t *testing.T) {
	l3, l31 := loadSample(t, "llama-3-8b"), loadSample(t, "llama-3.1-8b")
	if l3.MaxPositionEmbeddings != 8192 || l31.MaxPositionEmbeddings != 131_072 {
		t.Errorf("context: llama-3-8b %d, llama-3.1-8b %d", l3.MaxPositionEmbeddings, l31.MaxPositionEmbeddings)
	}
	// The RoPE scaling is not a shape the roofline reads: it is checked
	// in the files themselves.
	for name, want := range map[string]string{"llama-3-8b": "null", "llama-3.1-8b": `"llama3"`} {
		raw, err := fs.ReadFile(samples, name+"/config.json")
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			RopeScaling json.RawMessage `json:"rope_scaling"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		var rs struct {
			RopeType string `json:"rope_type"`
		}
		got := string(c.RopeScaling)
		if got != "null" && json.Unmarshal(c.RopeScaling, &rs) == nil {
			got = strconv.Quote(rs.RopeType)
		}
		if got != want {
			t.Errorf("%s: rope_scaling %s, want %s", name, got, want)
		}
	}
	a, b := l3, l31
	a.MaxPositionEmbeddings, b.MaxPositionEmbeddings = 0, 0
	a.Name, b.Name = "", ""
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("shapes differ beyond the context:\n%+v\n%+v", a, b)
	}
}
