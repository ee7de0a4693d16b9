package model

import (
	"encoding/csv"
	"math"
	"os"
	"strconv"
	"testing"
)

// llmdRow is one row of testdata/vllm_memory_llmd_h100.csv (its
// SOURCES.md gives the origin).
type llmdRow struct {
	model             string
	tp                int
	hidden, vocab     int64
	activation, nonTo float64 // GiB
}

func readLLMDTable(t *testing.T) []llmdRow {
	t.Helper()
	f, err := os.Open("testdata/vllm_memory_llmd_h100.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var rows []llmdRow
	for i, r := range recs[1:] {
		num := func(j int) float64 {
			v, err := strconv.ParseFloat(r[j], 64)
			if err != nil {
				t.Fatalf("line %d: %s: %v", i+2, recs[0][j], err)
			}
			return v
		}
		rows = append(rows, llmdRow{model: r[0], tp: int(num(1)), hidden: int64(num(2)), vocab: int64(num(3)), activation: num(5), nonTo: num(6)})
	}
	return rows
}

// TestSamplerBytesPerLogit refits SamplerBytesPerLogit from llm-d's
// published vLLM 0.11 measurements (8,192 batched tokens, 1,024
// sequences, bf16 hidden states): activation = tokens·hidden·2 +
// b·1,024·vocab by least squares in b, and checks that the constant is
// that fit and that every row is then within 1 %.
func TestSamplerBytesPerLogit(t *testing.T) {
	const gib = 1 << 30
	const tokens, seqs = 8192, 1024
	rows := readLLMDTable(t)
	var num, den float64
	for _, r := range rows {
		x := float64(seqs * r.vocab)
		num += (r.activation*gib - float64(tokens*r.hidden*2)) * x
		den += x * x
	}
	b := num / den
	if math.Abs(b-SamplerBytesPerLogit) > 0.005 {
		t.Errorf("least-squares bytes per logit %.4f, SamplerBytesPerLogit %v", b, SamplerBytesPerLogit)
	}
	for _, r := range rows {
		pred := (float64(tokens*r.hidden*2) + SamplerBytesPerLogit*seqs*float64(r.vocab)) / gib
		if e := pred/r.activation - 1; math.Abs(e) > 0.01 {
			t.Errorf("%s TP%d: activation %.3f GiB modelled, %.2f measured (%+.1f %%)", r.model, r.tp, pred, r.activation, 100*e)
		}
		want := float64(NonTorchBytesTP1) / gib
		if r.tp == 2 {
			want = float64(NonTorchBytesTP2) / gib
		}
		if math.Abs(want-r.nonTo) > 0.015 {
			t.Errorf("%s TP%d: non-torch %.2f GiB measured, %.2f used", r.model, r.tp, r.nonTo, want)
		}
	}
}

// TestVLLMMemoryLlama8BH100 checks the division of one H100 serving
// Llama-3.1-8B with the defaults llm-d's run had (8,192 tokens, 1,024
// sequences) against what that run measured: weights 14.99 GiB (the
// parameters and the rotary cache), activation 4.76 GiB, KV 51.38 GiB of
// the H100's 79.18 GiB at 0.9 (the preset's CUDA total, which vLLM
// multiplies, not the driver's 79.65 GiB).
func TestVLLMMemoryLlama8BH100(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	if got := d.Hardware.CUDATotal(); got != 7918<<30/100 {
		t.Fatalf("H100 CUDA total %d B, want the run's 79.18 GiB", got)
	}
	v, err := d.VLLMMemory(VLLMProfile{GPUMemoryUtilization: 0.9, MaxNumBatchedTokens: 8192, MaxNumSeqs: 1024, Version: "0.11.0"})
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	near := func(name string, got int64, want float64) {
		t.Helper()
		if g := float64(got) / gib; math.Abs(g-want) > 0.01*want {
			t.Errorf("%s: %.3f GiB, measured %.2f", name, g, want)
		}
	}
	near("weights + rotary cache", v.Weights+v.RotaryCache, 14.99)
	near("activation", v.Activation, 4.76)
	near("KV cache", v.KV, 51.38)
	if len(v.Caveats) != 0 {
		t.Errorf("caveats %q at TP1 on 0.11", v.Caveats)
	}
}

func TestVLLMMemoryCaveats(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	v, err := d.VLLMMemory(VLLMProfile{GPUMemoryUtilization: 0.9, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, Version: "v0.25.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Caveats) != 2 {
		t.Errorf("TP4 on 0.25.1: caveats %q, want the non-torch and the CUDA-graph ones", v.Caveats)
	}
	for _, bad := range []VLLMProfile{{GPUMemoryUtilization: 0.9}, {GPUMemoryUtilization: 1.5, MaxNumBatchedTokens: 1, MaxNumSeqs: 1}} {
		if _, err := d.VLLMMemory(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for v, want := range map[string]bool{"0.21.0": true, "v0.25.1": true, "1.0": true, "0.19.0": false, "0.11.2.dev358": false, "": false, "x": false} {
		if got := versionAtLeast(v, 0, 21); got != want {
			t.Errorf("versionAtLeast(%q, 0, 21) = %v", v, got)
		}
	}
}
