package analyze

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// CompareOptions tune Compare.
type CompareOptions struct {
	Margin     float64   // relative margin of the verdict; 0 means 0.05
	Resamples  int       // bootstrap resamples; 0 means 1000
	Confidence float64   // of the intervals; 0 means 0.95
	Seed       uint64    // of the bootstrap
	Quantiles  []float64 // percentiles compared besides the mean; nil means 50, 90, 99
}

func (o CompareOptions) withDefaults() CompareOptions {
	if o.Margin == 0 {
		o.Margin = 0.05
	}
	if o.Resamples == 0 {
		o.Resamples = 1000
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.Quantiles == nil {
		o.Quantiles = []float64{50, 90, 99}
	}
	return o
}

// Verdicts of a comparison.
const (
	VerdictWithin       = "within"       // the whole CI of the relative difference lies inside ±margin
	VerdictOutside      = "outside"      // the whole CI lies beyond the margin
	VerdictInconclusive = "inconclusive" // the CI straddles the margin
	VerdictNoData       = "no data"      // a side has no values
)

// A Comparison compares the latency distributions of two summaries, A
// (the reference, e.g. observed) and B (e.g. simulated).
type Comparison struct {
	A, B      string // names
	Margin    float64
	Metrics   []MetricComparison
	Resamples int // the largest number of bootstrap resamples used
	Warnings  []string
}

// A MetricComparison compares one metric.
type MetricComparison struct {
	Metric string // ttft, tpot, itl, e2el
	NA, NB int
	// AReported (BReported) says side A's (B's) statistics are the ones
	// its source reported in its own summary (a summary-only run, see
	// ReportedStats): only the statistics it reported are compared, it has
	// no values to resample, so the interval covers the other side's
	// sampling only (it is the point itself when both sides are
	// reported), and KS and W1 are NaN.
	AReported, BReported bool
	// KS is the Kolmogorov–Smirnov distance sup|F_A − F_B|, W1 the
	// Wasserstein-1 distance ∫|F_A − F_B| dx in seconds: distances, not
	// tests.
	KS, W1 float64
	// ByRequest says the values were resampled by request (the pooled
	// ITL of summaries that know each gap's request), not one by one.
	ByRequest bool
	Stats     []StatComparison
	Verdict   string // the worst verdict of its stats: outside, inconclusive, within
	Resamples int
}

// A StatComparison compares one statistic (mean or a percentile).
type StatComparison struct {
	Stat       string  // "mean", "p50", …
	A, B       float64 // seconds
	AbsDiff    float64 // B − A, seconds
	RelDiff    float64 // (B − A)/A; NaN when A is 0
	CILo, CIHi float64 // bootstrap percentile interval of RelDiff
	Verdict    string
}

// Compare compares a and b metric by metric: for the mean and each
// quantile (of a side without values for a metric, the statistics its
// source reported, see MetricComparison.AReported), the absolute and
// relative difference with a bootstrap percentile confidence interval of
// the relative difference (each side resampled with replacement,
// independently); the KS and W1 distances; and a verdict against the
// margin. The bootstrap is seeded: same inputs and seed, same result.
//
// The pooled ITL is resampled by request (a cluster bootstrap) when both
// summaries know each gap's request (Options.ITLByRequest): a resample
// draws whole requests, each bringing all its gaps, as the requests, not
// the gaps, are the independent draws; the gaps of one request share its
// batch and its context length. Resampling gaps one by one, the fallback
// when a summary does not know them (MetricComparison.ByRequest false), treats
// them as independent and understates the interval.
//
// Note: each resample is drawn as counts over the sorted values (O(n), no
// sort), or as counts over requests that weigh their gaps (O(gaps), with
// one random draw per request, not per gap); the number of resamples is
// capped so that resamples × (n_A + n_B) ≤ 2·10⁸ (at least 100): a pooled
// ITL of millions of gaps gets fewer resamples, and Resamples says how
// many.
func Compare(nameA string, a *Summary, nameB string, b *Summary, opts CompareOptions) *Comparison {
	opts = opts.withDefaults()
	c := &Comparison{A: nameA, B: nameB, Margin: opts.Margin}
	if a.Semantics.ITLUnit != b.Semantics.ITLUnit || a.Semantics.E2EBasis != b.Semantics.E2EBasis || a.Semantics.TTFTBasis != b.Semantics.TTFTBasis {
		c.Warnings = append(c.Warnings, fmt.Sprintf("semantics differ: %s has itl=%s e2e=%s ttft=%s, %s has itl=%s e2e=%s ttft=%s; differences include the way of measuring",
			nameA, orNone(a.Semantics.ITLUnit), orNone(a.Semantics.E2EBasis), orNone(a.Semantics.TTFTBasis),
			nameB, orNone(b.Semantics.ITLUnit), orNone(b.Semantics.E2EBasis), orNone(b.Semantics.TTFTBasis)))
	}
	repA, repB := ReportedStats(a.Run), ReportedStats(b.Run)
	for i, m := range []struct {
		name string
		a, b Dist
	}{{"ttft", a.TTFT, b.TTFT}, {"tpot", a.TPOT, b.TPOT}, {"itl", a.ITL, b.ITL}, {"e2el", a.E2E, b.E2E}} {
		sa, sb := sideOf(m.a, repA[m.name]), sideOf(m.b, repB[m.name])
		if m.name == "itl" {
			// Each side with values resamples by request when it knows
			// the requests; the other may be a source's reported figures.
			if a.ITL.N() > 0 && len(a.ITLRequests) == a.ITL.N() {
				sa = sa.byRequest(a.ITLRequests)
			}
			if b.ITL.N() > 0 && len(b.ITLRequests) == b.ITL.N() {
				sb = sb.byRequest(b.ITLRequests)
			}
		}
		mc := compareSides(m.name, sa, sb, opts, uint64(i))
		c.Resamples = max(c.Resamples, mc.Resamples)
		c.Metrics = append(c.Metrics, mc)
	}
	return c
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// stat is a statistic of a resample given as counts over sorted values.
type stat struct {
	name string
	of   func(d Dist) float64
	pct  float64 // percentile, or -1 for the mean
}

// A side is one side of a metric's comparison: its values, or, when it
// has none, the statistics its source reported (by Compare's names).
type side struct {
	d        Dist
	reported map[string]float64
	// owner, when not nil, is the request of each of d's values: the
	// side is resampled by request, perRequest holding each request's
	// number and sum of values (by request number).
	owner      []int32
	perRequest []requestValues
}

// byRequest returns s resampled by request, owner giving each value's.
func (s side) byRequest(owner []int32) side {
	s.owner = owner
	requests := 0
	for _, r := range owner {
		requests = max(requests, int(r)+1)
	}
	s.perRequest = make([]requestValues, requests)
	for i, r := range owner {
		s.perRequest[r].n++
		s.perRequest[r].sum += s.d.Values[i]
	}
	return s
}

// requestValues are the number and the sum of one request's values.
type requestValues struct {
	n   int64
	sum float64
}

func sideOf(d Dist, reported map[string]float64) side {
	if d.N() > 0 {
		return side{d: d}
	}
	return side{reported: reported}
}

func (s side) isReported() bool { return s.d.N() == 0 && len(s.reported) > 0 }

// has reports whether the side can give statistic st.
func (s side) has(st stat) bool {
	if s.d.N() > 0 {
		return true
	}
	_, ok := s.reported[st.name]
	return ok
}

func (s side) value(st stat) float64 {
	if s.d.N() > 0 {
		return st.of(s.d)
	}
	return s.reported[st.name]
}

func compareSides(name string, a, b side, opts CompareOptions, stream uint64) MetricComparison {
	mc := MetricComparison{Metric: name, NA: a.d.N(), NB: b.d.N(), AReported: a.isReported(), BReported: b.isReported(),
		ByRequest: (a.owner != nil || a.d.N() == 0) && (b.owner != nil || b.d.N() == 0) && (a.owner != nil || b.owner != nil)}
	all := []stat{{"mean", func(d Dist) float64 { return d.Mean }, -1}}
	for _, p := range opts.Quantiles {
		all = append(all, stat{percentileName(p), func(d Dist) float64 { return d.Percentile(p) }, p})
	}
	var stats []stat
	for _, st := range all {
		if a.has(st) && b.has(st) {
			stats = append(stats, st)
		}
	}
	if len(stats) == 0 || (a.d.N() == 0 && !mc.AReported) || (b.d.N() == 0 && !mc.BReported) {
		mc.AReported, mc.BReported = false, false
		mc.Verdict = VerdictNoData
		return mc
	}
	mc.KS, mc.W1 = math.NaN(), math.NaN()
	if a.d.N() > 0 && b.d.N() > 0 {
		mc.KS, mc.W1 = ksW1(a.d.Values, b.d.Values)
	}
	b1 := 0 // no resample when both sides are reported figures
	bothReported := a.d.N()+b.d.N() == 0
	if n := a.d.N() + b.d.N(); n > 0 {
		b1 = opts.Resamples
		if cap := int(2e8 / float64(n)); b1 > cap {
			b1 = max(cap, 100)
		}
	}
	mc.Resamples = b1
	rng := rand.New(rand.NewPCG(opts.Seed, stream))
	rel := make([][]float64, len(stats))
	countsA, countsB := make([]int32, a.draws()), make([]int32, b.draws())
	valsA, valsB := make([]float64, len(stats)), make([]float64, len(stats))
	for k, st := range stats {
		valsA[k], valsB[k] = a.value(st), b.value(st)
	}
	for range b1 {
		a.resample(rng, countsA, stats, valsA)
		b.resample(rng, countsB, stats, valsB)
		for k := range stats {
			if valsA[k] != 0 {
				rel[k] = append(rel[k], (valsB[k]-valsA[k])/valsA[k])
			}
		}
	}
	lo, hi := (1-opts.Confidence)/2*100, (1+opts.Confidence)/2*100
	worst := VerdictWithin
	for k, s := range stats {
		sc := StatComparison{Stat: s.name, A: a.value(s), B: b.value(s)}
		sc.AbsDiff = sc.B - sc.A
		sc.RelDiff = math.NaN()
		if sc.A != 0 {
			sc.RelDiff = sc.AbsDiff / sc.A
		}
		switch {
		case bothReported && sc.A != 0:
			// Two reported figures: no sampling to go by, the point is
			// the interval.
			sc.CILo, sc.CIHi = sc.RelDiff, sc.RelDiff
			sc.Verdict = verdict(sc.CILo, sc.CIHi, opts.Margin)
		case len(rel[k]) == 0 || len(rel[k]) < b1/2: // == 0: no resamples (Resamples < 0) prove nothing
			sc.CILo, sc.CIHi, sc.Verdict = math.NaN(), math.NaN(), VerdictInconclusive
		default:
			d := NewDist(rel[k])
			sc.CILo, sc.CIHi = d.Percentile(lo), d.Percentile(hi)
			sc.Verdict = verdict(sc.CILo, sc.CIHi, opts.Margin)
		}
		switch {
		case sc.Verdict == VerdictOutside:
			worst = VerdictOutside
		case sc.Verdict == VerdictInconclusive && worst == VerdictWithin:
			worst = VerdictInconclusive
		}
		mc.Stats = append(mc.Stats, sc)
	}
	mc.Verdict = worst
	return mc
}

func verdict(lo, hi, margin float64) string {
	switch {
	case lo >= -margin && hi <= margin:
		return VerdictWithin
	case lo > margin || hi < -margin:
		return VerdictOutside
	}
	return VerdictInconclusive
}

// draws is the number of units a resample draws: requests, or values.
func (s side) draws() int {
	if s.owner != nil {
		return len(s.perRequest)
	}
	return s.d.N()
}

// resample draws one bootstrap resample of the side's values, by request
// or by value, and evaluates stats on it into out; a side without values
// keeps its reported statistics.
func (s side) resample(rng *rand.Rand, counts []int32, stats []stat, out []float64) {
	switch {
	case s.d.N() == 0:
	case s.owner != nil:
		resampleRequests(rng, s.d.Values, s.owner, s.perRequest, counts, stats, out)
	default:
		resampleStats(rng, s.d.Values, counts, stats, out)
	}
}

// resampleRequests draws one cluster-bootstrap resample: as many requests
// as there are, with replacement (counts per request), each bringing all
// its values, which are sorted with owner giving each one's request. The
// stats are evaluated on the pooled values of the resample: each value
// weighs as many times as its request was drawn. The total and the mean
// come from per (each request's number and sum of values), the
// percentiles from one walk over the sorted values up to the highest rank
// asked, so a resample costs one draw per request and at most one pass.
func resampleRequests(rng *rand.Rand, sorted []float64, owner []int32, per []requestValues, counts []int32, stats []stat, out []float64) {
	k := len(counts)
	clear(counts)
	for range k {
		counts[rng.IntN(k)]++
	}
	var total int64
	sum := 0.0
	for r, c := range counts {
		if c != 0 {
			total += int64(c) * per[r].n
			sum += float64(c) * per[r].sum
		}
	}
	// One walk: the percentiles' ranks rise with the percentile, and
	// stats may come in any order, so they are visited sorted.
	order := make([]int, 0, len(stats))
	for j, s := range stats {
		if s.pct < 0 {
			out[j] = sum / float64(total)
			continue
		}
		order = append(order, j)
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(stats[x].pct, stats[y].pct) })
	pos, cum := 0, int64(counts[owner[0]])
	at := func(rank int64) float64 {
		for cum <= rank {
			pos++
			cum += int64(counts[owner[pos]])
		}
		return sorted[pos]
	}
	for _, j := range order {
		out[j] = percentileOf(total, stats[j].pct, at)
	}
}

// resampleStats draws one bootstrap resample of sorted (as counts per
// position) and evaluates each stat on it: the mean, and numpy-linear
// percentiles read from the cumulative counts.
func resampleStats(rng *rand.Rand, sorted []float64, counts []int32, stats []stat, out []float64) {
	n := len(sorted)
	clear(counts)
	for range n {
		counts[rng.IntN(n)]++
	}
	sum := 0.0
	for i, c := range counts {
		if c != 0 {
			sum += float64(c) * sorted[i]
		}
	}
	// at(rank) walks the counts; ranks are asked in ascending order per
	// stat, so a fresh walk per stat keeps this O(n · stats).
	for k, s := range stats {
		if s.pct < 0 {
			out[k] = sum / float64(n)
			continue
		}
		pos, cum := 0, int64(counts[0])
		out[k] = percentileOf(n, s.pct, func(r int64) float64 {
			for cum <= r {
				pos++
				cum += int64(counts[pos])
			}
			return sorted[pos]
		})
	}
}

// ksW1 returns the Kolmogorov–Smirnov and Wasserstein-1 distances of two
// sorted samples.
func ksW1(a, b []float64) (ks, w1 float64) {
	na, nb := float64(len(a)), float64(len(b))
	i, j := 0, 0
	prev := math.Min(a[0], b[0])
	for i < len(a) || j < len(b) {
		var x float64
		switch {
		case j >= len(b) || (i < len(a) && a[i] <= b[j]):
			x = a[i]
		default:
			x = b[j]
		}
		fa, fb := float64(i)/na, float64(j)/nb
		w1 += math.Abs(fa-fb) * (x - prev)
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		ks = math.Max(ks, math.Abs(float64(i)/na-float64(j)/nb))
		prev = x
	}
	return ks, w1
}
