package report

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/trace"
)

func gaps(n int, v float64) []float64 {
	g := make([]float64, n)
	for i := range g {
		g[i] = v
	}
	return g
}

// tinyDatasets is small enough to check every table value by hand.
func tinyDatasets() []Dataset {
	obs := Dataset{
		Name: "observed",
		Runs: []trace.Run{{Name: "r1", Source: "vllm-bench", Model: "m", DurationSec: trace.Some(2.0)}},
		Requests: []*trace.Request{
			{Run: "r1", Status: trace.StatusOK, InputTokens: trace.Some[int64](100), OutputTokens: trace.Some[int64](11),
				TTFTSec: trace.Some(0.1), E2ESec: trace.Some(1.1), ITLSec: gaps(10, 0.1)},
			{Run: "r1", Status: trace.StatusOK, InputTokens: trace.Some[int64](100), OutputTokens: trace.Some[int64](21),
				TTFTSec: trace.Some(0.2), E2ESec: trace.Some(2.2), ITLSec: gaps(20, 0.05)},
			// No E2E and one output token: in TTFT only.
			{Run: "r1", Status: trace.StatusOK, OutputTokens: trace.Some[int64](1), TTFTSec: trace.Some(0.3)},
			// Failed requests count, but their values do not.
			{Run: "r1", Status: trace.StatusFailed, TTFTSec: trace.Some(9.0), E2ESec: trace.Some(9.0)},
		},
	}
	sim := Dataset{
		Name: "simulated <1>",
		Requests: []*trace.Request{
			{Run: "sim", Source: "simulated", Status: trace.StatusOK, Arrival: trace.Some(trace.Time(0)),
				OutputTokens: trace.Some[int64](3), TTFTSec: trace.Some(0.5), E2ESec: trace.Some(1.0), ITLSec: []float64{0.25, 0.25}},
			{Run: "sim", Source: "simulated", Status: trace.StatusOK, Arrival: trace.Some(trace.TimeFromSeconds(1)),
				OutputTokens: trace.Some[int64](5), TTFTSec: trace.Some(1.0), E2ESec: trace.Some(3.0), ITLSec: gaps(4, 0.5)},
		},
	}
	return []Dataset{obs, sim}
}

func writeHTML(t *testing.T, ds []Dataset) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, ds); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestWriteHTMLTables(t *testing.T) {
	got := string(writeHTML(t, tinyDatasets()))
	row := func(cells ...string) string {
		return `<tr><td>` + strings.Join(cells, `</td><td(?: class="n")?>`) + `</td></tr>`
	}
	for _, re := range []string{
		`<title>opaltrace report</title>`,
		`<h2 id="ds-0">observed</h2>`,
		`<h2 id="ds-1">simulated &lt;1&gt;</h2>`,
		// ok, failed, duration from the run, req/s = 3/2, output tok/s = 33/2.
		row("r1", "vllm-bench", "m", "3", "1", "2.00", "1.50", "16.50"),
		// duration from arrivals: first 0 s, last end 1 + 3 s.
		row("sim", "simulated", "", "2", "0", `4.00\*`, "0.50", "2.00"),
		`(?s)<h2 id="ds-1">.*<p class="note">\* The source recorded no duration`,
		row("r1", "TTFT", "3", "200.00", "200.00", "280.00", "298.00"),
		row("r1", "TPOT", "2", "100.00", "100.00", "100.00", "100.00"),
		row("r1", "ITL", "30", "66.67", "50.00", "100.00", "100.00"),
		row("r1", "E2E", "2", "1650.00", "1650.00", "2090.00", "2189.00"),
		row("sim", "TPOT", "2", "375.00", "375.00", "475.00", "497.50"),
		row("sim", "ITL", "6", "416.67", "500.00", "500.00", "500.00"),
		// Every chart div, and every series in its option.
		`<div class="chart" id="cdf-ttft"></div>`, `<div class="chart" id="cdf-tpot"></div>`,
		`<div class="chart" id="cdf-itl"></div>`, `<div class="chart" id="cdf-e2e"></div>`,
		`"name":"observed","type":"line"`, `"name":"simulated \\u003c1\\u003e","type":"line"`,
		`<pre id="selfcheck"></pre>`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("report does not match %s", re)
		}
	}
	// The CDF charts (go-echarts' series: name before type).
	if n := len(regexp.MustCompile(`"name":"[^"]*","type":"line"`).FindAllString(got, -1)); n != 8 {
		t.Errorf("%d CDF series in the report, want 4 charts × 2 datasets", n)
	}
	if strings.Contains(got, "<td>all runs</td>") {
		t.Errorf("single-run datasets got a pooled row")
	}
}

func TestWriteHTMLOffline(t *testing.T) {
	got := string(writeHTML(t, tinyDatasets()))
	if regexp.MustCompile(`(?i)<script[^>]*\ssrc=`).MatchString(got) {
		t.Errorf("report loads a script: it must be self-contained")
	}
	// Outside the library (whose toolbox builds an <img src= at run time
	// from a chart it drew), the page loads nothing either.
	page := strings.Replace(got, echartsJS, "", 1)
	if regexp.MustCompile(`(?i)<(link|img|iframe|object|embed)[^>]*\s(src|href|data)=|url\(|@import`).MatchString(page) {
		t.Errorf("report loads a resource: it must be self-contained")
	}
	if !strings.Contains(got, `t.version="5.6.0"`) {
		t.Errorf("echarts 5.6.0 is not inlined")
	}
	// The inlined library must not end its own <script> element.
	if strings.Contains(strings.ToLower(echartsJS), "</script") {
		t.Errorf("echarts.min.js contains </script")
	}
}

func TestWriteHTMLDeterministic(t *testing.T) {
	a := writeHTML(t, tinyDatasets())
	b := writeHTML(t, tinyDatasets())
	if !bytes.Equal(a, b) {
		t.Fatal("two runs on the same datasets differ")
	}
	// Golden of the page without the 1 MB library, so reviews see changes.
	page := strings.Replace(string(a), echartsJS, "/* echarts.min.js */", 1)
	golden.Check(t, "testdata/tiny.html.golden", []byte(page))
}

func TestWriteHTMLRuns(t *testing.T) {
	ok := func(run string, ttft float64) *trace.Request {
		return &trace.Request{Run: run, Status: trace.StatusOK, TTFTSec: trace.Some(ttft)}
	}
	ds := Dataset{
		Name: "two runs",
		Runs: []trace.Run{{Name: "b", DurationSec: trace.Some(10.0)}, {Name: "a", DurationSec: trace.Some(1.0)}},
		// A request of a run not listed gets a row of its own, after the listed runs.
		Requests: []*trace.Request{ok("a", 0.1), ok("b", 0.2), ok("b", 0.4), ok("c", 1.0)},
	}
	got := string(writeHTML(t, []Dataset{ds}))
	for _, re := range []string{
		`(?s)<td>b</td>.*<td>a</td>.*<td>c</td>.*<td>all runs</td>`,
		`<tr><td>b</td><td></td><td></td><td class="n">2</td><td class="n">0</td><td class="n">10.00</td><td class="n">0.20</td>`,
		`<tr><td>c</td><td></td><td></td><td class="n">1</td><td class="n">0</td><td class="n">—</td><td class="n">—</td>`,
		`<tr><td>all runs</td><td></td><td></td><td class="n">4</td><td class="n">0</td><td class="n">—</td><td class="n">—</td><td class="n">—</td></tr>`,
		`<tr><td>all runs</td><td>TTFT</td><td class="n">4</td><td class="n">425.00</td><td class="n">300.00</td>`,
		// The chart draws the pooled distribution: 4 steps from 0.
		`"data":\[\{"value":\[100,0\]\},\{"value":\[100,0.25\]\},\{"value":\[200,0.5\]\},\{"value":\[400,0.75\]\},\{"value":\[1000,1\]\}\]`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("report does not match %s", re)
		}
	}
}

// A sweep's rows say what sets each run apart, as stats does.
func TestWriteHTMLSweepLabels(t *testing.T) {
	run := func(name string, rate float64) trace.Run {
		return trace.Run{Name: name, File: "/x/sweep.jsonl", Workload: &trace.Workload{RequestRate: trace.Rate(rate)}}
	}
	ds := Dataset{Name: "sweep", Runs: []trace.Run{run("sweep.jsonl#1", 1), run("sweep.jsonl#2", 4)}}
	got := string(writeHTML(t, []Dataset{ds}))
	for _, want := range []string{"<td>sweep.jsonl#1 (#1 rate=1)</td>", "<td>sweep.jsonl#2 (#2 rate=4)</td>"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %s", want)
		}
	}
}

func TestWriteHTMLErrors(t *testing.T) {
	for _, tc := range []struct {
		ds   []Dataset
		want string
	}{
		{nil, "no datasets"},
		{[]Dataset{{Name: " "}}, "dataset 1: name: empty"},
		{[]Dataset{{Name: "x"}, {Name: "x"}}, `dataset 2: name: "x" used twice`},
	} {
		var b bytes.Buffer
		err := WriteHTML(&b, tc.ds)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WriteHTML(%d datasets) = %v, want error containing %q", len(tc.ds), err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("WriteHTML wrote %d bytes before failing", b.Len())
		}
	}
}

// replayLike returns n requests shaped like a replay: every request with
// TTFT, E2E, output tokens and one ITL gap per token.
func replayLike(name string, n int, seed uint64) Dataset {
	rng := rand.New(rand.NewPCG(seed, 1))
	ds := Dataset{Name: name, Runs: []trace.Run{{Name: name, Source: "simulated", DurationSec: trace.Some(600.0)}}}
	for i := range n {
		out := 20 + rng.IntN(200)
		itl := make([]float64, out-1)
		sum := 0.0
		for j := range itl {
			itl[j] = 0.01 + 0.04*rng.Float64()
			sum += itl[j]
		}
		ttft := 0.05 + rng.ExpFloat64()*0.3
		ds.Requests = append(ds.Requests, &trace.Request{
			Run: name, Status: trace.StatusOK, Arrival: trace.Some(trace.TimeFromSeconds(float64(i) * 0.05)),
			OutputTokens: trace.Some(int64(out)), TTFTSec: trace.Some(ttft), E2ESec: trace.Some(ttft + sum), ITLSec: itl,
		})
	}
	return ds
}

// TestWriteHTMLSize checks that a full replay of 12,000 requests against
// its observed trace stays under 5 MB: quantiles cap every series.
func TestWriteHTMLSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 12,000 requests")
	}
	var b bytes.Buffer
	if err := WriteHTMLWith(&b, []Dataset{replayLike("observed", 12000, 1), replayLike("simulated", 12000, 2)}, HTMLOptions{}); err != nil {
		t.Fatal(err)
	}
	got := b.Bytes()
	const limit = 5 << 20
	t.Logf("report of 2 × 12,000 requests: %d bytes (echarts.min.js %d)", len(got), len(echartsJS))
	if len(got) > limit {
		t.Errorf("report is %d bytes, over %d", len(got), limit)
	}
	if n := strings.Count(string(got), `{"value":[`); n != 4*2*(maxCDFPoints+1) {
		t.Errorf("%d CDF points, want %d", n, 4*2*(maxCDFPoints+1))
	}
}
