package analyze

import (
	"math"
	"strconv"
)

// A Dist is an exact distribution of values (seconds, for latencies), in
// one of two forms with the same numbers to the last bit:
//
//   - in memory (NewDist): every value kept, sorted, so any quantile is
//     exact;
//   - by passes (SummarizeStream): the count, mean and std, and the order
//     statistics the summary asked for (median, percentiles, CDF
//     quantiles) selected exactly, never sketched; Values is nil, and
//     asking for a quantile that was not selected panics.
type Dist struct {
	Values []float64 // ascending; nil for a distribution summarized by passes
	Mean   float64
	Std    float64 // population standard deviation (numpy's default, ddof=0)

	n     int64             // values, when summarized by passes
	ranks map[int64]float64 // selected order statistics (0-based rank → value), when summarized by passes
}

// NewDist returns the distribution of values. It sorts values in place and
// keeps them. NaNs must not be present. Mean and Std are computed over the
// input order with numpy's pairwise summation, so they equal np.mean and
// np.std of the same list to the last bit.
func NewDist(values []float64) Dist {
	d := Dist{}
	d.Mean, d.Std = meanStd(values)
	sortFloats(values)
	d.Values = values
	return d
}

// N returns the number of values.
func (d Dist) N() int {
	if d.ranks != nil {
		return int(d.n)
	}
	return len(d.Values)
}

// Streamed reports whether d was summarized by passes (it holds selected
// order statistics, not its values).
func (d Dist) Streamed() bool { return d.ranks != nil }

// at returns the value of 0-based rank i.
func (d Dist) at(i int64) float64 {
	if d.ranks == nil {
		return d.Values[i]
	}
	v, ok := d.ranks[i]
	if !ok {
		panic("analyze: Dist: quantile of rank " + strconv.FormatInt(i, 10) + " was not selected by the passes (add it to StreamOptions)")
	}
	return v
}

// Median is numpy's median: the middle value, or the mean of the two
// middle values, (a+b)/2 — which can differ in the last bit from the 50th
// percentile's interpolation.
func (d Dist) Median() float64 {
	return medianOf(int64(d.N()), d.at)
}

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) with linear
// interpolation between closest ranks, numpy's default method: rank
// h = (n−1)·p/100, value x[⌊h⌋] + (h−⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
// An empty distribution gives 0, as vLLM's summary does; a p that is NaN
// or outside [0, 100] gives NaN (numpy refuses it), whatever d holds.
func (d Dist) Percentile(p float64) float64 {
	return percentileOf(d.N(), p, d.at)
}

// isPercentile reports whether p is a percentile: in [0, 100], not NaN.
//
// Note: every percentile function checks it, not only the flags that take
// percentiles, because a NaN rank converts to the most negative int64 and
// an out-of-range one reads past the values (stats --percentiles NaN once
// panicked with index −9223372036854775808).
func isPercentile(p float64) bool { return p >= 0 && p <= 100 }

// percentileRanks returns the sorted positions percentileOf(n, p) reads:
// none when p is not a percentile.
func percentileRanks(n int64, p float64) []int64 {
	if n == 0 || !isPercentile(p) {
		return nil
	}
	h := float64(n-1) * (p / 100)
	i := int64(math.Floor(h))
	if i >= n-1 {
		return []int64{n - 1}
	}
	return []int64{i, i + 1}
}

// percentileOf is numpy's linear percentile of n sorted values read by at;
// NaN when p is not a percentile.
func percentileOf[N int | int64](n N, p float64, at func(int64) float64) float64 {
	if !isPercentile(p) {
		return math.NaN()
	}
	if n == 0 {
		return 0
	}
	// numpy: q = p/100 first, then virtual index (n-1)*q; the order of the
	// operations matters in the last bit.
	h := float64(n-1) * (p / 100)
	lo := math.Floor(h)
	i := int64(lo)
	if i >= int64(n)-1 {
		return at(int64(n) - 1)
	}
	frac := h - lo
	a, b := at(i), at(i+1)
	// numpy's _lerp: a + (b-a)*t, switched to b - (b-a)*(1-t) for t ≥ 0.5.
	diff := b - a
	if frac >= 0.5 {
		return b - diff*(1-frac)
	}
	return a + diff*frac
}

// medianRanks returns the positions medianOf reads.
func medianRanks(n int64) []int64 {
	switch {
	case n == 0:
		return nil
	case n%2 == 1:
		return []int64{n / 2}
	}
	return []int64{n/2 - 1, n / 2}
}

// medianOf is numpy's median of n sorted values read by at.
func medianOf(n int64, at func(int64) float64) float64 {
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// Quantiles returns at most n exact quantiles of d for a CDF plot: pairs of
// value and cumulative probability. With n or fewer values it returns every
// value; otherwise n points evenly spaced in probability, plus min and max.
func (d Dist) Quantiles(n int) (values, probs []float64) {
	m := d.N()
	if m == 0 || n <= 0 {
		return nil, nil
	}
	if m <= n {
		values = make([]float64, m)
		probs = make([]float64, m)
		for i := range probs {
			values[i] = d.at(int64(i))
			probs[i] = float64(i+1) / float64(m)
		}
		return values, probs
	}
	values = make([]float64, 0, n+1)
	probs = make([]float64, 0, n+1)
	for k := 0; k <= n; k++ {
		p := quantileProb(k, n)
		values = append(values, d.Percentile(100*p))
		probs = append(probs, p)
	}
	return values, probs
}

// quantileProb is the probability of Quantiles' k-th point of n.
func quantileProb(k, n int) float64 { return float64(k) / float64(n) }

// quantileRanks returns the ranks Quantiles(n) reads from m values.
func quantileRanks(m int64, n int) []int64 {
	if m <= int64(n) {
		ranks := make([]int64, m)
		for i := range ranks {
			ranks[i] = int64(i)
		}
		return ranks
	}
	var ranks []int64
	for k := 0; k <= n; k++ {
		ranks = append(ranks, percentileRanks(m, 100*quantileProb(k, n))...)
	}
	return ranks
}
