package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
)

// WriteComparison prints a comparison of two datasets: per metric the KS
// and W1 distances and a verdict, and per statistic both values, the
// absolute and relative difference and its bootstrap interval.
func WriteComparison(w io.Writer, c *analyze.Comparison) error {
	var b strings.Builder
	writeComparison(&b, c)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteComparisons prints each comparison (one per pair of runs), then,
// when there are several, one line per pair: the relative difference of
// the medians and the verdict of each metric.
func WriteComparisons(w io.Writer, cs []*analyze.Comparison) error {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeComparison(&b, c)
	}
	if len(cs) > 1 {
		b.WriteByte('\n')
		writeComparisonTable(&b, cs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeComparison(b *strings.Builder, c *analyze.Comparison) {
	fmt.Fprintf(b, "%s\n", center(" Comparison ", 50, '='))
	fmt.Fprintf(b, "A: %s\nB: %s\n", c.A, c.B)
	fmt.Fprintf(b, "Relative difference (B−A)/A with %d bootstrap resamples (95%% interval); verdict against ±%g%%.\n", c.Resamples, c.Margin*100)
	for _, warn := range c.Warnings {
		fmt.Fprintf(b, "Warning: %s.\n", warn)
	}
	for _, m := range c.Metrics {
		fmt.Fprintf(b, "%s\n", center(" "+strings.ToUpper(m.Metric)+": "+m.Verdict+" ", 50, '-'))
		if m.Verdict == analyze.VerdictNoData {
			fmt.Fprintf(b, "n: A %d, B %d\n", m.NA, m.NB)
			continue
		}
		if m.AReported || m.BReported {
			fmt.Fprintf(b, "n: A %s, B %s; the interval covers the sampling of the side with values only\n", sideN(m.NA, m.AReported), sideN(m.NB, m.BReported))
		} else {
			fmt.Fprintf(b, "n: A %d, B %d; KS distance %.4f; Wasserstein-1 %.4f ms\n", m.NA, m.NB, m.KS, m.W1*1000)
		}
		if m.ByRequest {
			fmt.Fprintf(b, "Resampled by request (%d resamples): a request's gaps are drawn together.\n", m.Resamples)
		}
		fmt.Fprintf(b, "%-6s %11s %11s %11s %9s %21s  %s\n", "stat", "A ms", "B ms", "B−A ms", "rel", "95% interval", "verdict")
		for _, s := range m.Stats {
			fmt.Fprintf(b, "%-6s %11.3f %11.3f %11.3f %8.2f%% [%8.2f%%, %8.2f%%]  %s\n",
				s.Stat, s.A*1000, s.B*1000, s.AbsDiff*1000, s.RelDiff*100, s.CILo*100, s.CIHi*100, s.Verdict)
		}
	}
	b.WriteString(strings.Repeat("=", 50))
	b.WriteByte('\n')
}

// sideN says how many values a side has, or that its figures are the
// source's own summary.
func sideN(n int, reported bool) string {
	if reported {
		return "reported by source"
	}
	return fmt.Sprint(n)
}

// writeComparisonTable prints one line per comparison: A's name, then per
// metric the relative difference of the medians (or "-") and the verdict.
func writeComparisonTable(b *strings.Builder, cs []*analyze.Comparison) {
	fmt.Fprintf(b, "%s\n", center(" Comparison by run: median (B−A)/A, verdict ", 50, '='))
	width := len("A")
	for _, c := range cs {
		width = max(width, len(c.A))
	}
	fmt.Fprintf(b, "%-*s", width, "A")
	for _, m := range cs[0].Metrics {
		fmt.Fprintf(b, "  %-22s", strings.ToUpper(m.Metric))
	}
	b.WriteByte('\n')
	for _, c := range cs {
		fmt.Fprintf(b, "%-*s", width, c.A)
		for _, m := range c.Metrics {
			rel := "-"
			for _, s := range m.Stats {
				if s.Stat == "p50" && !math.IsNaN(s.RelDiff) {
					rel = fmt.Sprintf("%+.1f%%", s.RelDiff*100)
				}
			}
			fmt.Fprintf(b, "  %-22s", fmt.Sprintf("%8s %s", rel, m.Verdict))
		}
		b.WriteByte('\n')
	}
	b.WriteString(strings.Repeat("=", 50))
	b.WriteByte('\n')
}

// ComparisonJSON returns the comparison as JSON (seconds as ms, like the
// stats keys; relative values as fractions; NaN as null).
func ComparisonJSON(c *analyze.Comparison) ([]byte, error) {
	return json.MarshalIndent(comparisonObject(c), "", "  ")
}

// ComparisonsJSON returns the comparisons as a JSON array, one object per
// pair of runs as ComparisonJSON writes it.
func ComparisonsJSON(cs []*analyze.Comparison) ([]byte, error) {
	objs := make([]orderedJSON, len(cs))
	for i, c := range cs {
		objs[i] = comparisonObject(c)
	}
	return json.MarshalIndent(objs, "", "  ")
}

func comparisonObject(c *analyze.Comparison) orderedJSON {
	o := orderedJSON{}
	o.add("a", c.A)
	o.add("b", c.B)
	o.add("margin", c.Margin)
	o.add("resamples", c.Resamples)
	if len(c.Warnings) > 0 {
		o.add("warnings", c.Warnings)
	}
	var ms []orderedJSON
	for _, m := range c.Metrics {
		mj := orderedJSON{}
		mj.add("metric", m.Metric)
		mj.add("n_a", m.NA)
		mj.add("n_b", m.NB)
		if m.AReported {
			mj.add("a_reported", true)
		}
		if m.BReported {
			mj.add("b_reported", true)
		}
		mj.add("verdict", m.Verdict)
		if m.ByRequest {
			mj.add("resampled_by", "request")
		}
		if m.Verdict != analyze.VerdictNoData {
			mj.add("ks", m.KS)
			mj.add("w1_ms", m.W1*1000)
			var ss []orderedJSON
			for _, s := range m.Stats {
				sj := orderedJSON{}
				sj.add("stat", s.Stat)
				sj.add("a_ms", s.A*1000)
				sj.add("b_ms", s.B*1000)
				sj.add("diff_ms", s.AbsDiff*1000)
				sj.add("rel_diff", s.RelDiff)
				sj.add("rel_ci_low", s.CILo)
				sj.add("rel_ci_high", s.CIHi)
				sj.add("verdict", s.Verdict)
				ss = append(ss, sj)
			}
			mj.add("stats", ss)
		}
		ms = append(ms, mj)
	}
	o.add("metrics", ms)
	return o
}
