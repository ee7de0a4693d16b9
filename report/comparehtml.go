package report

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// compareSection compares every other dataset with the first (the
// reference, e.g. observed), run by run: runs are paired by name, else in
// order when both have as many, else the pooled distributions are. Each
// pair gets analyze.Compare's relative differences with bootstrap
// intervals and verdicts; where the reference has no per-request values
// but its source reported them (a summary-only run), the point difference
// is shown without an interval.
func compareSection(sets []reportSet, o HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "compare", Title: "Compared with " + sets[0].name}
	if len(sets) < 2 || o.NoCompare {
		return sec, nil
	}
	opts := o.Compare
	margin, conf, resamples := cmp.Or(opts.Margin, 0.05), cmp.Or(opts.Confidence, 0.95), cmp.Or(opts.Resamples, 1000)
	sec.Intro = fmt.Sprintf("Relative difference (other − %s) / %s per metric and statistic, with a %g %% bootstrap interval "+
		"(%d resamples) and a verdict against a ±%g %% margin: within (the whole interval inside), "+
		"outside (the whole interval beyond), inconclusive (it straddles the margin). The pooled ITL is resampled by request "+
		"(each drawn request brings all its gaps, which are correlated), fewer times when gaps run to millions. "+
		"Values a source only reported are point differences. Runs are paired by name, else in order.",
		sets[0].name, sets[0].name, 100*conf, resamples, 100*margin)
	ref := sets[0]
	// A sweep's runs are named alike: the caption says what sets each
	// apart (trace.RunLabels: "#3 … rate=4").
	what := map[*analyze.Summary]string{}
	if len(ref.sums) > 1 {
		for i, l := range trace.RunLabels(runsOf(ref.sums)) {
			what[ref.sums[i]] = " (" + safeLabel(l) + ")"
		}
	}
	for _, other := range sets[1:] {
		pairs, unpaired := pairRuns(ref, other)
		if len(unpaired) > 0 {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: not compared (%d runs of %s that no run of %s replays): %s",
				other.name, len(unpaired), ref.name, other.name, strings.Join(unpaired, "; ")))
		}
		for _, p := range pairs {
			tv := tableView{Caption: fmt.Sprintf("%s%s vs %s", p.label(ref.name), what[p.a], p.labelB(other.name)),
				Head: []string{"metric", "stat", ref.name + " (ms)", other.name + " (ms)", "difference", "95 % interval", "verdict"}}
			if streamed(p.a) || streamed(p.b) {
				sec.Notes = append(sec.Notes, tv.Caption+": not compared: a side was summarized by passes, which keeps no values to resample.")
				continue
			}
			// The pooled ITL is resampled by request: the per-run
			// summaries know each gap's request (datasetSummary), and a
			// resample draws one number per request, not per gap. The
			// pooled summaries of several runs do not (their millions of
			// gaps would cost a sort and 4 bytes each): compared pooled,
			// ITL gets point differences.
			a, b := *p.a, *p.b
			itlPoint := !byRequest(&a) || !byRequest(&b)
			if itlPoint {
				a.ITL, b.ITL = analyze.Dist{}, analyze.Dist{}
			}
			c := analyze.Compare(ref.name, &a, other.name, &b, opts)
			for _, m := range c.Metrics {
				if m.Verdict == analyze.VerdictNoData {
					why := "no interval (reported by source)"
					if m.Metric == "itl" && itlPoint {
						why = "no interval (pooled runs: gaps not resampled)"
					}
					tv.Rows = append(tv.Rows, pointRows(m.Metric, p.a, p.b, why)...)
					continue
				}
				for _, st := range m.Stats {
					iv := cell{V: missing}
					if !math.IsNaN(st.CILo) {
						iv.V = fmt.Sprintf("%+.1f %% … %+.1f %%", 100*st.CILo, 100*st.CIHi)
					}
					tv.Rows = append(tv.Rows, []cell{{V: metricTitle(m.Metric)}, {V: st.Stat}, {V: fmt.Sprintf("%.2f", st.A*1000)},
						{V: fmt.Sprintf("%.2f", st.B*1000)}, relCell(st.RelDiff), iv, {V: st.Verdict}})
				}
			}
			for _, w := range c.Warnings {
				sec.Notes = append(sec.Notes, tv.Caption+": "+w)
			}
			if len(tv.Rows) > 0 {
				sec.Tables = append(sec.Tables, tv)
			}
		}
	}
	return sec, nil
}

type runPair struct {
	a, b   *analyze.Summary
	pooled bool
}

func (p runPair) label(ds string) string {
	if p.pooled {
		return ds + " (all runs)"
	}
	return ds + " / " + safeLabel(runLabel(p.a.Run))
}

func (p runPair) labelB(ds string) string {
	if p.pooled {
		return ds + " (all runs)"
	}
	return ds + " / " + safeLabel(runLabel(p.b.Run))
}

// pairRuns pairs the runs of a and b: each run with the runs that replay
// it (analyze.PairRuns, by the replay_of a replay records; the runs no run
// replays are returned by label), else by name when every run of b names
// a run of a, else in order when they have as many, else the pooled ones.
func pairRuns(a, b reportSet) ([]runPair, []string) {
	if len(a.sums) == 1 && len(b.sums) == 1 {
		return []runPair{{a: a.sums[0], b: b.sums[0]}}, nil
	}
	if p, err := analyze.PairRuns(runsOf(a.sums), runsOf(b.sums), nil); err == nil && p.By == analyze.PairedByReplay {
		pairs := make([]runPair, len(p.Pairs))
		for i, rp := range p.Pairs {
			pairs[i] = runPair{a: a.sums[rp.A], b: b.sums[rp.B]}
		}
		unpaired := make([]string, len(p.Unpaired))
		for i, u := range p.Unpaired {
			unpaired[i] = safeLabel(u)
		}
		return pairs, unpaired
	}
	return pairByName(a, b), nil
}

// byRequest reports whether s's ITL can be resampled by request: it has
// no gaps, or it knows each gap's request.
func byRequest(s *analyze.Summary) bool {
	return s.ITL.N() == 0 || len(s.ITLRequests) == s.ITL.N()
}

// runsOf returns the runs of sums.
func runsOf(sums []*analyze.Summary) []trace.Run {
	runs := make([]trace.Run, len(sums))
	for i, s := range sums {
		runs[i] = s.Run
	}
	return runs
}

// pairByName pairs by name when every run of b names a run of a, else
// in order when they have as many, else the pooled ones.
func pairByName(a, b reportSet) []runPair {
	byName := map[string]*analyze.Summary{}
	for _, s := range a.sums {
		byName[runLabel(s.Run)] = s
	}
	var pairs []runPair
	for _, s := range b.sums {
		if r, ok := byName[runLabel(s.Run)]; ok {
			pairs = append(pairs, runPair{a: r, b: s})
		}
	}
	if len(pairs) == len(b.sums) {
		return pairs
	}
	if len(a.sums) == len(b.sums) {
		pairs = pairs[:0]
		for i := range a.sums {
			pairs = append(pairs, runPair{a: a.sums[i], b: b.sums[i]})
		}
		return pairs
	}
	return []runPair{{a: a.pooled, b: b.pooled, pooled: true}}
}

func metricTitle(key string) string {
	for _, m := range htmlMetrics {
		if m.key == key {
			return m.Title
		}
	}
	return key
}

func relCell(rel float64) cell {
	if math.IsNaN(rel) {
		return cell{V: missing}
	}
	return cell{V: fmt.Sprintf("%+.1f %%", 100*rel)}
}

// pointRows compares a metric without resampling, from the summaries'
// tables (per-request values, or those the source reported): mean,
// median and p99 as point differences, no interval, no verdict but why.
func pointRows(metric string, a, b *analyze.Summary, why string) [][]cell {
	ta, tb := summaryTable(a, htmlPercentiles), summaryTable(b, htmlPercentiles)
	var rows [][]cell
	for _, st := range []string{"mean", "median", "p99"} {
		key := st + "_" + metric + "_ms"
		_, okA := ta.lookup(key)
		_, okB := tb.lookup(key)
		if !okA || !okB {
			continue
		}
		va, vb := ta.float(key), tb.float(key)
		rel := math.NaN()
		if va != 0 {
			rel = (vb - va) / va
		}
		ca, cb := cell{V: fmt.Sprintf("%.2f", va)}, cell{V: fmt.Sprintf("%.2f", vb)}
		ca.Rep = a.Requests == 0 || metricDist(a, metric).N() == 0
		cb.Rep = b.Requests == 0 || metricDist(b, metric).N() == 0
		rows = append(rows, []cell{{V: metricTitle(metric)}, {V: st}, ca, cb, relCell(rel), {V: missing}, {V: why}})
	}
	return rows
}

func metricDist(s *analyze.Summary, key string) analyze.Dist {
	for _, m := range htmlMetrics {
		if m.key == key {
			return m.dist(s)
		}
	}
	return analyze.Dist{}
}

// streamed reports whether a summary was made by passes (its
// distributions keep selected quantiles, not values).
func streamed(s *analyze.Summary) bool {
	for _, m := range htmlMetrics {
		if m.dist(s).Streamed() {
			return true
		}
	}
	return false
}
