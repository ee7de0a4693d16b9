package report

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// A Dataset is one labelled set of requests to report on: an observed trace
// or a simulated replay, with the runs its requests belong to.
type Dataset struct {
	Name     string // legend and heading label; unique within a report
	Runs     []trace.Run
	Requests []*trace.Request
}

//go:embed assets/echarts.min.js
var echartsJS string

//go:embed assets/report.html.tmpl
var pageTemplate string

var htmlPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":   formatMS,
	"num":  formatNum,
	"rate": formatRate,
}).Parse(pageTemplate))

// htmlMetrics are the latency metrics of the report, in table and chart
// order.
var htmlMetrics = []struct {
	ID, Title string
	dist      func(*analyze.Summary) analyze.Dist
}{
	{"ttft", "TTFT", func(s *analyze.Summary) analyze.Dist { return s.TTFT }},
	{"tpot", "TPOT", func(s *analyze.Summary) analyze.Dist { return s.TPOT }},
	{"itl", "ITL", func(s *analyze.Summary) analyze.Dist { return s.ITL }},
	{"e2e", "E2E", func(s *analyze.Summary) analyze.Dist { return s.E2E }},
}

// pageData is what the template renders.
type pageData struct {
	Title    string
	Datasets []datasetView
	Charts   []chartView
	Script   template.JS // echarts.min.js, inlined so the page works offline
}

type datasetView struct {
	Name     string
	Runs     []runView
	Measured bool // some run's duration was measured from request times
}

// A runView is one row group of a dataset's tables. Pooled marks the
// all-runs row of a dataset with several runs: its latencies pool the runs,
// but it has no duration, since runs are separate spans of time.
type runView struct {
	Label   string
	Run     trace.Run
	Pooled  bool
	Sum     *analyze.Summary
	Latency []latencyRow
}

type latencyRow struct {
	Metric string
	N      int
	Dist   analyze.Dist
}

type chartView struct {
	ID     string
	Option template.JS
}

// WriteHTML writes an offline, self-contained HTML report comparing
// datasets: a summary table per dataset and run (requests, duration,
// throughputs, TTFT/TPOT/ITL/E2E mean, median, p90 and p99 in ms) and one
// CDF chart per metric with one series per dataset. The same datasets
// always give the same bytes.
//
// The page embeds ECharts and a self-check script that, once the charts are
// drawn, writes into <pre id="selfcheck"> a JSON object: for every chart id
// its series names and point counts, plus any script errors. Browser tests
// read it; users never see it.
func WriteHTML(w io.Writer, datasets []Dataset) error {
	if len(datasets) == 0 {
		return errors.New("report: no datasets")
	}
	seen := map[string]bool{}
	data := pageData{Title: "opaltrace report", Script: template.JS(echartsJS)}
	pooled := make([]*analyze.Summary, len(datasets))
	for i, ds := range datasets {
		switch {
		case strings.TrimSpace(ds.Name) == "":
			return fmt.Errorf("report: dataset %d: name: empty", i+1)
		case seen[ds.Name]:
			return fmt.Errorf("report: dataset %d: name: %q used twice", i+1, ds.Name)
		}
		seen[ds.Name] = true
		view, all := datasetSummary(ds)
		data.Datasets = append(data.Datasets, view)
		pooled[i] = all
	}
	for _, m := range htmlMetrics {
		series := make([]cdfSeries, len(datasets))
		for i, ds := range datasets {
			series[i] = cdfSeries{Name: ds.Name, Dist: m.dist(pooled[i])}
		}
		id := "cdf-" + m.ID
		opt, err := cdfOption(id, m.Title, series)
		if err != nil {
			return fmt.Errorf("report: %s chart: %w", m.Title, err)
		}
		data.Charts = append(data.Charts, chartView{ID: id, Option: template.JS(opt)})
	}
	// Render to memory first so a template error leaves w untouched.
	var buf bytes.Buffer
	if err := htmlPage.Execute(&buf, data); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// datasetSummary returns ds's table rows, one per run (analyze's grouping:
// runs in ds.Runs order, then runs only named by requests), plus a pooled
// row when there are several runs, and the pooled summary the charts draw.
func datasetSummary(ds Dataset) (datasetView, *analyze.Summary) {
	view := datasetView{Name: ds.Name}
	sums := analyze.SummarizeRuns(ds.Runs, ds.Requests)
	if len(sums) == 0 {
		// Neither runs nor requests: still one (empty) row.
		sums = []*analyze.Summary{analyze.Summarize(trace.Run{Name: ds.Name}, nil)}
	}
	for _, s := range sums {
		view.Runs = append(view.Runs, runView{Label: runLabel(s.Run), Run: s.Run, Sum: s, Latency: latencyRows(s)})
		view.Measured = view.Measured || s.DurationMeasured
	}
	if len(sums) == 1 {
		return view, sums[0]
	}
	all := analyze.Summarize(trace.Run{Name: ds.Name}, ds.Requests)
	view.Runs = append(view.Runs, runView{Label: "all runs", Pooled: true, Sum: all, Latency: latencyRows(all)})
	return view, all
}

func latencyRows(s *analyze.Summary) []latencyRow {
	rows := make([]latencyRow, len(htmlMetrics))
	for i, m := range htmlMetrics {
		d := m.dist(s)
		rows[i] = latencyRow{Metric: m.Title, N: d.N(), Dist: d}
	}
	return rows
}

func runLabel(r trace.Run) string {
	label := r.Name
	if label == "" {
		label = "(unnamed run)"
	}
	if r.Stage != "" {
		label += " / " + r.Stage
	}
	return label
}

// formatMS formats seconds as milliseconds with two decimals, as vLLM's
// summary prints them.
func formatMS(sec float64) string { return fmt.Sprintf("%.2f", sec*1000) }

// formatNum formats a duration or throughput with two decimals, or "–" when
// unknown (0).
func formatNum(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// formatRate is formatNum for a throughput whose duration is unknown.
func formatRate(v, durationSec float64) string {
	if durationSec == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}
