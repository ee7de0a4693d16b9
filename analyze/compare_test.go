package analyze

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func summaryOf(ttft []float64) *Summary {
	return &Summary{TTFT: NewDist(slices.Clone(ttft))}
}

func TestKSW1(t *testing.T) {
	a := []float64{0, 1, 2, 3}
	b := []float64{0.5, 1.5, 2.5, 3.5}
	ks, w1 := ksW1(a, b)
	if ks != 0.25 || w1 != 0.5 {
		t.Errorf("shift by 0.5: ks=%v w1=%v, want 0.25 and 0.5", ks, w1)
	}
	ks, w1 = ksW1(a, a)
	if ks != 0 || w1 != 0 {
		t.Errorf("identical: ks=%v w1=%v", ks, w1)
	}
	ks, w1 = ksW1([]float64{0, 0, 0, 10}, []float64{10, 10, 10, 10})
	if ks != 0.75 || w1 != 7.5 {
		t.Errorf("ks=%v w1=%v, want 0.75 and 7.5", ks, w1)
	}
}

// TestResampleStatsMatchesExplicitResample rebuilds a resample from the
// same random draws and checks the counts-based statistics against Dist.
func TestResampleStatsMatchesExplicitResample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	sorted := make([]float64, 501)
	for i := range sorted {
		sorted[i] = rng.NormFloat64()
	}
	slices.Sort(sorted)
	stats := []stat{{"mean", nil, -1}, {"p0", nil, 0}, {"p50", nil, 50}, {"p99", nil, 99}, {"p100", nil, 100}}
	out := make([]float64, len(stats))
	counts := make([]int32, len(sorted))
	resampleStats(rand.New(rand.NewPCG(5, 5)), sorted, counts, stats, out)
	var explicit []float64
	for i, c := range counts {
		for range c {
			explicit = append(explicit, sorted[i])
		}
	}
	d := NewDist(explicit)
	for k, s := range stats[1:] {
		if got, want := out[k+1], d.Percentile(s.pct); got != want {
			t.Errorf("%s: %v, explicit resample %v", s.name, got, want)
		}
	}
	if math.Abs(out[0]-d.Mean) > 1e-12 {
		t.Errorf("mean %v, explicit %v", out[0], d.Mean)
	}
}

func TestCompareVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	base := make([]float64, 4000)
	for i := range base {
		base[i] = 0.1 + rng.ExpFloat64()*0.05
	}
	scaled := func(f float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = (0.1 + rng.ExpFloat64()*0.05) * f
		}
		return out
	}
	opts := CompareOptions{Seed: 1, Quantiles: []float64{50, 90}}
	same := Compare("a", summaryOf(base), "b", summaryOf(base), opts)
	if v := same.Metrics[0].Verdict; v != VerdictWithin {
		t.Errorf("identical data: verdict %s, want within", v)
	}
	for _, s := range same.Metrics[0].Stats {
		if s.RelDiff != 0 {
			t.Errorf("identical data: %s relative difference %v", s.Stat, s.RelDiff)
		}
	}
	far := Compare("a", summaryOf(base), "b", summaryOf(scaled(1.3, 4000)), opts)
	if v := far.Metrics[0].Verdict; v != VerdictOutside {
		t.Errorf("+30%%: verdict %s, want outside (%+v)", v, far.Metrics[0].Stats)
	}
	if far.Metrics[0].KS < 0.1 || far.Metrics[0].W1 < 0.02 {
		t.Errorf("+30%%: ks %v, w1 %v: too small", far.Metrics[0].KS, far.Metrics[0].W1)
	}
	// 30 values each, 5% apart: the interval is far wider than the margin.
	small := Compare("a", summaryOf(base[:30]), "b", summaryOf(scaled(1.05, 30)), opts)
	if v := small.Metrics[0].Verdict; v != VerdictInconclusive {
		t.Errorf("30 values: verdict %s, want inconclusive (%+v)", v, small.Metrics[0].Stats)
	}
	if m := small.Metrics[1]; m.Verdict != VerdictNoData {
		t.Errorf("tpot without data: verdict %s", m.Verdict)
	}
	again := Compare("a", summaryOf(base[:30]), "b", summaryOf(small2(base[:30])), opts)
	again2 := Compare("a", summaryOf(base[:30]), "b", summaryOf(small2(base[:30])), opts)
	if !reflect.DeepEqual(again, again2) {
		t.Error("same inputs and seed gave different comparisons")
	}
}

func small2(x []float64) []float64 {
	out := slices.Clone(x)
	for i := range out {
		out[i] *= 1.01
	}
	return out
}

func TestCompareWarnsOnSemantics(t *testing.T) {
	a, b := summaryOf([]float64{1, 2}), summaryOf([]float64{1, 2})
	a.Semantics.ITLUnit, b.Semantics.ITLUnit = "chunk", "token"
	if c := Compare("obs", a, "sim", b, CompareOptions{}); len(c.Warnings) == 0 {
		t.Error("no warning for chunk vs token ITL")
	}
}

// TestPercentileGuard: a percentile that is NaN or outside [0, 100] gives
// NaN (and selects no rank) in every percentile function, in memory and
// streamed, and a comparison on it or on no resamples is inconclusive,
// never "within".
func TestPercentileGuard(t *testing.T) {
	d := NewDist([]float64{3, 1, 2})
	bad := []float64{math.NaN(), -1, 100.0000001, math.Inf(1), math.Inf(-1), -math.SmallestNonzeroFloat64}
	for _, p := range bad {
		if v := d.Percentile(p); !math.IsNaN(v) {
			t.Errorf("Percentile(%v) = %v, want NaN", p, v)
		}
		if r := percentileRanks(3, p); r != nil {
			t.Errorf("percentileRanks(3, %v) = %v, want none", p, r)
		}
		if v := (Dist{}).Percentile(p); !math.IsNaN(v) {
			t.Errorf("empty Percentile(%v) = %v, want NaN", p, v)
		}
	}
	if v := d.Percentile(0); v != 1 {
		t.Errorf("Percentile(0) = %v", v)
	}
	if v := d.Percentile(100); v != 3 {
		t.Errorf("Percentile(100) = %v", v)
	}
	base := make([]float64, 200)
	for i := range base {
		base[i] = 1 + float64(i%17)/100
	}
	far := make([]float64, 200)
	for i := range far {
		far[i] = 10 * base[i]
	}
	for _, opts := range []CompareOptions{
		{Seed: 1, Quantiles: []float64{math.NaN()}},
		{Seed: 1, Quantiles: []float64{150}},
		{Seed: 1, Resamples: -5},
		{Seed: 1, Confidence: math.NaN()},
	} {
		c := Compare("a", summaryOf(base), "b", summaryOf(far), opts)
		for _, s := range c.Metrics[0].Stats {
			if s.Verdict == VerdictWithin {
				t.Errorf("%+v: %s of a +900%% difference is %s", opts, s.Stat, s.Verdict)
			}
		}
	}
}
