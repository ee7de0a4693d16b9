package model

import (
	"testing"
	"time"
)

// TestRegimeBoundaries: SGLang's regimes at the exact batch sizes where
// they change (v0.4.0.post1 defaults on an H200 under
// --enable-torch-compile: compiled up to 32, graphs up to 160), and
// without compile, with graphs off, with a graph limit below the
// compile limit (8, as below TP4 on a GPU under 25,000 MB) and with the
// limit unknown.
func TestRegimeBoundaries(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	for _, c := range []struct {
		graphs, compile int
		prefill         bool
		decodes         int
		want            StepRegime
	}{
		{160, 32, false, 1, RegimeCompiled},
		{160, 32, false, 32, RegimeCompiled},
		{160, 32, false, 33, RegimeGraph},
		{160, 32, false, 160, RegimeGraph},
		{160, 32, false, 161, RegimeEager},
		{160, 32, true, 0, RegimeEager},
		{160, 32, true, 1, RegimeEager},
		{160, 0, false, 1, RegimeGraph},
		{160, 0, false, 32, RegimeGraph},
		{160, 0, false, 161, RegimeEager},
		{-1, 32, false, 1, RegimeEager},
		{8, 32, false, 8, RegimeCompiled},
		{8, 32, false, 9, RegimeEager},
		{0, 32, false, 1, RegimeUnknown},
		{0, 32, true, 500, RegimeUnknown},
	} {
		d.CUDAGraphMaxBS, d.TorchCompileMaxBS = c.graphs, c.compile
		if got := d.Regime(c.prefill, c.decodes); got != c.want {
			t.Errorf("graphs to %d, compiled to %d, prefill %v, %d decodes: %v, want %v", c.graphs, c.compile, c.prefill, c.decodes, got, c.want)
		}
	}
}

// TestRegimePricing: with compile on, a plain-graph step pays the
// layers times UncompiledLayer, an eager one that and the launches, a
// compiled one neither; DecodeStepTime prices as StepTime on both sides
// of each boundary; with compile off, or the coefficient 0, nothing
// changes.
func TestRegimePricing(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	d.CUDAGraphMaxBS, d.EagerLayerLaunch = 160, 300*time.Microsecond
	sizes := []int{32, 33, 160, 161}
	base := map[int]time.Duration{}
	for _, n := range sizes {
		base[n] = d.StepTime(decodeBatch(n))
	}
	d.TorchCompileMaxBS = 32
	for _, n := range sizes {
		if got := d.StepTime(decodeBatch(n)); got != base[n] {
			t.Errorf("compile on, UncompiledLayer 0, %d decodes: %v, was %v", n, got, base[n])
		}
	}
	d.UncompiledLayer = 20 * time.Microsecond
	const layers = 80
	want := map[int]time.Duration{32: base[32], 33: base[33] + layers*20*time.Microsecond,
		160: base[160] + layers*20*time.Microsecond, 161: base[161] + layers*20*time.Microsecond}
	for _, n := range sizes {
		got := d.StepTime(decodeBatch(n))
		if got != want[n] {
			t.Errorf("%d decodes: %v, want %v", n, got, want[n])
		}
		if ds, ok := d.DecodeStepTime(n, int64(n)*1000); !ok || ds != got {
			t.Errorf("%d decodes: DecodeStepTime %v, StepTime %v", n, ds, got)
		}
	}
	if tm := d.Terms(decodeBatch(33)); tm.UncompiledLayers != layers || tm.EagerLayers != 0 {
		t.Errorf("33 decodes: terms %+v", tm)
	}
	d.TorchCompileMaxBS = 0
	if got := d.StepTime(decodeBatch(33)); got != base[33] {
		t.Errorf("compile off: 33 decodes %v, want %v", got, base[33])
	}
}
