package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/opaltrace/opaltrace/analyze"
)

// maxCDFPoints caps the quantiles drawn per series: enough for a smooth
// curve at any screen width, and it bounds the report's size whatever the
// number of requests (a replay of 12,000 requests pools millions of ITLs).
const maxCDFPoints = 2000

// A cdfSeries is one dataset's distribution of one metric.
type cdfSeries struct {
	Name string
	Dist analyze.Dist // seconds
}

// A point is one CDF point: latency in ms and cumulative probability.
type point struct{ MS, P float64 }

// MarshalJSON writes the point as [ms, p] with 6 significant digits: the
// quantiles are exact, but more digits than a chart can show would only
// double the page's size.
func (p point) MarshalJSON() ([]byte, error) {
	b := append([]byte{'['}, strconv.FormatFloat(p.MS, 'g', 6, 64)...)
	b = append(b, ',')
	b = strconv.AppendFloat(b, p.P, 'g', 6, 64)
	return append(b, ']'), nil
}

// cdfPoints returns at most maxCDFPoints+1 exact quantiles of d, in ms.
// When every value is drawn, the curve starts at (min, 0), so that the step
// at the smallest value shows as the others do.
func cdfPoints(d analyze.Dist) []opts.LineData {
	values, probs := d.Quantiles(maxCDFPoints)
	data := make([]opts.LineData, 0, len(values)+1)
	if len(values) > 0 && probs[0] > 0 {
		data = append(data, opts.LineData{Value: point{values[0] * 1000, 0}})
	}
	for i := range values {
		data = append(data, opts.LineData{Value: point{values[i] * 1000, probs[i]}})
	}
	return data
}

// cdfOption returns the ECharts option (JSON) of a CDF overlay chart of
// one metric, one series per dataset. The option is built with go-echarts
// but marshalled here: go-echarts' own page templates load echarts from a
// CDN and give charts random ids, and the report must be offline and
// byte-for-byte reproducible. json.Marshal sorts map keys and escapes <, >
// and &, so the result is deterministic and safe inside a <script>.
func cdfOption(id, title string, series []cdfSeries) ([]byte, error) {
	line := charts.NewLine()
	line.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{ChartID: id}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: title + " CDF"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "28"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		// Room at the bottom for the axis name above the zoom slider.
		charts.WithGridOpts(opts.Grid{Top: "70", Bottom: "95", Left: "60", Right: "40"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: title + " (ms)", NameLocation: "middle", NameGap: 28, Scale: opts.Bool(true)}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "fraction ≤ x", Min: 0, Max: 1}),
		charts.WithDataZoomOpts(opts.DataZoom{Type: "slider", XAxisIndex: []int{0}}, opts.DataZoom{Type: "inside", XAxisIndex: []int{0}}),
	)
	for _, s := range series {
		lc := opts.LineChart{ShowSymbol: opts.Bool(false)}
		if s.Dist.N() <= maxCDFPoints {
			// Every value is drawn: the empirical CDF is a step function,
			// flat until the next value. Quantiles of a larger set are
			// joined by straight lines instead, which is what they sample.
			lc.Step = "end"
		}
		line.AddSeries(safeLabel(s.Name), cdfPoints(s.Dist), charts.WithLineChartOpts(lc))
	}
	line.Validate()
	return json.Marshal(line.JSON())
}

// tailPercentiles are the percentiles the tail view adds beyond the CDF's
// evenly spaced quantiles (whose last step below 1 is 0.05 %), so p99.9
// and p99.99 read on a large run. A summary by passes selects them too
// (HTMLStreamOptions).
var tailPercentiles = []float64{99.5, 99.9, 99.95, 99.99, 99.995, 99.999}

// tailPoints returns the tail of d as (ms, 1 − F) points for a log axis:
// the CDF quantiles from the median on, and tailPercentiles, keeping only
// probabilities a run of d.N() values resolves ((1 − p)·n ≥ 1) and
// dropping 1 − F = 0, which a log axis cannot show.
func tailPoints(d analyze.Dist) []point {
	n := d.N()
	if n == 0 {
		return nil
	}
	type pv struct{ p, v float64 }
	var pts []pv
	values, probs := d.Quantiles(maxCDFPoints)
	for i := range values {
		if probs[i] >= 0.5 && (1-probs[i])*float64(n) >= 1 {
			pts = append(pts, pv{probs[i], values[i]})
		}
	}
	if n > maxCDFPoints {
		// Beyond the quantiles: exact percentiles (a Dist in memory has
		// them all; one by passes selected these).
		for _, p := range tailPercentiles {
			if q := p / 100; (1-q)*float64(n) >= 1 {
				pts = append(pts, pv{q, d.Percentile(p)})
			}
		}
	}
	slices.SortStableFunc(pts, func(a, b pv) int { return cmp.Compare(a.p, b.p) })
	out := make([]point, 0, len(pts))
	for i, x := range pts {
		if i > 0 && x.p == pts[i-1].p {
			continue
		}
		out = append(out, point{x.v * 1000, 1 - x.p})
	}
	return out
}

// distSection is the distributions: per metric a CDF (with a log-x
// toggle) and a tail view, 1 − CDF on a log axis, one series per dataset.
func distSection(sets []reportSet, _ HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "dist", Title: "Latency distributions",
		Intro: "Each CDF is drawn from at most 2,001 exact quantiles of its distribution (all runs of a dataset pooled); " +
			"the tail view plots 1 − CDF on a log axis, so p99 and p99.9 read, from those quantiles and exact p99.5 … p99.999 " +
			"where the run has enough values."}
	for _, m := range htmlMetrics {
		// A dataset without values for the metric (a summary-only run,
		// which reported statistics only) has no curve: an empty series
		// would stand in the legend for a distribution nobody measured.
		var cdfs []cdfSeries
		var tails []series
		var none []string
		for _, s := range sets {
			d := m.dist(s.pooled)
			if d.N() == 0 {
				none = append(none, s.name)
				continue
			}
			cdfs = append(cdfs, cdfSeries{Name: s.name, Dist: d})
			if pts := tailPoints(d); len(pts) > 0 {
				tails = append(tails, series{Name: s.name, Data: pts})
			}
		}
		if len(cdfs) == 0 {
			sec.Notes = append(sec.Notes, m.Title+": no dataset has per-request values.")
			continue
		}
		if len(none) > 0 {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: no per-request values in %s (its source reported statistics only: see the summary).", m.Title, strings.Join(none, ", ")))
		}
		id := "cdf-" + m.ID
		opt, err := cdfOption(id, m.Title, cdfs)
		if err != nil {
			return sec, fmt.Errorf("report: %s chart: %w", m.Title, err)
		}
		sec.Charts = append(sec.Charts, chartView{ID: id, Title: m.Title + " CDF", Option: template.JS(opt), LogX: true})
		if len(tails) == 0 {
			continue
		}
		v, err := chart{ID: "tail-" + m.ID, Title: m.Title + " tail (1 − CDF)",
			X: axis{Name: m.Title + " (ms)"}, Y: axis{Name: "fraction > x", Type: "log"}, Series: tails}.view()
		if err != nil {
			return sec, err
		}
		v.LogX = true
		sec.Charts = append(sec.Charts, v)
	}
	return sec, nil
}
