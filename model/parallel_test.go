package model

import (
	"testing"
	"time"
)

// toyMoE is a two-layer Mixtral-shaped model small enough to price by
// hand: hidden 1024, 8 heads of 128 (no GQA), 8 experts of width 2048,
// top-2, vocabulary 1000.
func toyMoE(t *testing.T) LLM {
	t.Helper()
	m, err := ParseConfig([]byte(`{"model_type":"mixtral","hidden_size":1024,"num_hidden_layers":2,
		"num_attention_heads":8,"intermediate_size":2048,"vocab_size":1000,"num_local_experts":8,
		"num_experts_per_tok":2,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func h100(t *testing.T) Hardware {
	t.Helper()
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

// Per layer: attention 4·1024² = 4,194,304; 8 experts of 3·1024·2048 =
// 6,291,456; router 8·1024; norms 2·1024. Two layers, two vocabulary
// tables of 1,024,000 and the final norm: 111,121,408.
//
// Bytes per rank at TP 2 (bf16): replicated norms and routers
// (2·(8192+2048) + 1024)·2 = 43,008; split attention and vocabulary
// (8,388,608 + 2·1,024,000)·2/2 = 10,436,608; experts 100,663,296·2/2
// = 100,663,296 → 111,142,912. With EP 8 over TP 2 × DP 4 the experts
// are split 8 ways: 25,165,824 → 35,645,440.
func TestMoEWeightsPerRank(t *testing.T) {
	m := toyMoE(t)
	if m.Params() != 111_121_408 || m.ActiveParams() != 111_121_408-2*6*6_291_456 {
		t.Fatalf("params %d, active %d", m.Params(), m.ActiveParams())
	}
	d, err := NewParallelDeployment(h100(t), m, Parallelism{TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WeightBytesPerRank(); got != 111_142_912 {
		t.Errorf("TP 2: %d B per rank, want 111,142,912", got)
	}
	ep, err := NewParallelDeployment(h100(t), m, Parallelism{TP: 2, DP: 4, EP: 8})
	if err != nil {
		t.Fatal(err)
	}
	if got := ep.WeightBytesPerRank(); got != 35_645_440 {
		t.Errorf("EP 8: %d B per rank, want 35,645,440", got)
	}
	for _, p := range []Parallelism{{TP: 2, EP: 4}, {TP: 2, DP: 8, EP: 16}, {TP: 1, PP: 3}} {
		if _, err := NewParallelDeployment(h100(t), m, p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := NewParallelDeployment(h100(t), loadSample(t, "llama-3.1-8b"), Parallelism{TP: 2, DP: 1, EP: 2}); err == nil {
		t.Error("EP on a dense model accepted")
	}
}

// One decode token over 1,000 cached tokens on one H100 reads the
// non-expert weights without the embedding (43,008 + (8,388,608 +
// 1,024,000)·2 = 18,868,224 B), the experts its top-2 pick: a quarter
// of 201,326,592 (1 − (6/8)¹ = 0.25) = 50,331,648 B, and KV 1001 ·
// 8,192 B = 8,200,192 B: 77,400,064 B / 2.68e12 B/s = 28,881 ns, plus
// the 300 µs overhead.
func TestMoEDecodeReadsPickedExperts(t *testing.T) {
	d, err := NewDeployment(h100(t), toyMoE(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.StepTime(&Batch{Decode: []int64{1000}}); got != 328_881*time.Nanosecond {
		t.Errorf("one decode = %d ns, want 328,881", got)
	}
	// 64 tokens touch (almost) every expert: 1 − 0.75⁶⁴ ≈ 1.
	many := &Batch{Decode: make([]int64, 64)}
	for i := range many.Decode {
		many.Decode[i] = 1000
	}
	bytes := 18_868_224 + 201_326_592*(1-pow(0.75, 64)) + 64*1001*8192.0
	want := time.Duration(bytes/2.68e12*1e9+0.5) + DefaultStepOverhead
	if got := d.StepTime(many); got < want-1 || got > want+1 {
		t.Errorf("64 decodes = %v, want %v", got, want)
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

// EP replaces the MoE layers' all-reduce by dispatch and combine
// all-to-alls. Per token, TP 2 × DP 4, EP 8: all-to-all 2 layers · 2
// (dispatch, combine) · top-2 · 1024·2 B · 7/8 = 14,336 B; one
// all-reduce per layer (attention) · 2 layers · 2·(1/2) · 2048 B =
// 4,096 B. 100 tokens: 1,843,200 B / (450e9 · 0.8) = 5,120 ns.
func TestExpertParallelComm(t *testing.T) {
	d, err := NewParallelDeployment(h100(t), toyMoE(t), Parallelism{TP: 2, DP: 4, EP: 8})
	if err != nil {
		t.Fatal(err)
	}
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 100}}}
	with := d.StepTime(b)
	d.Hardware.LinkBandwidth *= 1e9
	d.k = d.consts()
	if got := with - d.StepTime(b); got < 5119 || got > 5121 {
		t.Errorf("EP comm = %d ns, want 5,120", got)
	}
}

// Pipeline parallelism: Llama-3.1-70B on TP 4 × PP 2. Each stage holds 40
// layers; a token's KV on a rank is 40 layers · 2 · 2 heads · 128 · 2 B
// = 40,960 B. A 1,024-token step adds one activation send of 1024 ·
// 8192 · 2 B = 16,777,216 B over 360 GB/s = 46,603 ns.
func TestPipelineParallel(t *testing.T) {
	m := loadSample(t, "llama-3.1-70b")
	d, err := NewParallelDeployment(h100(t), m, Parallelism{TP: 4, PP: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.KVBytesPerTokenPerRank(); got != 40_960 {
		t.Errorf("KV per token per rank = %d, want 40,960", got)
	}
	tp4, _ := NewDeployment(h100(t), m, 4)
	// Half the layers plus the larger end (one vocabulary table /4).
	vocab := int64(128256 * 8192 * 2 / 4)
	if got, want := d.WeightBytesPerRank(), (tp4.WeightBytesPerRank()-2*vocab)/2+vocab; got < want-1 || got > want+1 {
		t.Errorf("PP 2 weights per rank = %d, want %d", got, want)
	}
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 1024}}}
	if got := d.StepTime(b) - tp4.StepTime(b); got < 46_602 || got > 46_604 {
		t.Errorf("PP send = %d ns, want 46,603", got)
	}
}

// The MLA latent is replicated on every TP rank, not split.
func TestMLAKVReplicated(t *testing.T) {
	m := loadSample(t, "deepseek-v2-lite")
	d, err := NewDeployment(h100(t), m, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.KVBytesPerTokenPerRank(); got != 31_104 {
		t.Errorf("V2-Lite TP 2: %d KV B/token/rank, want 31,104", got)
	}
}

// fp8 matmuls run at the fp8 peak; attention and the LM head stay 16-bit.
// The 2,048-token Llama-3.1-8B prefill of TestStepTimeSinglePrefillByHand
// becomes 28,587,302,322,176/(1979e12·0.5) + (1,050,673,152 +
// 1,100,048,498,688)/(989.5e12·0.5) = 31,116,221 ns, + 300 µs.
func TestFP8ComputeAndAttentionMFU(t *testing.T) {
	m := loadSample(t, "llama-3.1-8b")
	m.FP8Compute = true
	d, err := NewDeployment(h100(t), m, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 2048}}}
	if got := d.StepTime(b); got != (31_116_221+300_000)*time.Nanosecond {
		t.Errorf("fp8 prefill = %d ns, want 31,416,221", got)
	}
	// AttentionMFU 0.25 doubles the attention term: + 2,223,443 ns.
	bf := newH100(t, "llama-3.1-8b", 1)
	base := bf.StepTime(b)
	bf.AttentionMFU = 0.25
	if got := bf.StepTime(b) - base; got < 2_223_442 || got > 2_223_444 {
		t.Errorf("attention MFU 0.25 adds %d ns, want 2,223,443", got)
	}
}

// In sliding layers a long context costs no more than the window.
func TestSlidingWindowStep(t *testing.T) {
	d, err := NewDeployment(h100(t), loadSample(t, "gpt-oss-20b"), 1)
	if err != nil {
		t.Fatal(err)
	}
	d.StepOverhead = 0
	// Memory-bound decode: growing the context by 10,000 tokens adds KV
	// reads of the 12 full layers only: 10,000 · 24,576 B / 2.68e12.
	a := d.StepTime(&Batch{Decode: []int64{20_000}})
	b := d.StepTime(&Batch{Decode: []int64{30_000}})
	if got := b - a; got < 91_701 || got > 91_703 {
		t.Errorf("10,000 more context = %d ns, want 91,702", got)
	}
}

func TestHardwareOverride(t *testing.T) {
	h, err := ResolveHardware("h100", &HardwareSpec{MemBandwidthTBps: 3.0, PCIeGBps: 50})
	if err != nil || h.MemBandwidth != 3e12 || h.PCIeBandwidth != 50e9 || h.PeakFLOPS != 989.5e12 {
		t.Errorf("override: %+v, %v", h, err)
	}
	c, err := ResolveHardware("custom", &HardwareSpec{PeakBF16TFLOPS: 100, MemMiB: 24576, MemBandwidthTBps: 1})
	if err != nil || c.PeakFLOPS != 100e12 || c.MemBytes != 24576<<20 || c.Name != "custom" {
		t.Errorf("custom: %+v, %v", c, err)
	}
	if _, err := ResolveHardware("custom", &HardwareSpec{PeakBF16TFLOPS: 100}); err == nil {
		t.Error("incomplete custom hardware accepted")
	}
	if _, err := ResolveHardware("h100", &HardwareSpec{LinkGBps: -1}); err == nil {
		t.Error("negative link accepted")
	}
	a8, err := HardwareByName("A800")
	if err != nil || a8.LinkBandwidth != 200e9 || a8.PeakFP8FLOPS != 0 {
		t.Errorf("a800: %+v, %v", a8, err)
	}
}

func BenchmarkStepTimeMoE(b *testing.B) {
	llm, err := LLMByName(samples, "deepseek-v3")
	if err != nil {
		b.Fatal(err)
	}
	hw, _ := HardwareByName("h200")
	d, err := NewParallelDeployment(hw, llm, Parallelism{TP: 8, DP: 2, EP: 16})
	if err != nil {
		b.Fatal(err)
	}
	batch := &Batch{Prefill: []PrefillChunk{{Tokens: 2048, Context: 512}}, Decode: make([]int64, 128)}
	for i := range batch.Decode {
		batch.Decode[i] = int64(100 * i)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.StepTime(batch)
	}
}
