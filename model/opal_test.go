package model

import (
	"math"
	"testing"
	"time"
)

// opal-notes.md §1: granite-3.3-8b on H100 (989.5 TFLOPS, 3.3 TB/s),
// a = 4, b = 24.
func granite(t *testing.T) *OpalStep {
	t.Helper()
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	hw.MemBandwidth = 3.3e12 // Opal's H100 figure, not the datasheet's 3.35
	o, err := NewOpalStep(loadSample(t, "granite-3.3-8b-instruct"), hw, 1)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestOpalFormReproducesNotes(t *testing.T) {
	o := granite(t)
	if o.Params != 8_170_860_544 || o.KVBytesPerToken != 163_840 {
		t.Fatalf("P = %d, KV = %d; notes say 8,170,860,544 and 163,840", o.Params, o.KVBytesPerToken)
	}
	for _, tc := range []struct {
		n, p int64
		want float64 // seconds, as printed in the notes
		tol  float64
	}{
		{8192, 0, 0.17779, 5e-6},
		{16384, 8192, 0.26669, 5e-6},
		{12000, 0, 0.2907, 5e-5},
		{120000, 0, 11.49, 5e-3},
		{100, 0, 1.634e-3, 5e-7},
	} {
		if got := o.PrefillSec(tc.n, tc.p); math.Abs(got-tc.want) > tc.tol {
			t.Errorf("t(%d, %d) = %.7f s, notes say %v", tc.n, tc.p, got, tc.want)
		}
	}
	// By hand: 40·(4·4096·8192·8193 + 24·4096²·8192)/989.5e12
	// = 40·(1,099,645,845,504 + 3,298,534,883,328)/989.5e12
	// = 175,927,229,153,280/989.5e12 = 0.177794067 s.
	if got := o.PrefillSec(8192, 0); math.Abs(got-0.177794067) > 1e-9 {
		t.Errorf("t(8192, 0) = %.9f, hand 0.177794067", got)
	}
	// Decode weights term: 2·8,170,860,544 / 3.3e12 = 4.952037 ms.
	if got := o.DecodeSec(nil); math.Abs(got-4.952037e-3) > 1e-9 {
		t.Errorf("decode base = %.9f s, notes say 4.952 ms", got)
	}
	// Notes Q2: a 20,000-token prompt charged as three full 8192 chunks:
	// t(8192,0) + t(16384,8192) + t(24576,16384) + 1 ms + 200 ns =
	// 0.801065362 s, so the three chunks sum to 0.800065162 s.
	sum := o.PrefillSec(8192, 0) + o.PrefillSec(16384, 8192) + o.PrefillSec(24576, 16384)
	if math.Abs(sum-0.800065162) > 1e-9 {
		t.Errorf("three chunks = %.9f s, notes imply 0.800065162", sum)
	}
}

func TestOpalStepMaxOfParts(t *testing.T) {
	o := granite(t)
	pre := o.PrefillSec(8192, 0)
	dec := o.DecodeSec([]int64{1000, 2000})
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 8192}, {Tokens: 100, Context: 50}}, Decode: []int64{1000, 2000}}
	if got, want := o.StepTime(b), time.Duration(math.Round(max(pre, dec)*1e9)); got != want {
		t.Errorf("step = %v, want max(%v, %v)", got, pre, dec)
	}
	// A prefill-only step still pays the decode weights term.
	small := &Batch{Prefill: []PrefillChunk{{Tokens: 10}}}
	if got := o.StepTime(small); got != time.Duration(math.Round(o.DecodeSec(nil)*1e9)) {
		t.Errorf("tiny prefill step = %v, want the decode base 4.952 ms", got)
	}
	if o.StepTime(&Batch{}) != 0 {
		t.Error("empty batch not free")
	}
	if _, err := NewOpalStep(loadSample(t, "deepseek-v3"), Hardware{Name: "x", PeakFLOPS: 1, MemBandwidth: 1, MemBytes: 1}, 1); err == nil {
		t.Error("Opal form accepted an MoE/MLA model")
	}
}
