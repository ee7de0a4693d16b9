package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// A ConfigError reports a config.json that cannot describe a model we can
// price. Its text is "FILE:LINE: field: what is wrong"; Line is the line of
// the field's key, or 1 when the field is missing.
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// hfConfig is the subset of a Hugging Face config.json that shapes cost.
// Pointers tell a missing key from a zero.
type hfConfig struct {
	ModelType             string   `json:"model_type"`
	HiddenSize            *int64   `json:"hidden_size"`
	NumHiddenLayers       *int64   `json:"num_hidden_layers"`
	NumAttentionHeads     *int64   `json:"num_attention_heads"`
	NumKeyValueHeads      *int64   `json:"num_key_value_heads"`
	HeadDim               *int64   `json:"head_dim"`
	IntermediateSize      *int64   `json:"intermediate_size"`
	VocabSize             *int64   `json:"vocab_size"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`
	AttentionBias         *bool    `json:"attention_bias"`
	MLPBias               *bool    `json:"mlp_bias"`
	MaxPositionEmbeddings *int64   `json:"max_position_embeddings"`
	TorchDType            string   `json:"torch_dtype"`
	DType                 string   `json:"dtype"` // transformers ≥ 4.56 renamed torch_dtype
	SlidingWindow         *float64 `json:"sliding_window"`
	UseSlidingWindow      *bool    `json:"use_sliding_window"`

	MaxWindowLayers *int64   `json:"max_window_layers"`
	LayerTypes      []string `json:"layer_types"`

	// Mixture of experts: Mixtral and gpt-oss say num_local_experts, Qwen
	// MoE num_experts, DeepSeek n_routed_experts.
	NumLocalExperts      *int64  `json:"num_local_experts"`
	NumExperts           *int64  `json:"num_experts"`
	NRoutedExperts       *int64  `json:"n_routed_experts"`
	NumExpertsPerTok     *int64  `json:"num_experts_per_tok"`
	ExpertsPerToken      *int64  `json:"experts_per_token"` // gpt-oss
	MoEIntermediateSize  *int64  `json:"moe_intermediate_size"`
	NSharedExperts       *int64  `json:"n_shared_experts"`
	SharedExpertIntermed *int64  `json:"shared_expert_intermediate_size"`
	FirstKDenseReplace   *int64  `json:"first_k_dense_replace"`
	MoELayerFreq         *int64  `json:"moe_layer_freq"`
	DecoderSparseStep    *int64  `json:"decoder_sparse_step"`
	MLPOnlyLayers        []int64 `json:"mlp_only_layers"`
	TopKMethod           string  `json:"topk_method"`

	// Multi-head latent attention (DeepSeek-V2/V3).
	QLoraRank     *int64 `json:"q_lora_rank"`
	KVLoraRank    *int64 `json:"kv_lora_rank"`
	QKNopeHeadDim *int64 `json:"qk_nope_head_dim"`
	QKRopeHeadDim *int64 `json:"qk_rope_head_dim"`
	VHeadDim      *int64 `json:"v_head_dim"`

	Quantization *hfQuant `json:"quantization_config"`
}

// ParseConfig reads the shape of a dense GQA model from the bytes of a
// Hugging Face config.json. Errors name the file "config.json".
func ParseConfig(data []byte) (LLM, error) {
	return parseConfig("config.json", data)
}

// LoadConfig reads the config.json at path (a file, or a directory
// holding one). The LLM is named after the directory.
func LoadConfig(p string) (LLM, error) {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		p = filepath.Join(p, "config.json")
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return LLM{}, err
	}
	m, err := parseConfig(p, data)
	if err != nil {
		return LLM{}, err
	}
	m.Name = dirName(p)
	return m, nil
}

// LLMByName reads "<name>/config.json" from fsys, such as the embedded
// samples/models tree. An unknown name is an error that lists the names
// fsys has.
func LLMByName(fsys fs.FS, name string) (LLM, error) {
	file := path.Join(name, "config.json")
	if !fs.ValidPath(file) || strings.Contains(name, "/") {
		return LLM{}, fmt.Errorf("invalid model name %q", name)
	}
	data, err := fs.ReadFile(fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return LLM{}, fmt.Errorf("unknown model %q (valid: %s)", name, strings.Join(configNames(fsys), ", "))
	}
	if err != nil {
		return LLM{}, err
	}
	m, err := parseConfig(file, data)
	if err != nil {
		return LLM{}, err
	}
	m.Name = name
	return m, nil
}

// configNames lists the directories of fsys that hold a config.json, sorted.
func configNames(fsys fs.FS) []string {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, path.Join(e.Name(), "config.json")); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

func dirName(p string) string {
	return filepath.Base(filepath.Dir(p))
}

func parseConfig(file string, data []byte) (LLM, error) {
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return LLM{}, jsonError(file, data, err)
	}
	fail := func(field, format string, args ...any) (LLM, error) {
		return LLM{}, &ConfigError{File: file, Line: keyLine(data, field), Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	m := LLM{ModelType: c.ModelType}
	req := []struct {
		field string
		v     *int64
		dst   *int64
		limit int64
	}{
		{"hidden_size", c.HiddenSize, &m.HiddenSize, maxDim},
		{"num_hidden_layers", c.NumHiddenLayers, &m.NumLayers, maxLayers},
		{"num_attention_heads", c.NumAttentionHeads, &m.NumHeads, maxDim},
		{"intermediate_size", c.IntermediateSize, &m.IntermediateSize, maxDim},
		{"vocab_size", c.VocabSize, &m.VocabSize, maxVocab},
	}
	for _, r := range req {
		if r.v == nil {
			return fail(r.field, "missing")
		}
		if *r.v <= 0 || *r.v > r.limit {
			return fail(r.field, "%d out of range (1..%d)", *r.v, r.limit)
		}
		*r.dst = *r.v
	}
	// HF defaults: num_key_value_heads = num_attention_heads (no GQA),
	// head_dim = hidden_size / num_attention_heads.
	m.NumKVHeads = m.NumHeads
	if c.NumKeyValueHeads != nil {
		m.NumKVHeads = *c.NumKeyValueHeads
		if m.NumKVHeads <= 0 || m.NumKVHeads > m.NumHeads || m.NumHeads%m.NumKVHeads != 0 {
			return fail("num_key_value_heads", "%d does not divide num_attention_heads %d", m.NumKVHeads, m.NumHeads)
		}
	}
	if c.HeadDim != nil {
		m.HeadDim = *c.HeadDim
		if m.HeadDim <= 0 || m.HeadDim > maxDim {
			return fail("head_dim", "%d out of range (1..%d)", m.HeadDim, int64(maxDim))
		}
	} else {
		if m.HiddenSize%m.NumHeads != 0 {
			return fail("num_attention_heads", "%d does not divide hidden_size %d and head_dim is absent", m.NumHeads, m.HiddenSize)
		}
		m.HeadDim = m.HiddenSize / m.NumHeads
	}
	if m.NumHeads*m.HeadDim > maxDim {
		return fail("head_dim", "%d heads of %d give %d, out of range (1..%d)", m.NumHeads, m.HeadDim, m.NumHeads*m.HeadDim, int64(maxDim))
	}
	if c.MaxPositionEmbeddings != nil {
		if *c.MaxPositionEmbeddings <= 0 {
			return fail("max_position_embeddings", "%d is not positive", *c.MaxPositionEmbeddings)
		}
		m.MaxPositionEmbeddings = *c.MaxPositionEmbeddings
	}
	m.TieWordEmbeddings = c.TieWordEmbeddings != nil && *c.TieWordEmbeddings
	m.MLPBias = c.MLPBias != nil && *c.MLPBias
	switch {
	case c.AttentionBias != nil:
		// Llama's attention_bias puts a bias on q, k, v and o alike.
		m.AttentionBias, m.OutputBias = *c.AttentionBias, *c.AttentionBias
	case c.ModelType == "qwen2":
		// Qwen2 has q, k, v biases and no config key for them.
		m.AttentionBias = true
	}
	// Qwen3 and Qwen3-MoE put an RMSNorm on each head of q and k
	// (vLLM models/qwen3.py and qwen3_moe.py, Qwen3MoeAttention's q_norm and
	// k_norm); the config has no key for it.
	m.QKNorm = c.ModelType == "qwen3" || c.ModelType == "qwen3_moe"

	if err := parseAttention(&c, &m, fail); err != nil {
		return LLM{}, err
	}
	if err := parseMoE(&c, &m, fail); err != nil {
		return LLM{}, err
	}

	dtype, field := c.TorchDType, "torch_dtype"
	if dtype == "" {
		dtype, field = c.DType, "dtype"
	}
	n, serving, ok := dtypeBytes(dtype)
	if !ok {
		return fail(field, "unknown dtype %q", dtype)
	}
	m.DType, m.WeightBytes = serving, n
	// The KV cache is kept in the model dtype unless the deployment says
	// otherwise (vLLM kv_cache_dtype=auto); fp8 checkpoints keep a 16-bit
	// KV cache by default.
	m.KVBytes = n
	m.LinearBytes, m.ExpertBytes = float64(n), float64(n)
	if n == 1 {
		m.KVBytes = 2
		m.FP8Compute = true
	}
	if err := parseQuantization(&c, &m, fail); err != nil {
		return LLM{}, err
	}
	if m.Params() <= 0 || m.Params() > maxParams {
		return fail("hidden_size", "gives %d parameters, out of range", m.Params())
	}
	return m, nil
}

// These bound config values so that the products computed from them stay
// far from int64 overflow: a layer is at most ≈ 7·2^40 parameters, and
// all layers and the vocabulary tables below 2^58. The largest published
// models are orders of magnitude inside them.
const (
	maxDim    = 1 << 20
	maxLayers = 1 << 14
	maxVocab  = 1 << 24
	maxParams = 1 << 44
)

// dtypeBytes maps a config dtype to its serving width and name. As vLLM's
// dtype="auto" does, a float32 (or absent) checkpoint is served in 16 bits.
func dtypeBytes(s string) (n int64, name string, ok bool) {
	switch s {
	case "bfloat16":
		return 2, s, true
	case "float16", "half":
		return 2, "float16", true
	case "", "float32", "float":
		return 2, "bfloat16", true
	case "float8_e4m3fn", "float8_e5m2", "fp8":
		return 1, s, true
	}
	return 0, "", false
}

// jsonError converts an encoding/json error into a ConfigError at the line
// of the offending byte.
func jsonError(file string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &ConfigError{File: file, Line: lineAt(data, syn.Offset), Msg: syn.Error()}
	case errors.As(err, &typ):
		return &ConfigError{File: file, Line: lineAt(data, typ.Offset), Field: typ.Field,
			Msg: fmt.Sprintf("cannot use JSON %s as %s", typ.Value, typ.Type)}
	}
	return &ConfigError{File: file, Line: 1, Msg: err.Error()}
}

// keyLine returns the line of the first `"key":` in data, or 1.
func keyLine(data []byte, key string) int {
	pat := []byte(`"` + key + `"`)
	for off := 0; ; {
		i := bytes.Index(data[off:], pat)
		if i < 0 {
			return 1
		}
		j := off + i + len(pat)
		rest := bytes.TrimLeft(data[j:], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			return lineAt(data, int64(off+i))
		}
		off = j
	}
}

func lineAt(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	return 1 + bytes.Count(data[:off], []byte("\n"))
}
