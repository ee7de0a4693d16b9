package model

import (
	"math"
	"testing"
	"time"
)

// tinyMLA is a two-layer MLA model with experts, small enough to price
// by hand: hidden 64, 2 heads (q 8+4, v 8), latent 16+4, the first layer
// dense (32), the second 4 routed experts of 16 (top-2) and one shared,
// vocab 100, untied, bf16.
//
// Per layer the attention has q 64·2·12 = 1536, kv_a 64·20 = 1280, kv_b
// 16·2·16 = 512 and o 2·8·64 = 1024 matmul weights: 4,352, and 16
// latent-norm plus 128 layer-norm weights. The dense MLP is 3·64·32 =
// 6,144, the shared expert 3·64·16 = 3,072, each routed expert 3,072,
// the router 64·4 = 256.
func tinyMLA(t *testing.T) LLM {
	t.Helper()
	m, err := ParseConfig([]byte(`{"model_type":"deepseek_v2","hidden_size":64,"num_hidden_layers":2,
		"num_attention_heads":2,"num_key_value_heads":2,"intermediate_size":32,"vocab_size":100,
		"kv_lora_rank":16,"q_lora_rank":null,"qk_nope_head_dim":8,"qk_rope_head_dim":4,"v_head_dim":8,
		"n_routed_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":16,"n_shared_experts":1,
		"first_k_dense_replace":1,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tinyDP is tinyMLA on two GPUs of round figures (1 TFLOP/s, 1 GB/s of
// memory, 100 MB/s of link) as two DP-attention ranks, at efficiencies of
// one half, a 1 µs overhead and a 1 µs latency per collective.
func tinyDP(t *testing.T) *Deployment {
	t.Helper()
	hw := Hardware{Name: "round", PeakFLOPS: 1e12, MemBandwidth: 1e9, MemBytes: 1 << 40, LinkBandwidth: 1e8}
	d, err := NewParallelDeployment(hw, tinyMLA(t), Parallelism{TP: 2, DPAttention: true})
	if err != nil {
		t.Fatal(err)
	}
	d.MFU, d.BandwidthEfficiency, d.LinkEfficiency = 0.5, 0.5, 0.5
	d.StepOverhead, d.CollectiveLatency = time.Microsecond, time.Microsecond
	return d
}

// The prices below are worked by hand from the layout in dpattention.go.
//
// A rank's own part: 2·(2·4,352) = 17,408 FLOPs a token, the LM head
// 2·100·64 = 12,800 a sequence, attention 2 layers · 2·2·(8+4+8) = 160
// FLOPs a pair of a first prefill and 2 layers · 2·2·(2·16+4) = 288 of a
// decode (forward_absorb, over the latent); it reads the attention, the norms and the LM head,
// 2 B · (8,704 + (288 + 64 + 6,400)) = 30,912 B (the router is the
// shared part's), and 2 · 20 · 2 = 80 KV bytes a token.
//
// The shared part, per GPU: the dense MLP and shared expert split two
// ways, 2·9,216/2 = 9,216 FLOPs a token, the router replicated 2·256 =
// 512, the experts 2·2·3,072/2 = 6,144: 15,872 FLOPs a token; it reads
// 2 B · 9,216/2 + 2 B · 256 = 9,728 B, and of the experts' 2 B · 4 ·
// 3,072/2 = 12,288 B the share 1 − (1/2)^T for T tokens. Per layer an
// all-gather receives 128 B per token of the largest rank and a ring
// all-reduce sends 2·(1/2)·128 B per token of the group: 256 B a token
// each over 2 layers; 4 collectives.
func TestDPStepTimeByHand(t *testing.T) {
	d := tinyDP(t)
	prefill := &Batch{Prefill: []PrefillChunk{{Tokens: 3}}} // 3 tokens, 1 sequence, 6 pairs
	decode := &Batch{Decode: []int64{4, 6}}                 // 2 tokens, 2 sequences, context 10, 12 pairs
	// Rank 0 (prefill): compute (17,408·3 + 12,800 + 160·6) / 1e12 / 0.5
	// = 131.968 ns; memory (30,912 + 80·3) / 1e9 / 0.5 = 62,304 ns.
	// Rank 1 (decode): compute (17,408·2 + 12,800·2 + 288·12) / 1e12 /
	// 0.5 = 127.744 ns; memory (30,912 + 80·12) / 1e9 / 0.5 = 63,744 ns,
	// the slower rank.
	for _, tc := range []struct {
		name  string
		ranks []*Batch
		want  time.Duration
	}{
		// T = 5, the largest rank 3: shared compute 15,872·5 / 1e12 / 0.5
		// = 158.72 ns, memory (9,728 + 12,288·(1 − 1/32)) / 1e9 / 0.5 =
		// 43,264 ns; comm (256·3 + 256·5) / 1e8 / 0.5 = 40,960 ns; 4 µs
		// of collectives, 1 µs of overhead.
		{"prefill and decode", []*Batch{prefill, decode}, 63744 + 43264 + 40960 + 4000 + 1000},
		// Rank 0 idle: T = 2; shared memory (9,728 + 12,288·3/4) / 1e9 /
		// 0.5 = 37,888 ns, comm (256·2 + 256·2) / 1e8 / 0.5 = 20,480 ns.
		{"one rank idle", []*Batch{nil, decode}, 63744 + 37888 + 20480 + 4000 + 1000},
		// Both decode: T = 4; memory (9,728 + 12,288·15/16) / 1e9 / 0.5 =
		// 42,496 ns, comm (256·2 + 256·4) / 1e8 / 0.5 = 30,720 ns.
		{"both decode", []*Batch{decode, decode}, 63744 + 42496 + 30720 + 4000 + 1000},
		{"all idle", []*Batch{nil, {}}, 0},
	} {
		got, err := d.DPStepTime(tc.ranks)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: DPStepTime = %d ns, want %d", tc.name, got.Nanoseconds(), tc.want.Nanoseconds())
		}
	}
	// StepTime and the decode-sum form price the group with every rank
	// running the batch given.
	want := time.Duration(63744 + 42496 + 30720 + 4000 + 1000)
	if got := d.StepTime(decode); got != want {
		t.Errorf("StepTime(decode) = %d ns, want %d", got.Nanoseconds(), want.Nanoseconds())
	}
	if got, ok := d.DecodeStepTime(2, 10); !ok || got != want {
		t.Errorf("DecodeStepTime(2, 10) = %d ns, %v; want %d", got.Nanoseconds(), ok, want.Nanoseconds())
	}
	// Weights per GPU: the attention, norms, embedding and LM head
	// replicated, 2 B · (8,704 + 288 + 256 + 64 + 6,400 + 6,400) = 44,224
	// B, the MLPs 9,216 B and the experts 12,288 B.
	if got := d.WeightBytesPerRank(); got != 44224+9216+12288 {
		t.Errorf("WeightBytesPerRank = %d, want %d", got, 44224+9216+12288)
	}
}

// Under DP attention the slowest rank sets the step and an idle rank adds
// only its share of the group's tokens; without it, StepTime prices the
// TP layout as before.
func TestDPStepTimeSlowestRank(t *testing.T) {
	d := tinyDP(t)
	long := &Batch{Prefill: []PrefillChunk{{Tokens: 4000, Context: 0}}}
	short := &Batch{Decode: []int64{1}}
	both, _ := d.DPStepTime([]*Batch{long, short})
	alone, _ := d.DPStepTime([]*Batch{long, nil})
	if both < alone {
		t.Errorf("a decoding second rank made the step cheaper: %v < %v", both, alone)
	}
	swapped, _ := d.DPStepTime([]*Batch{short, long})
	if swapped != both {
		t.Errorf("rank order changed the price: %v != %v", swapped, both)
	}
	if _, err := d.DPStepTime([]*Batch{long}); err == nil {
		t.Error("one batch for two ranks: no error")
	}
	if _, err := NewParallelDeployment(d.Hardware, loadSample(t, "llama-3.1-8b"), Parallelism{TP: 2, DPAttention: true}); err == nil {
		t.Error("dp attention on a model without MLA: no error")
	}
}

// StepTime, DecodeStepTime and DPStepTime agree: every rank running b is
// DPStepTime of R copies of b, on DeepSeek-V2 at TP8 with fitted-looking
// coefficients, over random batches.
func TestDPStepTimeForms(t *testing.T) {
	hw, err := HardwareByName("h200")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewParallelDeployment(hw, loadSample(t, "deepseek-v2"), Parallelism{TP: 8, DPAttention: true})
	if err != nil {
		t.Fatal(err)
	}
	d.MFU, d.BandwidthEfficiency, d.KVBandwidthEfficiency, d.SerialFraction = 0.46, 0.56, 0.2, 0.07
	d.CUDAGraphMaxBS, d.TorchCompileMaxBS, d.EagerLayerLaunch, d.UncompiledLayer = 96, 32, 90*time.Microsecond, 20*time.Microsecond
	rng := uint64(1)
	next := func(n uint64) int64 {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int64(rng>>33) % int64(n)
	}
	for i := range 200 {
		var b Batch
		for range next(3) {
			b.Prefill = append(b.Prefill, PrefillChunk{Tokens: 1 + next(4096), Context: next(8192)})
		}
		var ctx int64
		for range 1 + next(300) {
			c := next(4096)
			b.Decode = append(b.Decode, c)
			ctx += c
		}
		ranks := make([]*Batch, 8)
		for r := range ranks {
			ranks[r] = &b
		}
		dp, err := d.DPStepTime(ranks)
		if err != nil {
			t.Fatal(err)
		}
		if st := d.StepTime(&b); st != dp {
			t.Fatalf("batch %d: StepTime %v, DPStepTime of 8 copies %v", i, st, dp)
		}
		if len(b.Prefill) == 0 {
			if ds, ok := d.DecodeStepTime(len(b.Decode), ctx); !ok || ds != dp {
				t.Fatalf("batch %d: DecodeStepTime %v %v, StepTime %v", i, ds, ok, dp)
			}
		}
	}
}

// The attention runs in forward_normal's form only for a batch of first
// prefills (no prefix anywhere); decodes, later chunks and mixed batches
// run forward_absorb's, over the latent (v0.4.0.post1 deepseek_v2.py). On
// tinyMLA a pair costs 2 layers · 2·2·(8+4+8) = 160 FLOPs in the first
// form and 2 layers · 2·2·(2·16+4) = 288 in the second, at 1 TFLOP/s.
func TestDPAttentionMLAForms(t *testing.T) {
	d := tinyDP(t)
	for _, tc := range []struct {
		name string
		b    Batch
		want float64 // AttentionSec
	}{
		{"first prefill", Batch{Prefill: []PrefillChunk{{Tokens: 3}}}, 160 * 6 / 1e12},                         // 3·(0 + 2) pairs
		{"later chunk", Batch{Prefill: []PrefillChunk{{Tokens: 3}, {Tokens: 3, Context: 2}}}, 288 * 18 / 1e12}, // 6 + 3·(2 + 2)
		{"decode", Batch{Decode: []int64{4, 6}}, 288 * 12 / 1e12},                                              // (4 + 1) + (6 + 1)
		{"mixed", Batch{Prefill: []PrefillChunk{{Tokens: 3}}, Decode: []int64{4, 6}}, 288 * 18 / 1e12},
	} {
		if got := d.Terms(&tc.b).AttentionSec; math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("%s: AttentionSec %g, want %g", tc.name, got, tc.want)
		}
	}
}
