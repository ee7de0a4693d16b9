package calibrate

import (
	"strings"
	"testing"
)

// TestFitReplayStartsFrom: a fit started from another fit's coefficients
// (ReplayOptions.Start, --start-from) holds at them what it does not fit,
// fits the rest from them (an additive one below its start too), and its
// uncalibrated column stays the defaults'.
func TestFitReplayStartsFrom(t *testing.T) {
	truth := candidate{CoefMFU: 0.45, CoefAttentionMFU: 0.45, CoefBandwidthEff: 0.6, CoefLinkEff: 0.8,
		CoefStepOverhead: 3e-4, CoefSerialFraction: 0.5, CoefRequestOverhead: 0.01}
	dep := deployment(t, "llama-3.1-8b")
	runs := []*ReplayRun{
		vllmRun(t, dep, "light#1", 4, poissonRun(80, 4, 30), truth),
		vllmRun(t, dep, "light#2", 30, poissonRun(80, 30, 31), truth),
	}
	start := map[string]float64{CoefSerialFraction: 0.5, CoefRequestOverhead: 0.05, CoefMFU: 0.4}
	opts := ReplayOptions{Start: start, StartFrom: "other.yaml", Restarts: -1}
	p, err := newReplayProblem(runs, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{CoefRequestOverhead, CoefMFU} {
		if !strings.Contains(strings.Join(p.free, ","), name) {
			t.Fatalf("%s is not fitted on these runs (%v): not the case this test is about", name, p.free)
		}
	}
	at := p.toCand(make([]float64, len(p.freeSpecs)))
	if at[CoefSerialFraction] != 0.5 || at[CoefRequestOverhead] != 0.05 || at[CoefMFU] != 0.4 {
		t.Errorf("the fit starts at %v, want Start's values", at)
	}
	if p.defaults[CoefRequestOverhead] != 0 || p.defaults[CoefSerialFraction] != 0 || p.defaults[CoefMFU] == 0.4 {
		t.Errorf("the uncalibrated coefficients %v are not the defaults", p.defaults)
	}
	cm, err := FitReplay(runs, opts)
	if err != nil {
		t.Fatal(err)
	}
	sf := cm.Coefficients[CoefSerialFraction]
	if sf.Value != 0.5 || sf.From != "held at other.yaml's value (start)" {
		t.Errorf("%s: %+v, want held at the start's 0.5", CoefSerialFraction, sf)
	}
	// Started at 5× the truth, the per-request overhead comes down to it:
	// below its start, which a default start (0) never needs.
	if got := cm.Coefficients[CoefRequestOverhead].Value; got > 0.02 {
		t.Errorf("%s = %.4g from a start of 0.05; the runs were replayed with 0.01", CoefRequestOverhead, got)
	}
	if w := strings.Join(cm.Warnings, "\n"); !strings.Contains(w, "held at other.yaml's value, 0.5") {
		t.Errorf("no warning says %s is held at the start's value:\n%s", CoefSerialFraction, w)
	}
	if cm.Replay.StartFrom != "other.yaml" {
		t.Errorf("provenance: start_from %q", cm.Replay.StartFrom)
	}
	var b strings.Builder
	if err := WriteErrorMarkdown(&b, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "at other.yaml's coefficients, where it started") {
		t.Errorf("the report does not say where the fit started:\n%s", b.String())
	}

	if _, err := newReplayProblem(runs, ReplayOptions{Start: map[string]float64{"nope": 1}, StartFrom: "x.yaml"}); err == nil ||
		!strings.Contains(err.Error(), "start from x.yaml: nope is not a coefficient") {
		t.Errorf("an unknown coefficient to start from: %v", err)
	}
}
