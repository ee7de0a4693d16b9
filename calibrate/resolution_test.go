package calibrate

import (
	"math"
	"testing"
)

// TestLatencyResolution: figures below a millisecond agree, whatever
// their ratio (a median queue of 4.4 µs observed, 0 replayed, was −100 %
// in the LLMServingSim Qwen3-30B-A3B table); above it, errors are
// relative as before.
func TestLatencyResolution(t *testing.T) {
	for _, c := range []struct {
		sim, obs, rel, log float64
	}{
		{0, 4.4e-6, 0, 0},
		{0.5e-3, 0, 0, 0},
		{0.9e-3, 0.2e-3, 0, 0},
		{0, 5, -1, 3},
		{2e-3, 1e-3, 1, math.Log(2)},
		{math.E * 1e-3, 4.4e-6, math.E*1e-3/4.4e-6 - 1, 1}, // on the log scale the observed counts as 1 ms
		{0.5, 1, -0.5, math.Log(0.5)},
	} {
		if got := relErr(c.sim, c.obs); math.Abs(got-c.rel) > 1e-12 {
			t.Errorf("relErr(%g, %g) = %g, want %g", c.sim, c.obs, got, c.rel)
		}
		if got := logErr(c.sim, c.obs); math.Abs(got-c.log) > 1e-12 {
			t.Errorf("logErr(%g, %g) = %g, want %g", c.sim, c.obs, got, c.log)
		}
	}
	if got := logErr(math.NaN(), 1e-6); got != 3 {
		t.Errorf("logErr(NaN, 1e-6) = %g, want 3", got)
	}
}
