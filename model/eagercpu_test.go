package model

import (
	"testing"
	"time"
)

// TestEagerLayerCPUBound: with EagerLayerCPU an eager step takes the
// greater of its GPU time and the stage's layers times the coefficient,
// plus the step overhead; a graph step is untouched. Llama-3.1-70B at
// TP4 has 80 layers: at 1 ms a layer the launches take 80 ms, above a
// small prefill's GPU time (the step waits for them) and below a
// 4,000-request decode's (they are hidden). With EagerLayerLaunch too,
// the additive launches are part of the GPU side the bound is taken
// against. DecodeStepTime agrees with StepTime.
func TestEagerLayerCPUBound(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	d.CUDAGraphMaxBS = 160
	small := &Batch{Prefill: []PrefillChunk{{Tokens: 8}}}
	gpu160, gpuSmall, gpuBig := d.StepTime(decodeBatch(160)), d.StepTime(small), d.StepTime(decodeBatch(4000))
	over := d.StepOverhead
	const layers = 80
	d.EagerLayerCPU = time.Millisecond
	cpu := layers * d.EagerLayerCPU
	if gpuSmall-over >= cpu || gpuBig-over <= cpu {
		t.Fatalf("test premise: a small prefill's GPU time %v should be under %v and a 4,000-decode step's %v over it", gpuSmall-over, cpu, gpuBig-over)
	}
	if got := d.StepTime(decodeBatch(160)); got != gpu160 {
		t.Errorf("160 decodes (a graph): %v, was %v", got, gpu160)
	}
	if got, want := d.StepTime(small), cpu+over; got != want {
		t.Errorf("a small prefill (eager, launch-bound): %v, want %v", got, want)
	}
	if got := d.StepTime(decodeBatch(4000)); got != gpuBig {
		t.Errorf("4,000 decodes (eager, GPU-bound): %v, want %v", got, gpuBig)
	}
	for _, n := range []int{160, 161, 4000} {
		if ds, ok := d.DecodeStepTime(n, int64(n)*1000); !ok || ds != d.StepTime(decodeBatch(n)) {
			t.Errorf("%d decodes: DecodeStepTime %v, StepTime %v", n, ds, d.StepTime(decodeBatch(n)))
		}
	}
	// The additive launches are GPU-side time the bound is compared with.
	d.EagerLayerLaunch = 300 * time.Microsecond
	if got, want := d.StepTime(small), max(gpuSmall-over+layers*d.EagerLayerLaunch, cpu)+over; got != want {
		t.Errorf("with EagerLayerLaunch: %v, want %v", got, want)
	}
	if got, want := d.StepTime(decodeBatch(4000)), gpuBig+layers*d.EagerLayerLaunch; got != want {
		t.Errorf("with EagerLayerLaunch, 4,000 decodes: %v, want %v", got, want)
	}
	d.EagerLayerLaunch, d.CUDAGraphMaxBS = 0, 0
	if got := d.StepTime(small); got != gpuSmall {
		t.Errorf("no graph limit (no regime): %v, want %v", got, gpuSmall)
	}
}
