package report

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/termsafe"
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
	// Extras is what a Collector gathered from the requests (lengths,
	// per second, per worker, TTFT decomposition, cache curve); made from
	// Requests when nil and Pooled is not set.
	Extras *Extras
}

// HTMLStreamOptions are the quantiles the report reads from a summary
// made by passes: the tables' p90 and p99, and the charts' CDF points.
func HTMLStreamOptions() analyze.StreamOptions {
	return analyze.StreamOptions{Percentiles: append([]float64{90, 99}, tailPercentiles...), CDFPoints: maxCDFPoints}
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
	// Sections follow the datasets' tables: comparison, sweeps,
	// distributions, lengths, time, why. AllCharts are their charts, for
	// the script.
	Sections  []sectionView
	AllCharts []chartView
	Script    template.JS // echarts.min.js, inlined so the page works offline
}

type datasetView struct {
	Name     string
	Header   []headerItem
	Runs     []runView
	Measured bool // some run's duration was measured from request times
	Reported bool // some cell is the source's own value
}

// A runView is one row group of a dataset's tables, its cells taken from
// the summary's table model (summaryTable) by JSON key. Pooled marks the
// all-runs row of a dataset with several runs: its latencies pool the
// runs, but it has no duration, since runs are separate spans of time.
type runView struct {
	Label, Source, Model       string
	Pooled                     bool
	OK, Failed                 cell
	Duration, ReqRate, OutRate cell // "—" when unknown; the duration marked "*" when measured
	Measured                   bool
	Latency                    []latencyRow
}

// A cell is a table value: "—" when the data has none (never 0.00), and
// Rep when it is the source's own number rather than recomputed.
type cell struct {
	V   string
	Rep bool
}

// missing is the cell of a value the data does not have.
const missing = "—"

type latencyRow struct {
	Metric                 string
	N                      string
	Mean, Median, P90, P99 cell // ms
}

// A sectionView is one section of the page: tables and charts, with
// notes saying what could not be drawn and why.
type sectionView struct {
	ID, Title string
	Intro     string
	Notes     []string
	Tables    []tableView
	Charts    []chartView
}

type tableView struct {
	Caption string
	Head    []string
	Rows    [][]cell
}

type chartView struct {
	ID, Title string
	Option    template.JS
	LogX      bool // offer a log-x toggle
}

// WriteHTML writes an offline, self-contained HTML report comparing
// datasets; see the package documentation for its sections. The same
// datasets always give the same bytes.
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
	// run and charts of KV cache usage (of its capacity), running and
	// waiting requests, busy and active workers over time.
	Seconds []trace.SecondsRun
	// Compare tunes the observed-vs-simulated comparison (zero: the
	// defaults of analyze.Compare, as stats --compare uses them).
	// NoCompare leaves it out.
	Compare   analyze.CompareOptions
	NoCompare bool
}

// WriteHTMLWith is WriteHTML with options.
func WriteHTMLWith(w io.Writer, datasets []Dataset, o HTMLOptions) error {
	if len(datasets) == 0 {
		return errors.New("report: no datasets")
	}
	seen := map[string]bool{}
	data := pageData{Title: "opaltrace report", Script: template.JS(echartsJS)}
	sets := make([]reportSet, len(datasets))
	for i, ds := range datasets {
		switch {
		case strings.TrimSpace(ds.Name) == "":
			return fmt.Errorf("report: dataset %d: name: empty", i+1)
		case seen[ds.Name]:
			return fmt.Errorf("report: dataset %d: name: %q used twice", i+1, ds.Name)
		}
		seen[ds.Name] = true
		// Compared summaries keep each ITL gap's request: the
		// comparison resamples requests (analyze.Options.ITLByRequest).
		view, sums, all := datasetSummary(ds, len(datasets) > 1 && !o.NoCompare)
		data.Datasets = append(data.Datasets, view)
		x := ds.Extras
		if x == nil && ds.Pooled == nil {
			c := NewCollector()
			for _, r := range ds.Requests {
				c.Add(r)
			}
			x = c.Extras()
		}
		sets[i] = reportSet{name: safeLabel(ds.Name), sums: sums, pooled: all, extras: x}
	}
	for _, build := range []func([]reportSet, HTMLOptions) (sectionView, error){
		compareSection, sweepSection, distSection, lengthSection, timeSection, whySection,
	} {
		sec, err := build(sets, o)
		if err != nil {
			return err
		}
		if len(sec.Tables) == 0 && len(sec.Charts) == 0 && len(sec.Notes) == 0 {
			continue
		}
		data.Sections = append(data.Sections, sec)
		data.AllCharts = append(data.AllCharts, sec.Charts...)
	}
	// Render to memory first so a template error leaves w untouched.
	var buf bytes.Buffer
	if err := htmlPage.Execute(&buf, data); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// A reportSet is a dataset as the sections see it: its per-run summaries,
// the pooled one, and what a Collector gathered (nil when a dataset
// summarized by passes came without).
type reportSet struct {
	name   string
	sums   []*analyze.Summary
	pooled *analyze.Summary
	extras *Extras
}

// datasetSummary returns ds's table rows, one per run (analyze's grouping:
// runs in ds.Runs order, then runs only named by requests), plus a pooled
// row when there are several runs; the per-run summaries; and the pooled
// summary the charts draw. byRequest keeps each ITL gap's request in the
// summaries it makes, for the comparison's bootstrap.
func datasetSummary(ds Dataset, byRequest bool) (datasetView, []*analyze.Summary, *analyze.Summary) {
	view := datasetView{Name: safeLabel(ds.Name)}
	sums, all := ds.Summaries, ds.Pooled
	opts := analyze.Options{ITLByRequest: byRequest}
	if all == nil {
		sums = analyze.SummarizeRunsWith(ds.Runs, ds.Requests, opts)
	}
	if len(sums) == 0 {
		// Neither runs nor requests: still one (empty) row.
		sums = []*analyze.Summary{analyze.Summarize(trace.Run{Name: ds.Name}, nil)}
	}
	runs := make([]trace.Run, len(sums))
	for i, s := range sums {
		runs[i] = s.Run
	}
	// A sweep's runs are named alike (file#3): each row also says what
	// sets it apart, as stats and the comparison's captions do.
	what := trace.RunFieldLabels(runs)
	for i, s := range sums {
		label := runLabel(s.Run)
		if what != nil && s.Run.Stage == "" {
			label += " (" + what[i] + ")"
		}
		rv := newRunView(label, s)
		view.Runs = append(view.Runs, rv)
		view.Measured = view.Measured || rv.Measured
		view.Reported = view.Reported || rv.reported()
	}
	view.Header = datasetHeader(runs)
	if len(sums) == 1 {
		if all != nil {
			return view, sums, all // the same distributions, with the CDF's quantiles
		}
		return view, sums, sums[0]
	}
	if all == nil {
		// The pooled runs, compared only when their runs cannot be
		// paired, keep no gap's request: see compareSection.
		all = analyze.Summarize(trace.Run{Name: ds.Name}, ds.Requests)
	}
	rv := newRunView("all runs", all)
	rv.Pooled = true
	view.Runs = append(view.Runs, rv)
	return view, sums, all
}

func (rv runView) reported() bool {
	for _, c := range []cell{rv.OK, rv.Failed, rv.Duration, rv.ReqRate, rv.OutRate} {
		if c.Rep {
			return true
		}
	}
	for _, l := range rv.Latency {
		if l.Mean.Rep || l.Median.Rep || l.P90.Rep || l.P99.Rep {
			return true
		}
	}
	return false
}

// newRunView takes a run's cells from the table model of its summary.
// A value the per-request data lacks is the source's own when it
// reported one (marked), else "—".
func newRunView(label string, s *analyze.Summary) runView {
	t := summaryTable(s, htmlPercentiles)
	rep := decodeReported(s)
	str := func(key string) string {
		v, _ := t.lookup(key)
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	perRequest := s.Requests > 0 || len(rep) == 0
	// fromSource is the source's value of key, for a run of a
	// summary-only file.
	fromSource := func(key string, format func(float64) string) cell {
		if f, ok := rep[key].(float64); ok && !perRequest {
			return cell{V: format(f), Rep: true}
		}
		return cell{V: missing}
	}
	fixed := func(key string) cell {
		if _, ok := t.lookup(key); !ok || !perRequest {
			return fromSource(key, func(f float64) string { return fmt.Sprintf("%.2f", f) })
		}
		return cell{V: fmt.Sprintf("%.2f", t.float(key))}
	}
	count := func(key string) cell {
		if !perRequest {
			return fromSource(key, func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) })
		}
		return cell{V: str(key)}
	}
	basis := str("duration_basis")
	rv := runView{Label: safeLabel(label), Source: safeLabel(str("source")), Model: safeLabel(str("model")), OK: count("completed"), Failed: count("failed"),
		Duration: fixed("duration"), ReqRate: fixed("request_throughput"), OutRate: fixed("output_throughput"),
		Measured: basis == "measured" || basis == "trimmed"}
	if rv.Measured {
		rv.Duration.V += "*"
	}
	for _, m := range htmlMetrics {
		row := latencyRow{Metric: m.Title, N: "0"}
		ms := func(stat string) cell {
			key := stat + "_" + m.key + "_ms"
			if _, ok := t.lookup(key); !ok {
				return cell{V: missing}
			}
			return cell{V: fmt.Sprintf("%.2f", t.float(key)), Rep: row.N == "0"}
		}
		switch str(m.key + "_basis") {
		case "per_request":
			row.N = str(m.key + "_count")
		case "":
			row.N = missing
		}
		// Values the source reported (a summary-only run, E2E of old vLLM
		// files) stand marked; what neither has is "—", never 0.00.
		row.Mean, row.Median, row.P90, row.P99 = ms("mean"), ms("median"), ms("p90"), ms("p99")
		rv.Latency = append(rv.Latency, row)
	}
	return rv
}

// safeLabel is a string from the input as the page shows it: control
// characters (terminal escapes) as visible escapes; html/template and
// json.Marshal escape the markup.
func safeLabel(s string) string { return termsafe.String(s) }

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
