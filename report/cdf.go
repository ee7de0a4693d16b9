package report

import (
	"encoding/json"
	"strconv"

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
		line.AddSeries(s.Name, cdfPoints(s.Dist), charts.WithLineChartOpts(lc))
	}
	line.Validate()
	return json.Marshal(line.JSON())
}
