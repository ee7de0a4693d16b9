package model

import (
	"math"
	"strings"
	"testing"
)

// Llama-3.3-70B on 4×H200 at SGLang's TP4 default 0.85: 0.85 × 140.4 GiB
// (no CUDA total or start-up memory is known for the H200) less 32.9 GiB
// of weights, the 32 MiB rotary cache (bf16 at 0.4.0.post1) and 2.6 MiB
// of allocator rounding per GPU,
// over 80 KiB of KV per token per rank (80 layers × 2 KV heads × 128 × 2
// × 2 bytes): 1.13 million tokens.
func TestSGLangKVCacheTokens(t *testing.T) {
	hw, err := HardwareByName("h200")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(hw, loadSample(t, "llama-3.3-70b"), 4)
	if err != nil {
		t.Fatal(err)
	}
	frac := SGLangMemFractionStatic(4)
	n, err := d.SGLangKVCacheTokens(frac)
	if err != nil {
		t.Fatal(err)
	}
	mem := d.Hardware.MemBytes
	// The allocator's rounding: the embedding and LM head (501 MiB) to 502
	// MiB each, the 161 norm vectors of 16 KiB in two 2 MiB segments.
	rounding := int64(2<<20 + 4<<20 - 161*16<<10)
	want := (mem - int64(float64(mem)*(1-frac)) - d.WeightBytesPerRank() - 131072*128*2 - rounding) / d.KVBytesPerTokenPerRank()
	if frac != 0.85 || d.KVBytesPerTokenPerRank() != 80<<10 || n != want || n < 1_100_000 || n > 1_160_000 {
		t.Errorf("frac %v, %d KV bytes per token, %d tokens (want %d)", frac, d.KVBytesPerTokenPerRank(), n, want)
	}
	if _, err := d.SGLangKVCacheTokens(0.1); err == nil {
		t.Error("weights above the allowed memory: no error")
	}
}

// SGLang's pool formula reproduces the "#tokens" of two SGLang start-up
// logs from the free memory they print (to 0.01 GB, GiB in fact): the free
// memory before loading is "avail mem" at "Load weight end" plus its "mem
// usage". Within the printing's rounding (0.01 GiB over a token's bytes).
//   - QwQ-32B, 4 × L4, TP4, v0.4.3.post4, mem_fraction_static 0.85:
//     "Load weight begin. avail mem=21.63 GB", "Load weight end. ...
//     avail mem=6.09 GB, mem usage=15.54 GB", "KV Cache is allocated.
//     #tokens: 46611" (the start sequence a public guide to SGLang on
//     Amazon ECS prints, g6.12xlarge); 64 layers × 2 KV heads a rank ×
//     128 × 2 × 2 bytes.
//   - Qwen3-14B, TP4, mem_fraction_static 0.8: "avail mem=16.00 GB, mem
//     usage=7.08 GB", "#tokens: 298447" (a public project's launch log);
//     40 layers × 2 KV heads a rank × 128 × 2 × 2 bytes.
//
// Both were found by their text in public repositories (the search
// tool's index of GitHub), which the index did not name.
func TestSGLangPoolFormulaLog(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name                 string
		after, usage, frac   float64
		perToken, wantTokens int64
	}{
		{"QwQ-32B 4×L4", 6.09, 15.54, 0.85, 64 * 2 * 128 * 2 * 2, 46611},
		{"Qwen3-14B TP4", 16.00, 7.08, 0.8, 40 * 2 * 128 * 2 * 2, 298447},
	} {
		before := int64((c.after + c.usage) * gib)
		got := sglangPoolTokens(before, int64(c.usage*gib), c.frac, c.perToken, 1)
		if tol := 0.01 * gib / float64(c.perToken); math.Abs(float64(got-c.wantTokens)) > tol {
			t.Errorf("%s: %d tokens, the log %d (tolerance %.0f)", c.name, got, c.wantTokens, tol)
		}
	}
	if got := sglangPoolTokens(10*gib, 9*gib, 0.85, 1<<10, 1); got != 0 {
		t.Errorf("weights over the fraction: %d tokens", got)
	}
	if got := sglangPoolTokens(10*gib, 1*gib, 0.5, 1<<20, 64); got != 4*1024/64*64 || got%64 != 0 {
		t.Errorf("4 GiB of 1 MiB tokens in 64-token pages: %d", got)
	}
}

// What SGLang's log reports loading allocated ("Load weight end. ... mem
// usage"), the parameters, the rotary cache and the caching allocator's
// rounding, within the log's 0.01 GiB: Qwen3-14B at TP4 7.08 GB (the log
// of TestSGLangPoolFormulaLog; v0.5.x assumed, Qwen3 came with v0.4.6)
// and QwQ-32B at TP4 on v0.4.3.post4 15.54 GB (the same; its
// context_len=131072 is max_position_embeddings).
func TestSGLangLoadedLog(t *testing.T) {
	const gib = 1 << 30
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	qwen3, err := LoadConfig("../deploy/testdata/qwen3-14b/config.json")
	if err != nil {
		t.Fatal(err)
	}
	qwq, err := ParseConfig([]byte(`{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120,
		"intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
		"vocab_size": 152064, "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		llm     LLM
		version string
		logged  float64
	}{
		{qwen3, "0.5.2", 7.08},
		{qwq, "0.4.3.post4", 15.54},
	} {
		d, err := NewDeployment(hw, c.llm, 4)
		if err != nil {
			t.Fatal(err)
		}
		m, err := d.SGLangMemory(0.8, c.version, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(m.Weights+m.RotaryCache+m.Rounding) / gib; math.Abs(got-c.logged) > 0.01 || len(m.Caveats) != 1 {
			t.Errorf("%s: %.3f GiB loaded (%s), the log %.2f", c.llm.ModelType, got, m, c.logged)
		}
	}
}

// Qwen3-14B on 2 × A10 at SGLang v0.5.2's default 0.867: the memory free
// before loading is the A10's CUDA total (22.07 GiB) less what the process
// holds before loading (0.35 GiB), not the 22.49 GiB the driver prints;
// loading allocates the weights and the rotary cache in float32 (40,960
// positions × 128 × 4 bytes); the pool is in whole 64-token pages; no
// caveat. At v0.4.0.post1 the rotary cache is in bf16.
func TestSGLangMemoryA10(t *testing.T) {
	hw, err := HardwareByName("a10")
	if err != nil {
		t.Fatal(err)
	}
	llm, err := LoadConfig("../deploy/testdata/qwen3-14b/config.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(hw, llm, 2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.SGLangMemory(0.867, "0.5.2", 64)
	if err != nil {
		t.Fatal(err)
	}
	free := int64(2207)<<30/100 - (int64(37)<<30/100 - int64(2424)<<20/100)
	// Rounding: per layer q/k/v (35 MiB), output (25 MiB) and down (85
	// MiB) projections rounded up to 2 MiB, 3 MiB; the embedding and the
	// LM head (741.875 MiB) 0.125 MiB each; the small tensors (norms of
	// 10 KiB and of 256 bytes) one 2 MiB segment less their 850 KiB.
	rounding := int64(40*3<<20 + 2*(1<<17) + 2<<20 - (40*(2*5120*2+2*256) + 5120*2))
	rest := free - int64(float64(free)*(1-0.867)) - d.WeightBytesPerRank() - 40960*128*4 - rounding
	perToken := int64(40 * 4 * 128 * 2 * 2)
	if m.FreeBeforeLoad != free || m.RotaryCache != 40960*128*4 || m.Rounding != rounding || m.KV != rest || m.Tokens != rest/perToken/64*64 || len(m.Caveats) != 0 ||
		d.KVBytesPerTokenPerRank() != perToken {
		t.Errorf("%+v; want %d free, %d bytes, %d tokens", m, free, rest, rest/perToken/64*64)
	}
	if s := m.String(); s != "21.72 GiB free before loading (22.07 CUDA total − 0.35 process) × 0.867 − 13.75 weights − 0.02 rotary cache − 0.12 allocator rounding = 4.94 GiB" {
		t.Errorf("String: %s", s)
	}
	if old, _ := d.SGLangMemory(0.867, "0.4.0.post1", 64); old.RotaryCache != 40960*128*2 {
		t.Errorf("v0.4.0.post1 rotary cache %d bytes, want bf16's", old.RotaryCache)
	}
	if _, err := d.SGLangMemory(0.6, "0.5.2", 64); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("0.6 of 21.7 GiB under 13.8 GiB of weights: %v", err)
	}
	// A GPU without the two figures is taken as wholly free, and said so.
	hw.CUDAMemBytes, hw.ProcessBytes = 0, 0
	d.Hardware = hw
	u, err := d.SGLangMemory(0.867, "0.5.2", 64)
	if err != nil || u.FreeBeforeLoad != hw.MemBytes || len(u.Caveats) != 2 || u.Tokens <= m.Tokens {
		t.Errorf("unknown: %+v, %v", u, err)
	}
}

func TestSGLangOverlapByDefault(t *testing.T) {
	for v, want := range map[string]bool{"": true, "0.4.0.post1": true, "v0.5.2": true, "0.3.6.post2": false, "0.2.9": false, "1.0": true, "dev": true} {
		if got := SGLangOverlapByDefault(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
