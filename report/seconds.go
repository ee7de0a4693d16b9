package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// maxSecondsPoints caps the points of a per-second series: longer runs
// are drawn as means over buckets of several seconds, which the chart's
// title says.
const maxSecondsPoints = 2000

// A secondsView is one run of a per-second file: its table (rows of the
// table model) for the page.
type secondsView struct {
	Run  string
	Rows []secondsCell
}

type secondsCell struct{ Label, Value string }

// secondsViews returns the tables and charts of the runs of a replay's
// per-second file: KV cache usage as a fraction of its capacity, and the
// running and waiting requests, over time.
func secondsViews(runs []trace.SecondsRun) ([]secondsView, []chartView, error) {
	var views []secondsView
	for _, r := range runs {
		s := analyze.SummarizeSeconds(r)
		v := secondsView{Run: r.Run}
		for _, c := range secondsTable(&s) {
			if c.kind != rowValue || c.label == "" {
				continue
			}
			val := c.shown
			if val == "" {
				if f, ok := toFloat(c.value); ok && c.fixed {
					val = fmt.Sprintf("%.2f", f)
				} else {
					val = fmt.Sprint(c.value)
				}
			}
			v.Rows = append(v.Rows, secondsCell{Label: c.label, Value: val})
		}
		views = append(views, v)
	}
	var out []chartView
	for _, ch := range []struct {
		id, title, y string
		value        func(trace.SecondsRun, trace.Second) float64
		need         func(trace.SecondsRun) bool
	}{
		{"sec-kv", "KV cache usage", "% of capacity", func(r trace.SecondsRun, s trace.Second) float64 { return 100 * r.KVUsage(s) },
			func(r trace.SecondsRun) bool { return r.KVBlocks > 0 }},
		{"sec-running", "Running requests", "requests", func(_ trace.SecondsRun, s trace.Second) float64 { return s.Running }, nil},
		{"sec-waiting", "Waiting requests", "requests", func(_ trace.SecondsRun, s trace.Second) float64 { return s.Waiting }, nil},
	} {
		line := charts.NewLine()
		bucket := 1
		for _, r := range runs {
			bucket = max(bucket, int(math.Ceil(float64(len(r.Seconds))/maxSecondsPoints)))
		}
		title := ch.title + " per second"
		if bucket > 1 {
			title = fmt.Sprintf("%s (means over %d s)", ch.title, bucket)
		}
		line.SetGlobalOptions(
			charts.WithInitializationOpts(opts.Initialization{ChartID: ch.id}),
			charts.WithAnimation(false),
			charts.WithTitleOpts(opts.Title{Title: title}),
			charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "28"}),
			charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
			charts.WithGridOpts(opts.Grid{Top: "70", Bottom: "95", Left: "60", Right: "40"}),
			charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: "simulated time (s)", NameLocation: "middle", NameGap: 28}),
			charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: ch.y, Min: 0}),
			charts.WithDataZoomOpts(opts.DataZoom{Type: "slider", XAxisIndex: []int{0}}, opts.DataZoom{Type: "inside", XAxisIndex: []int{0}}),
		)
		drawn := 0
		for _, r := range runs {
			if ch.need != nil && !ch.need(r) {
				continue
			}
			var data []opts.LineData
			for i := 0; i < len(r.Seconds); i += bucket {
				part := r.Seconds[i:min(i+bucket, len(r.Seconds))]
				sum := 0.0
				for _, s := range part {
					sum += ch.value(r, s)
				}
				data = append(data, opts.LineData{Value: point{float64(part[0].Second), sum / float64(len(part))}})
			}
			line.AddSeries(r.Run, data, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
			drawn++
		}
		if drawn == 0 {
			continue
		}
		line.Validate()
		b, err := json.Marshal(line.JSON())
		if err != nil {
			return nil, nil, fmt.Errorf("report: %s chart: %w", ch.title, err)
		}
		out = append(out, chartView{ID: ch.id, Option: template.JS(b)})
	}
	return views, out, nil
}
