package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/chromiumtest"
)

// findChromium returns the Chromium binary, or skips the test (fails it
// under CI=true, where the browser check must run).
func findChromium(t *testing.T) string { return chromiumtest.Find(t) }

// A selfCheck is what the report's self-check script writes.
type selfCheck = chromiumtest.SelfCheck

// fixturePage renders the fixture datasets with a per-second file; the
// section tests share one rendering and one browser run.
var fixturePage = sync.OnceValues(func() ([]byte, error) {
	var b bytes.Buffer
	err := WriteHTMLWith(&b, fixtureDatasets(), HTMLOptions{Seconds: fixtureSeconds(), Compare: analyze.CompareOptions{Resamples: 200}})
	return b.Bytes(), err
})

var fixtureCheck struct {
	once sync.Once
	got  *selfCheck
}

// fixtureSelfCheck opens the fixture page in Chromium once.
func fixtureSelfCheck(t *testing.T) selfCheck {
	t.Helper()
	bin := findChromium(t)
	page, err := fixturePage()
	if err != nil {
		t.Fatal(err)
	}
	fixtureCheck.once.Do(func() {
		got := browserSelfCheck(t, bin, page) // fails this test, and leaves got nil for the others
		fixtureCheck.got = &got
	})
	if fixtureCheck.got == nil {
		t.Fatal("the browser run of the fixture page failed (see the first test)")
	}
	return *fixtureCheck.got
}

// checkSection checks that section id holds at least tables tables and
// the charts, every one of its series with points, and that the page
// ran without script errors.
func checkSection(t *testing.T, id string, tables int, charts []string) selfCheck {
	t.Helper()
	got := fixtureSelfCheck(t)
	if len(got.Errors) > 0 {
		t.Errorf("script errors in the page: %q", got.Errors)
	}
	sec, ok := got.Sections["s-"+id]
	if !ok {
		t.Fatalf("section s-%s missing; sections %v", id, keys(got.Sections))
	}
	if sec.Tables < tables {
		t.Errorf("section %s: %d tables, want at least %d", id, sec.Tables, tables)
	}
	for _, c := range charts {
		if !slices.Contains(sec.Charts, c) {
			t.Errorf("section %s: chart %s missing (has %v)", id, c, sec.Charts)
		}
	}
	for _, c := range sec.Charts {
		series := got.Charts[c]
		if len(series) == 0 {
			t.Errorf("chart %s holds no series", c)
		}
		for name, n := range series {
			if n <= 0 {
				t.Errorf("chart %s: series %q has %d points", c, name, n)
			}
		}
	}
	return got
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// The summary: per dataset a header, a table of runs and one of latencies.
func TestChromiumSummary(t *testing.T) {
	checkSection(t, "summary", 4, nil)
}

// Observed against simulated, run by run: three runs pair by name (the
// observed summary-only run has no partner).
func TestChromiumCompare(t *testing.T) {
	got := checkSection(t, "compare", 3, nil)
	if rows := got.Sections["s-compare"].Rows; rows < 3*4*4 {
		t.Errorf("compare section has %d rows, want at least 3 runs × 4 metrics × 4 statistics", rows)
	}
}

func TestChromiumSweep(t *testing.T) {
	got := checkSection(t, "sweep", 0, []string{"sweep-ttft", "sweep-itl", "sweep-e2e", "sweep-pareto"})
	// Per dataset a median and a p99 line; the observed sweep has 4 runs
	// (the summary-only one at rate 16 with its reported TTFT).
	obs := safeLabel(hostileName)
	if n := got.Charts["sweep-ttft"][obs+" median"]; n != 4 {
		t.Errorf("observed median TTFT line has %d points, want 4 (%v)", n, got.Charts["sweep-ttft"])
	}
	if n := got.Charts["sweep-ttft"]["simulated median"]; n != 3 {
		t.Errorf("simulated median TTFT line has %d points, want 3", n)
	}
}

func TestChromiumDistributions(t *testing.T) {
	var ids []string
	for _, m := range htmlMetrics {
		ids = append(ids, "cdf-"+m.ID, "tail-"+m.ID)
	}
	got := checkSection(t, "dist", 0, ids)
	if got.LogX < 2*len(htmlMetrics) {
		t.Errorf("%d log-x toggles exercised, want %d", got.LogX, 2*len(htmlMetrics))
	}
}

func TestChromiumLengths(t *testing.T) {
	checkSection(t, "lengths", 0, []string{"len-input", "len-output", "len-ttft", "len-itl"})
}

// The time section: series from requests, and from the per-second file,
// among them the ready workers of the autoscaled run (the autoscaling plot)
// and the requests it held at the gateway while at zero, a line for that
// run alone.
func TestChromiumTime(t *testing.T) {
	got := checkSection(t, "time", 2, []string{"time-arrivals", "time-completions", "time-running",
		"sec-workers", "sec-held", "sec-pools", "sec-kv", "sec-running", "sec-waiting", "sec-busy", "sec-tiers", "sec-links"})
	if n := got.Charts["sec-workers"]["rate=4"]; n != 120 {
		t.Errorf("ready workers of rate=4: %d points, want 120", n)
	}
	if n, lines := got.Charts["sec-held"]["rate=4"], len(got.Charts["sec-held"]); n != 120 || lines != 1 {
		t.Errorf("held at the gateway: %d lines, rate=4's of %d points; want 1 of 120", lines, n)
	}
	// The pools of the disaggregated run alone.
	if p, d, lines := got.Charts["sec-pools"]["rate=1 · prefill"], got.Charts["sec-pools"]["rate=1 · decode"], len(got.Charts["sec-pools"]); p != 120 || d != 120 || lines != 2 {
		t.Errorf("ready workers by pool: %d lines, rate=1's prefill of %d points and decode of %d; want 2 of 120", lines, p, d)
	}
}

func TestChromiumWhy(t *testing.T) {
	checkSection(t, "why", 3, []string{"why-decomp", "why-workers", "why-cache"})
}

// Labels with markup and terminal escapes arrive as text: the heading
// reads the label with the escape spelled out, and no element was made.
func TestChromiumEscapes(t *testing.T) {
	got := fixtureSelfCheck(t)
	want := `obs <b>1</b>\x1b]0;pwned\a`
	if !slices.Contains(got.Headings, want) {
		t.Errorf("headings %q do not contain %q", got.Headings, want)
	}
	if got.Markup != 0 {
		t.Errorf("%d elements made from labels' markup", got.Markup)
	}
	page, _ := fixturePage()
	if bytes.ContainsRune(page, 0x1b) || bytes.ContainsRune(page, 0x07) {
		t.Errorf("the page holds a raw terminal control character")
	}
	if len(got.Scripts) != 0 {
		t.Errorf("the page loads scripts: %q", got.Scripts)
	}
}

// The page prints: Chromium renders it to a PDF of several pages.
func TestChromiumPrint(t *testing.T) {
	bin := findChromium(t)
	page, err := fixturePage()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("@media print")) {
		t.Fatal("no print CSS")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, page, 0o644); err != nil {
		t.Fatal(err)
	}
	pdf := filepath.Join(dir, "report.pdf")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", "--no-pdf-header-footer",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--virtual-time-budget=5000", "--print-to-pdf="+pdf, "file://"+file)
	var stderr chromiumtest.LimitedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(pdf)
	if err != nil {
		t.Fatal(err)
	}
	pages := len(regexp.MustCompile(`/Type\s*/Page[^s]`).FindAll(b, -1))
	t.Logf("PDF: %d bytes, %d pages", len(b), pages)
	if !bytes.HasPrefix(b, []byte("%PDF")) || pages < 5 {
		t.Errorf("PDF of %d bytes with %d pages, want a PDF of at least 5 pages", len(b), pages)
	}
}

// TestChromiumLargeITL: a pooled ITL of ~35,000 gaps is drawn from the
// capped number of quantiles.
func TestChromiumLargeITL(t *testing.T) {
	bin := findChromium(t)
	ds := append(tinyDatasets(), replayLike("replay", 300, 3))
	got := browserSelfCheck(t, bin, writeHTML(t, ds))
	if len(got.Errors) > 0 {
		t.Errorf("script errors in the page: %q", got.Errors)
	}
	if n := got.Charts["cdf-itl"]["replay"]; n != maxCDFPoints+1 {
		t.Errorf("ITL series of 300 requests has %d points, want %d", n, maxCDFPoints+1)
	}
}

// TestChromiumSelfCheckFails shows the self-check is not vacuous: a page
// whose charts fail to take their options reports the errors.
func TestChromiumSelfCheckFails(t *testing.T) {
	bin := findChromium(t)
	page := string(writeHTML(t, tinyDatasets()))
	broken := strings.Replace(page, "setOption(c.option)", "setOption(c.option.missing.field)", 1)
	if broken == page {
		t.Fatal("the page no longer calls setOption(c.option); update this test")
	}
	got := browserSelfCheck(t, bin, []byte(broken))
	if len(got.Errors) < len(htmlMetrics) {
		t.Errorf("broken page reported %d errors, want at least %d: %q", len(got.Errors), len(htmlMetrics), got.Errors)
	}
	for id, series := range got.Charts {
		if len(series) != 0 {
			t.Errorf("broken chart %s reports series %v", id, series)
		}
	}
}

// browserSelfCheck opens page in headless Chromium and returns its
// self-check.
func browserSelfCheck(t *testing.T, bin string, page []byte) selfCheck {
	return chromiumtest.Run(t, bin, page)
}
