package model

import (
	"testing"
	"time"
)

// TestCollectiveLatency prices NCCL's α: each all-reduce (two a layer
// under TP), each all-to-all (a dispatch and a combine per MoE layer
// under EP) and each stage send (PP − 1) costs it once per step, and the
// default of 0 leaves every step time as it was.
func TestCollectiveLatency(t *testing.T) {
	m := toyMoE(t)
	b := &Batch{Decode: []int64{100, 200}, Prefill: []PrefillChunk{{Tokens: 64, Context: 0}}}
	for _, tc := range []struct {
		p    Parallelism
		want float64 // collectives per step
	}{
		{Parallelism{TP: 1}, 0},
		{Parallelism{TP: 2}, 2 * 2},
		{Parallelism{TP: 2, PP: 2}, 2*2 + 1},
		{Parallelism{TP: 2, DP: 4, EP: 8}, 2*2 - 2 + 2*2}, // MoE layers combine by all-to-all
	} {
		d, err := NewParallelDeployment(h100(t), m, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Terms(b).Collectives; got != tc.want {
			t.Errorf("%+v: %v collectives a step, want %v", tc.p, got, tc.want)
		}
		before := d.StepTime(b)
		d.CollectiveLatency = 0
		if d.StepTime(b) != before {
			t.Errorf("%+v: a zero collective latency changes the step time", tc.p)
		}
		d.CollectiveLatency = 10 * time.Microsecond
		if got, want := d.StepTime(b)-before, time.Duration(tc.want)*10*time.Microsecond; got != want {
			t.Errorf("%+v: α = 10 µs adds %v, want %v", tc.p, got, want)
		}
		if n, ctx := 2, int64(300); true {
			dec, ok := d.DecodeStepTime(n, ctx)
			if ok && dec != d.StepTime(&Batch{Decode: []int64{100, 200}}) {
				t.Errorf("%+v: DecodeStepTime %v differs from StepTime", tc.p, dec)
			}
		}
	}
}
