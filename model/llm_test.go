package model

import (
	"os"
	"testing"
)

// samples is the shipped model-shape tree.
var samples = os.DirFS("../samples/models")

func loadSample(t testing.TB, name string) LLM {
	t.Helper()
	m, err := LLMByName(samples, name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLlama31Shapes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		params     int64
		kvPerToken int64
		flops0     float64
	}{
		// 8B: embedding 128256·4096 = 525,336,576, the same again for the
		// untied LM head; per layer q 4096² + k,v 2·4096·1024 + o 4096² =
		// 41,943,040, MLP 3·4096·14336 = 176,160,768, norms 2·4096: 218,112,000;
		// 32 layers = 6,979,584,000; + final norm 4096 → 8,030,261,248.
		// KV: 2·32 layers·8 heads·128·2 B = 131,072.
		// FLOPs/token at context 0: 2·(32·218,103,808 + 525,336,576) +
		// 4·32·32·128·1 = 15,009,316,864 + 524,288 = 15,009,841,152.
		{"llama-3.1-8b", 8_030_261_248, 131_072, 15_009_841_152},
		// 70B: embedding 128256·8192 = 1,050,673,152 (×2, untied); per
		// layer 2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192 = 855,654,400;
		// ×80 = 68,452,352,000; + 8192 → 70,553,706,496.
		// KV: 2·80·8·128·2 = 327,680.
		// FLOPs/token: 2·(80·855,638,016 + 1,050,673,152) + 4·80·64·128.
		{"llama-3.1-70b", 70_553_706_496, 327_680, 2*(80*855_638_016+1_050_673_152) + 4*80*64*128},
	} {
		m := loadSample(t, tc.name)
		if got := m.Params(); got != tc.params {
			t.Errorf("%s: Params = %d, want %d", tc.name, got, tc.params)
		}
		if got := m.ActiveParams(); got != tc.params {
			t.Errorf("%s: ActiveParams = %d, want %d (dense)", tc.name, got, tc.params)
		}
		if got := m.KVBytesPerToken(); got != tc.kvPerToken {
			t.Errorf("%s: KVBytesPerToken = %d, want %d", tc.name, got, tc.kvPerToken)
		}
		if got := m.FLOPsPerToken(0); got != tc.flops0 {
			t.Errorf("%s: FLOPsPerToken(0) = %.0f, want %.0f", tc.name, got, tc.flops0)
		}
		if m.HeadDim != 128 || m.DType != "bfloat16" || m.WeightBytes != 2 || m.MaxPositionEmbeddings != 131072 {
			t.Errorf("%s: %+v", tc.name, m)
		}
	}
}

func TestFLOPsPerTokenGrowsWithContext(t *testing.T) {
	m := loadSample(t, "llama-3.1-8b")
	// Each extra context token adds one QKᵀ and one PV product per head
	// and layer: 4·32·32·128 = 524,288 FLOPs.
	if d := m.FLOPsPerToken(1001) - m.FLOPsPerToken(1000); d != 524_288 {
		t.Errorf("FLOPs per extra context token = %.0f, want 524288", d)
	}
}

func TestTiedEmbeddingsAndBiases(t *testing.T) {
	base := loadSample(t, "llama-3.1-8b")
	tied := base
	tied.TieWordEmbeddings = true
	if d := base.Params() - tied.Params(); d != 128256*4096 {
		t.Errorf("tying saves %d params, want %d", d, 128256*4096)
	}
	b := base
	b.AttentionBias, b.OutputBias = true, true
	// q bias 4096 + k,v 2·1024 + o 4096 per layer.
	if d := b.Params() - base.Params(); d != 32*(4096+2048+4096) {
		t.Errorf("attention bias adds %d params, want %d", d, 32*(4096+2048+4096))
	}
}
