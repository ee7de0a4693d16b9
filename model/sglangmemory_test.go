package model

import "testing"

// Llama-3.3-70B on 4×H200 at SGLang's TP4 default 0.85: 0.85 × 140.4 GiB
// less 32.9 GiB of weights per GPU, over 80 KiB of KV per token per rank
// (80 layers × 2 KV heads × 128 × 2 × 2 bytes): 1.13 million tokens.
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
	want := (int64(float64(d.Hardware.MemBytes)*frac) - d.WeightBytesPerRank()) / d.KVBytesPerTokenPerRank()
	if frac != 0.85 || d.KVBytesPerTokenPerRank() != 80<<10 || n != want || n < 1_100_000 || n > 1_160_000 {
		t.Errorf("frac %v, %d KV bytes per token, %d tokens (want %d)", frac, d.KVBytesPerTokenPerRank(), n, want)
	}
	if _, err := d.SGLangKVCacheTokens(0.1); err == nil {
		t.Error("weights above the allowed memory: no error")
	}
}

func TestSGLangOverlapByDefault(t *testing.T) {
	for v, want := range map[string]bool{"": true, "0.4.0.post1": true, "v0.5.2": true, "0.3.6.post2": false, "0.2.9": false, "1.0": true, "dev": true} {
		if got := SGLangOverlapByDefault(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
