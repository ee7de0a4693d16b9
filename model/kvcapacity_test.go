package model

import (
	"strings"
	"testing"
)

// Llama-3.1-8B on one H100 at gpu_memory_utilization 0.9, profiled at
// 8,192 tokens and 256 sequences:
//
//	budget  = 79.18 GiB · 0.9 = 85,018,877,624 · 0.9 = 76,516,989,861 B (floored;
//	          CUDA's total, not the driver's 81,559 MiB)
//	weights = 8,030,261,248 · 2                      = 16,060,522,496 B
//	rotary  = 131,072 positions · 128 · 2            =     33,554,432 B
//	hidden  = 8,192 · 4,096 · 2                      =     67,108,864 B
//	sampler = 256 · 128,256 · 38.33                  =  1,258,509,434 B (floored)
//	  (the forward pass's 8,192 · (2·4,096 + 3·14,336) · 2 = 838,860,800 B is less)
//	non-torch = 0.13 GiB                             =    139,586,437 B
//	free    = 58,957,708,198 B / 131,072 B per token = 449,811 tokens
//	→ 449,808 in whole 16-token blocks.
func TestKVCacheTokensLlama8BH100(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	got, err := d.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	if got != 449_808 {
		t.Errorf("KVCacheTokens(0.9) = %d, want 449808", got)
	}
}

func TestKVCacheTokensTP(t *testing.T) {
	// 70B on 4 H100s: each rank holds 2 of the 8 KV heads, so a token
	// takes 327,680/4 = 81,920 B per rank; weights per rank are
	// ((70,553,706,496 − 161·8192 norms)/4 + 161·8192)·2 = 35,278,831,616 B.
	// The rotary cache and sampler are as at TP 1, the hidden states
	// 8,192 · 8,192 · 2 = 134,217,728 B, non-torch memory TP 2's measured
	// 0.55 GiB = 590,558,003 B:
	// free = 76,516,989,861 − 35,278,831,616 − 33,554,432 − 134,217,728
	//        − 1,258,509,434 − 590,558,003
	//      = 39,221,318,648 B → 478,775 tokens → 478,768 in blocks.
	d := newH100(t, "llama-3.1-70b", 4)
	if got := d.WeightBytesPerRank(); got != 35_278_831_616 {
		t.Errorf("WeightBytesPerRank = %d", got)
	}
	got, err := d.KVCacheTokens(0.9)
	if err != nil || got != 478_768 {
		t.Errorf("KVCacheTokens(0.9) = %d, %v; want 478768", got, err)
	}
	// TP 16 > 8 KV heads: heads are replicated, one per rank.
	hw, _ := HardwareByName("h100")
	d16, err := NewDeployment(hw, d.LLM, 16)
	if err != nil {
		t.Fatal(err)
	}
	if d16.KVHeadsPerRank() != 1 || d16.KVBytesPerTokenPerRank() != 2*80*128*2 {
		t.Errorf("TP 16: %d KV heads, %d B per token per rank", d16.KVHeadsPerRank(), d16.KVBytesPerTokenPerRank())
	}
}

func TestKVCacheTokensDoesNotFit(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 1)
	_, err := d.KVCacheTokens(0.9)
	if err == nil || !strings.Contains(err.Error(), "does not fit") || !strings.Contains(err.Error(), "llama-3.1-70b") {
		t.Errorf("70B on one H100: err = %v", err)
	}
	for _, u := range []float64{0, -0.5, 1.01} {
		if _, err := newH100(t, "llama-3.1-8b", 1).KVCacheTokens(u); err == nil {
			t.Errorf("utilization %v accepted", u)
		}
	}
}
