package analyze

import (
	"math"
	"slices"
	"sort"
)

// This file transcribes GuideLLM 0.5's statistics
// (guidellm/schemas/statistics.py, DistributionSummary) operation by
// operation, including numpy's pairwise np.sum and sequential np.cumsum,
// so that --as-source reproduces the printed numbers to the last bits.

// guideLLMEpsilon is DistributionSummary's default epsilon.
const guideLLMEpsilon = 1e-6

// guideLLMThreshold is the merge threshold of the rate and concurrency
// distributions (1/10th of a millisecond).
const guideLLMThreshold = 1e-4

// vw is one (value, weight) row.
type vw struct{ v, w float64 }

// guideLLMFromValues is DistributionSummary.from_values: count is the
// rounded sum of weights unless given (count < 0 means not given).
func guideLLMFromValues(name, ours, unit string, rows []vw, count int) SourceMetric {
	m := SourceMetric{Name: name, Ours: ours, Unit: unit}
	if len(rows) == 0 {
		// from_pdf on an empty PDF: all zero, count 0 whatever was asked.
		for _, k := range guideLLMKeys {
			m.Percentiles = append(m.Percentiles, SourcePercentile{k.key, 0})
		}
		return m
	}
	if count < 0 {
		ws := make([]float64, len(rows))
		for i, r := range rows {
			ws[i] = r.w
		}
		count = int(math.RoundToEven(pairwiseSum(ws)))
	}
	sorted := slices.Clone(rows)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].v < sorted[j].v })
	// np.unique + np.add.at in sorted order, then drop zero weights.
	var uniq, w []float64
	for _, r := range sorted {
		if len(uniq) > 0 && uniq[len(uniq)-1] == r.v {
			w[len(w)-1] += r.w
			continue
		}
		uniq = append(uniq, r.v)
		w = append(w, r.w)
	}
	var vals, ws []float64
	for i := range uniq {
		if w[i] > 0 {
			vals = append(vals, uniq[i])
			ws = append(ws, w[i])
		}
	}
	total := pairwiseSum(ws)
	if total <= guideLLMEpsilon {
		ws = make([]float64, len(vals))
		for i := range ws {
			ws[i] = 1
		}
		total = pairwiseSum(ws)
	}
	m.Count = count
	return guideLLMFromPDF(m, vals, ws, total)
}

// guideLLMFromPDF is DistributionSummary.from_pdf over values with
// weights ws summing to total.
func guideLLMFromPDF(m SourceMetric, vals, ws []float64, total float64) SourceMetric {
	if len(vals) == 0 {
		for _, k := range guideLLMKeys {
			m.Percentiles = append(m.Percentiles, SourcePercentile{k.key, 0})
		}
		return m
	}
	prob := make([]float64, len(ws))
	cdf := make([]float64, len(ws))
	c := 0.0
	mode := 0
	for i := range ws {
		prob[i] = ws[i] / total
		c += prob[i] // np.cumsum adds left to right
		cdf[i] = c
		if prob[i] > prob[mode] { // np.argmax: the first maximum
			mode = i
		}
	}
	at := func(q float64) float64 {
		i, _ := slices.BinarySearch(cdf, q) // searchsorted side="left"
		return vals[min(i, len(vals)-1)]
	}
	prods := make([]float64, len(vals))
	for i := range vals {
		prods[i] = vals[i] * prob[i]
	}
	m.Mean = pairwiseSum(prods) // np.sum(values * probabilities)
	for i := range vals {
		d := vals[i] - m.Mean
		prods[i] = d * d * prob[i]
	}
	m.Variance = pairwiseSum(prods)
	m.Std = math.Sqrt(m.Variance)
	m.Mode = vals[mode]
	m.Min, m.Max = vals[0], vals[len(vals)-1]
	m.Median = at(0.5)
	m.TotalSum = m.Mean * float64(m.Count)
	for _, k := range guideLLMKeys {
		m.Percentiles = append(m.Percentiles, SourcePercentile{k.key, at(k.q)})
	}
	return m
}

// guideLLMMerge is _merge_sorted_times_with_weights: equal times are
// summed, then runs of times within threshold of a run's first time are
// collapsed onto it, until no two neighbours are within threshold.
func guideLLMMerge(rows []vw, threshold float64) []vw {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].v < rows[j].v })
	var out []vw
	for _, r := range rows {
		if len(out) > 0 && out[len(out)-1].v == r.v {
			out[len(out)-1].w += r.w
			continue
		}
		out = append(out, r)
	}
	for len(out) > 1 {
		n := len(out)
		within := make([]bool, n-1)
		anyWithin := false
		for i := 0; i < n-1; i++ {
			within[i] = out[i+1].v-out[i].v <= threshold
			anyWithin = anyWithin || within[i]
		}
		if !anyWithin {
			break
		}
		var starts, ends []int
		for i := range within {
			if within[i] && (i == 0 || !within[i-1]) {
				starts = append(starts, i)
				lim := out[i].v + threshold
				ends = append(ends, sort.Search(n, func(j int) bool { return out[j].v > lim })-1)
			}
		}
		// Drop groups that start inside the previous (unfiltered) group.
		var s2, e2 []int
		for k := range starts {
			if k == 0 || starts[k] > ends[k-1] {
				s2, e2 = append(s2, starts[k]), append(e2, ends[k])
			}
		}
		cum := make([]float64, n+1)
		for i := range out {
			cum[i+1] = cum[i] + out[i].w
		}
		remove := make([]int, n+1)
		for k := range s2 {
			out[s2[k]].w = cum[e2[k]+1] - cum[s2[k]]
			remove[s2[k]]++
			remove[e2[k]+1]--
		}
		next := out[:0:0]
		depth := 0
		isStart := map[int]bool{}
		for _, s := range s2 {
			isStart[s] = true
		}
		for i := 0; i < n; i++ {
			depth += remove[i]
			if depth > 0 && !isStart[i] {
				continue
			}
			next = append(next, out[i])
		}
		out = next
	}
	return out
}

// guideLLMRate is DistributionSummary.rate_distribution_from_timings:
// events (time, occurrences), optionally windowed; each event's rate is its
// occurrences over the time to the midpoints with its neighbours, weighted
// by that duration.
func guideLLMRate(name, ours, unit string, events []vw, start, end *float64) SourceMetric {
	var rows []vw
	if start != nil {
		rows = append(rows, vw{*start, 0})
	}
	for _, e := range events {
		if (start == nil || e.v >= *start) && (end == nil || e.v <= *end) {
			rows = append(rows, e)
		}
	}
	if end != nil {
		rows = append(rows, vw{*end, 0})
	}
	rows = guideLLMMerge(rows, guideLLMThreshold)
	if len(rows) <= 1 {
		return guideLLMFromValues(name, ours, unit, nil, len(rows))
	}
	n := len(rows)
	mid := make([]float64, n-1)
	for i := range mid {
		mid[i] = (rows[i+1].v + rows[i].v) / 2
	}
	dur := make([]float64, n)
	dur[0] = mid[0] - rows[0].v
	for i := 1; i < n-1; i++ {
		dur[i] = mid[i] - mid[i-1]
	}
	dur[n-1] = math.Max(rows[n-1].v-mid[n-2], guideLLMEpsilon)
	occ := make([]float64, n)
	out := make([]vw, n)
	for i := range rows {
		occ[i] = rows[i].w
		out[i] = vw{rows[i].w / dur[i], dur[i]}
	}
	return guideLLMFromValues(name, ours, unit, out, int(math.RoundToEven(pairwiseSum(occ))))
}

// An interval is a (start, end, weight) row of a concurrency distribution.
type interval struct{ s, e, w float64 }

// guideLLMConcurrency is
// DistributionSummary.concurrency_distribution_from_timings: the level of
// overlapping intervals over the window, weighted by how long it held.
func guideLLMConcurrency(name, ours, unit string, ivs []interval, start, end *float64) SourceMetric {
	var kept []interval
	for _, iv := range ivs {
		if (start == nil || iv.e >= *start) && (end == nil || iv.s <= *end) {
			kept = append(kept, iv)
		}
	}
	count := len(kept)
	var rows []vw
	for _, iv := range kept {
		rows = append(rows, vw{iv.s, iv.w})
	}
	for _, iv := range kept {
		rows = append(rows, vw{iv.e, -iv.w})
	}
	rows = guideLLMMerge(rows, guideLLMThreshold)
	if start != nil && len(rows) > 0 {
		i := sort.Search(len(rows), func(j int) bool { return rows[j].v >= *start })
		prior := 0.0
		if i > 0 {
			ws := make([]float64, i)
			for j := range ws {
				ws[j] = rows[j].w
			}
			prior = pairwiseSum(ws)
		}
		rows = append([]vw{{*start, prior}}, rows[i:]...)
	}
	if end != nil && len(rows) > 0 {
		i := sort.Search(len(rows), func(j int) bool { return rows[j].v > *end })
		rows = append(rows[:i:i], vw{*end, 0})
	}
	conc := make([]float64, len(rows))
	c := 0.0
	for i, r := range rows {
		c += r.w
		conc[i] = math.Max(c, 0)
	}
	if len(conc) <= 1 {
		if count == 0 {
			return guideLLMFromValues(name, ours, unit, nil, -1)
		}
		return guideLLMFromValues(name, ours, unit, []vw{{conc[0], 1}}, -1)
	}
	vals := make([]vw, len(rows)-1)
	positive := false
	for i := range vals {
		d := math.Max(rows[i+1].v-rows[i].v, 0)
		positive = positive || d > 0
		vals[i] = vw{conc[i], d}
	}
	if !positive {
		return guideLLMFromValues(name, ours, unit, nil, count)
	}
	return guideLLMFromValues(name, ours, unit, vals, count)
}

// guideLLMHasIterations reports whether every request carries GuideLLM's
// stream iteration counts (GuideLLM would read a missing one as 0, which
// for a file that never wrote them would be a made-up number).
func guideLLMHasIterations(reqs []guideLLMReq) bool {
	for _, q := range reqs {
		if !q.iterOK {
			return false
		}
	}
	return len(reqs) > 0
}

// iterTimings is GenerativeRequestStats.iter_tokens_timings: GuideLLM
// does not know when each streamed iteration came nor how many tokens it
// held, so it places token_iterations iterations evenly from the first to
// the last token (np.linspace) and gives each after the first
// (output − 1)/(token_iterations − 1) tokens.
func (q guideLLMReq) iterTimings() []vw {
	n := int(q.tokenEvents)
	if !q.first.OK || !q.last.OK || !q.outOK || q.output <= 1 || n <= 1 {
		return nil
	}
	tok := (q.output - 1) / (q.tokenEvents - 1)
	out := make([]vw, 0, n-1)
	for i := 1; i < n; i++ {
		out = append(out, vw{linspaceAt(q.first.V, q.last.V, n, i), tok})
	}
	return out
}

// linspaceAt is np.linspace(start, stop, n)[i] for n > 1: i·step + start
// rounded after each operation (the explicit conversion keeps Go from
// fusing them into one FMA), the last point exactly stop.
func linspaceAt(start, stop float64, n, i int) float64 {
	if i == n-1 {
		return stop
	}
	div := float64(n - 1)
	delta := stop - start
	step := delta / div
	if step == 0 {
		return float64(float64(i)/div*delta) + start
	}
	return float64(float64(i)*step) + start
}

// outputTimings is GenerativeRequestStats.output_tokens_timings, given
// the request's iterTimings: one token at the first token then the
// iterations; without iteration data, every output token at the last
// token (else the end of the request).
func (q guideLLMReq) outputTimings(iter []vw) []vw {
	if !q.first.OK || !q.last.OK || q.tokenEvents <= 1 {
		at := q.end
		if q.last.OK {
			at = q.last.V
		}
		return []vw{{at, q.output}}
	}
	one := 0.0
	if q.output != 0 {
		one = 1
	}
	return append([]vw{{q.first.V, one}}, iter...)
}
