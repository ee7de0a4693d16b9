package calibrate

import (
	"math"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/model"
)

// threeRows are three prefill times of the truth deployment, exact.
func threeRows(t *testing.T) []Point {
	d := truth(t)
	var pts []Point
	for _, n := range []int64{512, 4096, 16384} {
		pts = append(pts, Point{Tokens: n, Seconds: d.StepTime(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: n}}}).Seconds()})
	}
	return pts
}

// TestFitTableFixedAndPriors: three rows cannot fit three coefficients
// with their errors, but they fit what they determine once the rest is
// fixed or given a prior, and the fixed value is kept as given.
func TestFitTableFixedAndPriors(t *testing.T) {
	pts := threeRows(t)
	o := Options{Deployment: deployment(t, "llama-3.1-8b")}
	if _, err := FitTable(pts, o); err == nil || !strings.Contains(err.Error(), "need at least 5") {
		t.Errorf("three rows, three free coefficients: %v", err)
	}
	tr := truth(t)
	// The step overhead fixed: mfu and attention mfu from three rows.
	o.Fixed = map[string]float64{TermOverhead: tr.StepOverhead.Seconds()}
	res, err := FitTable(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fit(QPrefill)
	if v := 1 / f.Term(TermInvMFU).Value; !within(v, tr.MFU, 0.01) {
		t.Errorf("mfu %v, truth %v", v, tr.MFU)
	}
	if v := 1 / f.Term(TermInvAttnMFU).Value; !within(v, tr.AttentionMFU, 0.01) {
		t.Errorf("attention mfu %v, truth %v", v, tr.AttentionMFU)
	}
	if oh := f.Term(TermOverhead); oh.Value != tr.StepOverhead.Seconds() || oh.Why != "fixed" {
		t.Errorf("fixed overhead reported as %+v", oh)
	}
	// Two rows and a fixed overhead: exactly determined, no error bars.
	res, err = FitTable(pts[1:], o)
	if err != nil {
		t.Fatal(err)
	}
	f = res.Fit(QPrefill)
	if se := f.Term(TermInvMFU).StdErr; !math.IsNaN(se) || !strings.Contains(strings.Join(f.Warnings, "\n"), "exactly determined") {
		t.Errorf("exact fit: std err %v, warnings %q", se, f.Warnings)
	}
	if v := 1 / f.Term(TermInvMFU).Value; !within(v, tr.MFU, 0.01) {
		t.Errorf("exact fit: mfu %v, truth %v", v, tr.MFU)
	}
	// A prior instead of a fixed value: a 1 % prior on the overhead
	// at its truth pins it; one 10 times off at 1 % drags the fit.
	o.Fixed = nil
	o.Priors = map[string]Prior{TermOverhead: {Value: tr.StepOverhead.Seconds(), RelSD: 0.01}}
	res, err = FitTable(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	if v := 1 / res.Fit(QPrefill).Term(TermInvMFU).Value; !within(v, tr.MFU, 0.01) {
		t.Errorf("with a prior at the truth: mfu %v, truth %v", v, tr.MFU)
	}
	o.Priors = map[string]Prior{TermOverhead: {Value: 10 * tr.StepOverhead.Seconds(), RelSD: 0.01}}
	res, err = FitTable(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Fit(QPrefill).Term(TermOverhead).Value; within(v, tr.StepOverhead.Seconds(), 0.5) {
		t.Errorf("a tight prior 10× off left the overhead at %v", v)
	}
	// Everything fixed: nothing to fit.
	o.Priors = nil
	o.Fixed = map[string]float64{TermOverhead: 1e-3, TermInvMFU: 2, TermInvAttnMFU: 3}
	if _, err := FitTable(pts, o); err == nil || !strings.Contains(err.Error(), "nothing to fit") {
		t.Errorf("all fixed: %v", err)
	}
	if term, v, err := TableTerm("mfu", 0.5); term != TermInvMFU || v != 2 || err != nil {
		t.Errorf("TableTerm(mfu, 0.5) = %s, %v, %v", term, v, err)
	}
	if _, _, err := TableTerm("colour", 1); err == nil {
		t.Error("TableTerm accepted an unknown name")
	}
}
