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
//
// A dataset too large for memory comes summarized instead (Summaries and
// Pooled set, Runs and Requests unused): analyze.SummarizeStreamGroups by
// run with HTMLStreamOptions, whose pooled summary is Pooled. The report
// is the same, byte for byte.
type Dataset struct {
	Name     string // legend and heading label; unique within a report
	Runs     []trace.Run
	Requests []*trace.Request

	Summaries []*analyze.Summary // per run, in analyze.GroupByRun's order
	Pooled    *analyze.Summary   // all requests: the charts' distributions
}

// HTMLStreamOptions are the quantiles the report reads from a summary
// made by passes: the tables' p90 and p99, and the charts' CDF points.
func HTMLStreamOptions() analyze.StreamOptions {
	return analyze.StreamOptions{Percentiles: []float64{90, 99}, CDFPoints: maxCDFPoints}
}

//go:embed assets/echarts.min.js
var echartsJS string

//go:embed assets/report.html.tmpl
var pageTemplate string

var htmlPage = template.Must(template.New("report").Parse(pageTemplate))

// htmlMetrics are the latency metrics of the report, in table and chart
// order, with their key in the summary's table model (statMetrics).
var htmlMetrics = []struct {
	ID, Title, key string
	dist           func(*analyze.Summary) analyze.Dist
}{
	{"ttft", "TTFT", "ttft", func(s *analyze.Summary) analyze.Dist { return s.TTFT }},
	{"tpot", "TPOT", "tpot", func(s *analyze.Summary) analyze.Dist { return s.TPOT }},
	{"itl", "ITL", "itl", func(s *analyze.Summary) analyze.Dist { return s.ITL }},
	{"e2e", "E2E", "e2el", func(s *analyze.Summary) analyze.Dist { return s.E2E }},
}

// htmlPercentiles are the percentiles of the latency table.
var htmlPercentiles = []float64{90, 99}

// pageData is what the template renders.
type pageData struct {
	Title    string
	Datasets []datasetView
	Charts   []chartView
	// Seconds and SecondsCharts show a replay's per-second file, when
	// one is given; AllCharts are Charts and SecondsCharts, for the script.
	Seconds       []secondsView
	SecondsCharts []chartView
	AllCharts     []chartView
	Script        template.JS // echarts.min.js, inlined so the page works offline
}

type datasetView struct {
	Name     string
	Runs     []runView
	Measured bool // some run's duration was measured from request times
}

// A runView is one row group of a dataset's tables, its cells taken from
// the summary's table model (summaryTable) by JSON key. Pooled marks the
// all-runs row of a dataset with several runs: its latencies pool the
// runs, but it has no duration, since runs are separate spans of time.
type runView struct {
	Label, Source, Model       string
	Pooled                     bool
	OK, Failed                 string
	Duration, ReqRate, OutRate string // "–" when the duration is unknown; the duration marked "*" when measured
	Measured                   bool
	Latency                    []latencyRow
}

type latencyRow struct {
	Metric                 string
	N                      string
	Mean, Median, P90, P99 string // ms
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
	return WriteHTMLWith(w, datasets, HTMLOptions{})
}

// HTMLOptions add to the report.
type HTMLOptions struct {
	// Seconds are the runs of a replay's per-second file: a table per
	// run and charts of KV cache usage (of its capacity) and of running
	// and waiting requests over time.
	Seconds []trace.SecondsRun
}

// WriteHTMLWith is WriteHTML with options.
func WriteHTMLWith(w io.Writer, datasets []Dataset, o HTMLOptions) error {
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
	if len(o.Seconds) > 0 {
		var err error
		if data.Seconds, data.SecondsCharts, err = secondsViews(o.Seconds); err != nil {
			return err
		}
	}
	data.AllCharts = append(append([]chartView(nil), data.Charts...), data.SecondsCharts...)
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
	sums, all := ds.Summaries, ds.Pooled
	if all == nil {
		sums = analyze.SummarizeRuns(ds.Runs, ds.Requests)
	}
	if len(sums) == 0 {
		// Neither runs nor requests: still one (empty) row.
		sums = []*analyze.Summary{analyze.Summarize(trace.Run{Name: ds.Name}, nil)}
	}
	for _, s := range sums {
		rv := newRunView(runLabel(s.Run), s)
		view.Runs = append(view.Runs, rv)
		view.Measured = view.Measured || rv.Measured
	}
	if len(sums) == 1 {
		if all != nil {
			return view, all // the same distributions, with the CDF's quantiles
		}
		return view, sums[0]
	}
	if all == nil {
		all = analyze.Summarize(trace.Run{Name: ds.Name}, ds.Requests)
	}
	rv := newRunView("all runs", all)
	rv.Pooled = true
	view.Runs = append(view.Runs, rv)
	return view, all
}

// newRunView takes a run's cells from the table model of its summary.
func newRunView(label string, s *analyze.Summary) runView {
	t := summaryTable(s, htmlPercentiles)
	str := func(key string) string {
		v, _ := t.lookup(key)
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	fixed := func(key string) string {
		if _, ok := t.lookup(key); !ok {
			return "–" // no duration, hence no throughput
		}
		return fmt.Sprintf("%.2f", t.float(key))
	}
	basis := str("duration_basis")
	rv := runView{Label: label, Source: str("source"), Model: str("model"), OK: str("completed"), Failed: str("failed"),
		Duration: fixed("duration"), ReqRate: fixed("request_throughput"), OutRate: fixed("output_throughput"),
		Measured: basis == "measured" || basis == "trimmed"}
	if rv.Measured {
		rv.Duration += "*"
	}
	for _, m := range htmlMetrics {
		row := latencyRow{Metric: m.Title, N: "0"}
		ms := func(stat string) string { return fmt.Sprintf("%.2f", t.float(stat+"_"+m.key+"_ms")) }
		if str(m.key+"_basis") == "per_request" {
			row.N = str(m.key + "_count")
		}
		// Values the source reported stand in the text and the JSON, not
		// in these tables of per-request data.
		if row.N != "0" {
			row.Mean, row.Median, row.P90, row.P99 = ms("mean"), ms("median"), ms("p90"), ms("p99")
		} else {
			row.Mean, row.Median, row.P90, row.P99 = "0.00", "0.00", "0.00", "0.00"
		}
		rv.Latency = append(rv.Latency, row)
	}
	return rv
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
