package model

import (
	"strings"
	"testing"
)

// Llama-3.1-8B on one H100 at gpu_memory_utilization 0.9:
//
//	budget  = 81,559 MiB · 0.9 = 85,520,809,984 · 0.9 = 76,968,728,985 B (floored)
//	weights = 8,030,261,248 · 2                      = 16,060,522,496 B
//	reserve = 2 GiB                                  =  2,147,483,648 B
//	free    = 58,760,722,841 B / 131,072 B per token = 448,308 tokens
//	→ 448,304 in whole 16-token blocks.
func TestKVCacheTokensLlama8BH100(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	got, err := d.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	if got != 448_304 {
		t.Errorf("KVCacheTokens(0.9) = %d, want 448304", got)
	}
}

func TestKVCacheTokensTP(t *testing.T) {
	// 70B on 4 H100s: each rank holds 2 of the 8 KV heads, so a token
	// takes 327,680/4 = 81,920 B per rank; weights per rank are
	// ((70,553,706,496 − 161·8192 norms)/4 + 161·8192)·2 = 35,278,831,616 B.
	// free = 76,968,728,985 − 35,278,831,616 − 2,147,483,648
	//      = 39,542,413,721 B → 482,695 tokens → 482,688 in blocks.
	d := newH100(t, "llama-3.1-70b", 4)
	if got := d.WeightBytesPerRank(); got != 35_278_831_616 {
		t.Errorf("WeightBytesPerRank = %d", got)
	}
	got, err := d.KVCacheTokens(0.9)
	if err != nil || got != 482_688 {
		t.Errorf("KVCacheTokens(0.9) = %d, %v; want 482688", got, err)
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
