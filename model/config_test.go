package model

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadConfig(t *testing.T) {
	for _, p := range []string{"../samples/models/llama-3.1-8b", "../samples/models/llama-3.1-8b/config.json"} {
		m, err := LoadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		if m.Name != "llama-3.1-8b" || m.ModelType != "llama" || m.Params() != 8_030_261_248 {
			t.Errorf("LoadConfig(%s) = %+v", p, m)
		}
	}
	if _, err := LoadConfig("testdata/no-such-model"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLLMByNameUnknown(t *testing.T) {
	_, err := LLMByName(samples, "llama-4")
	if err == nil || !strings.Contains(err.Error(), "valid: deepseek-coder-v2-instruct-fp8, deepseek-v2, deepseek-v2-lite, deepseek-v3, gpt-oss-20b, granite-3.3-8b, granite-3.3-8b-instruct, llama-3-8b, llama-3.1-405b, llama-3.1-70b, llama-3.1-8b, llama-3.3-70b, qwen3-30b-a3b-instruct-2507, qwen3-32b, yi-1.5-34b)") {
		t.Errorf("err = %v, want the list of names", err)
	}
	for _, bad := range []string{"../etc", "a/b", ""} {
		if _, err := LLMByName(samples, bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	// No num_key_value_heads (multi-head attention), no head_dim, no
	// dtype (served in 16 bits), tied embeddings.
	m, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":2048,"num_hidden_layers":2,
		"num_attention_heads":16,"intermediate_size":5632,"vocab_size":32000,"tie_word_embeddings":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.NumKVHeads != 16 || m.HeadDim != 128 || m.WeightBytes != 2 || m.DType != "bfloat16" || !m.TieWordEmbeddings {
		t.Errorf("%+v", m)
	}
	// Qwen2 has q, k, v biases without a config key; Qwen3 has q/k norms
	// and an explicit head_dim.
	q2, err := ParseConfig([]byte(`{"model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,
		"num_attention_heads":14,"num_key_value_heads":2,"intermediate_size":4864,"vocab_size":151936,
		"tie_word_embeddings":true,"torch_dtype":"bfloat16","sliding_window":32768,"use_sliding_window":false}`))
	if err != nil {
		t.Fatal(err)
	}
	// Qwen2.5-0.5B (model card: 0.49B). By hand: embedding 151936·896 =
	// 136,134,656 (tied); per layer q,o 2·896² + k,v 2·896·128 + biases
	// 896+2·128 + MLP 3·896·4864 + norms 2·896 = 14,912,384; ×24 layers
	// = 357,897,216; + final norm 896 → 494,032,768.
	if !q2.AttentionBias || q2.OutputBias || q2.Params() != 494_032_768 {
		t.Errorf("qwen2: bias %v/%v, params %d", q2.AttentionBias, q2.OutputBias, q2.Params())
	}
	q3, err := ParseConfig([]byte(`{"model_type":"qwen3","hidden_size":1024,"num_hidden_layers":28,
		"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"intermediate_size":3072,
		"vocab_size":151936,"tie_word_embeddings":true,"attention_bias":false,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3-0.6B (model card: 0.6B, 0.44B without embeddings). By hand:
	// embedding 151936·1024 = 155,582,464 (tied); per layer q,o
	// 2·1024·2048 + k,v 2·1024·1024 + MLP 3·1024·3072 + norms 2·1024 +
	// q/k norms 2·128 = 15,730,944; ×28 = 440,466,432; + 1024 →
	// 596,049,920.
	if !q3.QKNorm || q3.HeadDim != 128 || q3.Params() != 596_049_920 {
		t.Errorf("qwen3: %+v params %d", q3, q3.Params())
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\n\"hidden_size\": 4096,\n\"num_hidden_layers\": 32\n}", "config.json:1: num_attention_heads: missing"},
		{"{\n\"hidden_size\": 4096,\n\"num_hidden_layers\": -1\n}", "config.json:3: num_hidden_layers: -1 out of range"},
		{"{\n\"hidden_size\": \"big\"\n}", "config.json:2: hidden_size: cannot use JSON string as int64"},
		{"{\n\"hidden_size\": 4096,\n,}", "config.json:3: invalid character ','"},
		{llamaWith(`"num_local_experts": 8`), "config.json:1: num_experts_per_tok: missing (needed with num_local_experts)"},
		{llamaWith(`"quantization_config": {"quant_method": "bitsandbytes"}`), "config.json:2: quantization_config: quant_method \"bitsandbytes\" is not supported"},
		{llamaWith(`"kv_lora_rank": 512`), "config.json:1: qk_nope_head_dim: missing (needed with kv_lora_rank)"},
		{llamaWith(`"layer_types": ["full_attention"]`), "config.json:2: layer_types: 1 entries for 2 layers"},
		{llamaWith(`"layer_types": ["full_attention", "linear_attention"]`), "config.json:2: layer_types: layer 1: unknown layer type \"linear_attention\""},
		{llamaWith(`"layer_types": ["sliding_attention", "full_attention"]`), "config.json:1: sliding_window: missing, but layer 0 is sliding_attention"},
		{llamaWith(`"num_local_experts": 8, "num_experts_per_tok": 9`), "config.json:2: num_experts_per_tok: 9 out of range (1..8)"},
		{llamaWith(`"sliding_window": 4096.5`), "config.json:2: sliding_window: 4096.5 is not a token count"},
		{"{\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,\n\"num_key_value_heads\":3,\"intermediate_size\":8,\"vocab_size\":8}", "config.json:2: num_key_value_heads: 3 does not divide"},
		{llamaWith(`"torch_dtype": "int3"`), "config.json:2: torch_dtype: unknown dtype \"int3\""},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// llamaWith returns a valid small Llama config with extra on line 2.
func llamaWith(extra string) string {
	return "{\n" + extra + `,
"model_type":"llama","hidden_size":4096,"num_hidden_layers":2,"num_attention_heads":32,
"num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256}`
}

func TestLoadConfigErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte("{\n\"hidden_size\": 0\n}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(p)
	if err == nil || err.Error() != p+":2: hidden_size: 0 out of range (1..1048576)" {
		t.Errorf("err = %v", err)
	}
	_, err = LLMByName(fstest.MapFS{"m/config.json": {Data: []byte("{}")}}, "m")
	if err == nil || !strings.HasPrefix(err.Error(), "m/config.json:1: hidden_size: missing") {
		t.Errorf("LLMByName err = %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, name := range configNames(samples) {
		data, err := fs.ReadFile(samples, name+"/config.json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(llamaWith(`"head_dim": 64`)))
	hw, _ := HardwareByName("h100")
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseConfig(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Line < 1 {
				t.Fatalf("error %v is not a ConfigError with a line", err)
			}
			return
		}
		if m.Params() <= 0 || m.KVBytesPerToken() <= 0 || m.FLOPsPerToken(0) <= 0 {
			t.Fatalf("accepted config with params %d, KV %d", m.Params(), m.KVBytesPerToken())
		}
		d, err := NewDeployment(hw, m, 1)
		if err != nil {
			t.Fatal(err)
		}
		st := d.StepTime(&Batch{Prefill: []PrefillChunk{{Tokens: 100, Context: 10}}, Decode: []int64{5}})
		if st <= 0 || st == math.MaxInt64 {
			t.Fatalf("step time %v", st)
		}
	})
}
