package model

import (
	"testing"
	"time"
)

// tinyMoEDeployment is tinyMLA (dpattention_test.go) on two GPUs of round
// figures fast enough in memory and links (1 TFLOP/s, 1 TB/s, 1 TB/s)
// that a step of a thousand tokens is compute-bound, at efficiencies of
// one half, a 1 µs overhead and a 1 µs latency per collective, with the
// routed experts at ExpertMFU 0.1.
func tinyMoEDeployment(t *testing.T, dp bool) *Deployment {
	t.Helper()
	hw := Hardware{Name: "round", PeakFLOPS: 1e12, MemBandwidth: 1e12, MemBytes: 1 << 40, LinkBandwidth: 1e12}
	d, err := NewParallelDeployment(hw, tinyMLA(t), Parallelism{TP: 2, DPAttention: dp})
	if err != nil {
		t.Fatal(err)
	}
	d.MFU, d.BandwidthEfficiency, d.LinkEfficiency = 0.5, 0.5, 0.5
	d.StepOverhead, d.CollectiveLatency = time.Microsecond, time.Microsecond
	d.ExpertMFU = 0.1
	return d
}

// One 1,000-token prefill of tinyMLA at TP 2, by hand. Per GPU and token:
// the attention matmuls, dense MLP and shared expert 2·(8,704 + 6,144 +
// 3,072)/2 = 17,920 FLOPs and the router 2·256/2 = 256 (MFU's), the two
// routed experts a token picks 2·2·3,072/2 = 6,144 (ExpertMFU's); the LM
// head 2·100·64/2 = 6,400 a sequence; attention 160/2 = 80 FLOPs a
// (query, key) pair, 1,000·1,001/2 = 500,500 pairs.
//
//	compute = (18,176·1,000 + 6,400) / 0.5e12     =  36,364.8 ns
//	        + 6,144·1,000 / 0.1e12                =  61,440   ns
//	        + 80·500,500 / 0.5e12                 =  80,080   ns  → 177,884.8 ns
//
// Memory is under a microsecond (some 30 kB of weights and 80 kB of KV at
// 0.5 TB/s). Two all-reduces a layer, 4 in all, of 128 B a token, a ring
// of two sending all of it: 512,000 B / 0.5e12 = 1,024 ns, and 4 µs of
// collective latency. Step: round(177,884.8 + 1,024 + 4,000) + 1,000 =
// 183,909 ns; with ExpertMFU 0 (MFU's), the experts take 12,288 ns and
// the step 134,757 ns.
func TestExpertMFUByHand(t *testing.T) {
	d := tinyMoEDeployment(t, false)
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 1000}}}
	if got, want := d.StepTime(b), 183_909*time.Nanosecond; got != want {
		t.Errorf("StepTime = %d ns, want %d", got.Nanoseconds(), want.Nanoseconds())
	}
	tm := d.Terms(b)
	if got, want := tm.ExpertSec, 6_144_000/1e12; got != want {
		t.Errorf("ExpertSec = %g s, want %g", got, want)
	}
	d.ExpertMFU = 0
	if got, want := d.StepTime(b), 134_757*time.Nanosecond; got != want {
		t.Errorf("ExpertMFU 0: StepTime = %d ns, want %d", got.Nanoseconds(), want.Nanoseconds())
	}
	// ExpertMFU equal to MFU prices as 0 does (up to the last bit of the
	// split, hence within a nanosecond).
	d.ExpertMFU = d.MFU
	if got := d.StepTime(b); got < 134_756 || got > 134_758 {
		t.Errorf("ExpertMFU = MFU: StepTime = %d ns, want 134,757 ± 1", got.Nanoseconds())
	}
}

// Two DP-attention ranks each prefilling 1,000 tokens (tinyMLA, the
// layout of TestDPStepTimeByHand). A rank's own part is compute-bound:
// (17,408·1,000 + 12,800 + 160·500,500) / 0.5e12 = 195,001.6 ns. The
// shared part over T = 2,000 tokens: the MLPs and router 9,728·2,000 /
// 0.5e12 = 38,912 ns, the routed experts 6,144·2,000 / 0.1e12 = 122,880
// ns (24,576 at MFU); its memory some 44 ns. Comm (256·1,000 + 256·2,000)
// / 0.5e12 = 1,536 ns, 4 µs of collectives, 1 µs of overhead:
// round(195,001.6 + 161,792 + 1,536 + 4,000) + 1,000 = 363,330 ns, and
// 265,026 ns with ExpertMFU 0.
func TestExpertMFUUnderDPAttention(t *testing.T) {
	d := tinyMoEDeployment(t, true)
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 1000}}}
	for _, tc := range []struct {
		expertMFU float64
		want      time.Duration
	}{{0.1, 363_330}, {0, 265_026}} {
		d.ExpertMFU = tc.expertMFU
		got, err := d.DPStepTime([]*Batch{b, b})
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("ExpertMFU %g: DPStepTime = %d ns, want %d", tc.expertMFU, got.Nanoseconds(), tc.want.Nanoseconds())
		}
		if got := d.StepTime(b); got != tc.want {
			t.Errorf("ExpertMFU %g: StepTime = %d ns, want %d", tc.expertMFU, got.Nanoseconds(), tc.want.Nanoseconds())
		}
	}
	// Terms adds the rank's part to the shared one: the experts are all
	// in the shared part, over the group's 2,000 tokens.
	if got, want := d.Terms(b).ExpertSec, 12_288_000/1e12; got != want {
		t.Errorf("ExpertSec = %g s, want %g", got, want)
	}
}

// A dense model has no expert term, and ExpertMFU leaves its steps alone.
func TestExpertMFUDense(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 2048}}}
	before := d.StepTime(b)
	d.ExpertMFU = 0.01
	if got := d.StepTime(b); got != before {
		t.Errorf("ExpertMFU moved a dense model's step: %v, was %v", got, before)
	}
	if e := d.Terms(b).ExpertSec; e != 0 {
		t.Errorf("dense model: ExpertSec = %g", e)
	}
}
