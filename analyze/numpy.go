package analyze

import "math"

// pairwiseSum is numpy's pairwise summation (numpy/_core/src/umath/
// loops_utils.h.src, pairwise_sum): below 8 values a plain loop; up to 128
// eight accumulators combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)); above,
// split at n/2 rounded down to a multiple of 8. Matching it matters: users
// compare our means with vLLM's to the last printed digit.
func pairwiseSum(x []float64) float64 {
	n := len(x)
	switch {
	case n < 8:
		res := 0.0
		for _, v := range x {
			res += v
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], x[:8])
		i := 8
		for ; i < n-(n%8); i += 8 {
			r[0] += x[i+0]
			r[1] += x[i+1]
			r[2] += x[i+2]
			r[3] += x[i+3]
			r[4] += x[i+4]
			r[5] += x[i+5]
			r[6] += x[i+6]
			r[7] += x[i+7]
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += x[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(x[:n2]) + pairwiseSum(x[n2:])
	}
}

// meanStd returns np.mean(x) and np.std(x) (population, ddof=0), computed
// as numpy computes them. An empty x gives 0, 0 (vLLM's `np.mean(x or 0)`).
func meanStd(x []float64) (mean, std float64) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	mean = pairwiseSum(x) / float64(n)
	dev := make([]float64, n)
	for i, v := range x {
		d := v - mean
		dev[i] = d * d
	}
	return mean, math.Sqrt(pairwiseSum(dev) / float64(n))
}

// meanStdPooled is meanStd of the concatenation of segs (n values in
// all), without making it: numpy's pairwise sums depend on the order and
// the count of the values only, and pairwiseStream walks the same tree.
func meanStdPooled(segs [][]float64, n int) (mean, std float64) {
	if n == 0 {
		return 0, 0
	}
	sum := newPairwiseStream(n)
	longest := 0
	for _, g := range segs {
		sum.AddSlice(g)
		longest = max(longest, len(g))
	}
	total, _ := sum.Sum()
	mean = total / float64(n)
	sq := newPairwiseStream(n)
	dev := make([]float64, longest)
	for _, g := range segs {
		d := dev[:len(g)]
		for i, v := range g {
			x := v - mean
			d[i] = x * x
		}
		sq.AddSlice(d)
	}
	total, _ = sq.Sum()
	return mean, math.Sqrt(total / float64(n))
}
