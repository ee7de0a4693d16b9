package report

import (
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// findChromium returns the Chromium binary, or skips the test (fails it
// under CI=true, where the browser check must run).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (tried /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH); CI must run the browser check")
	}
	t.Skip("chromium not found (tried /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH): install it to check that the report renders")
	return ""
}

// A selfCheck is what the report's self-check script writes into
// <pre id="selfcheck">: series point counts per chart, and script errors.
type selfCheck struct {
	Charts map[string]map[string]int `json:"charts"`
	Errors []string                  `json:"errors"`
}

var selfCheckRE = regexp.MustCompile(`(?s)<pre id="selfcheck">(.*?)</pre>`)

// TestChromiumRenders opens the report in headless Chromium, offline, and
// reads back what ECharts holds: every chart must hold every dataset's
// series with points, and no script may have failed.
func TestChromiumRenders(t *testing.T) {
	bin := findChromium(t)
	ds := append(tinyDatasets(), replayLike("replay", 300, 3))
	got := browserSelfCheck(t, bin, writeHTML(t, ds))
	t.Logf("self-check: %+v", got)
	if len(got.Errors) > 0 {
		t.Errorf("script errors in the page: %q", got.Errors)
	}
	if len(got.Charts) != len(htmlMetrics) {
		t.Errorf("%d charts on the page, want %d", len(got.Charts), len(htmlMetrics))
	}
	for _, metric := range htmlMetrics {
		id := "cdf-" + metric.ID
		series, ok := got.Charts[id]
		if !ok {
			t.Errorf("chart %s missing", id)
			continue
		}
		if len(series) != len(ds) {
			t.Errorf("chart %s holds %d series, want %d", id, len(series), len(ds))
		}
		for _, d := range ds {
			if n := series[d.Name]; n <= 0 {
				t.Errorf("chart %s: series %q has %d points", id, d.Name, n)
			}
		}
	}
	// 300 requests pool ~35,000 ITL gaps: the series is capped.
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

// browserSelfCheck writes page to a temporary file, lets headless Chromium
// run it with no network, and returns what the page's self-check wrote.
func browserSelfCheck(t *testing.T, bin string, page []byte) selfCheck {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, page, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--virtual-time-budget=5000",
		"--dump-dom", "file://"+file)
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := selfCheckRE.FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("no self-check output in the dumped DOM (%d bytes); chromium stderr:\n%s", len(out), stderr.String())
	}
	var got selfCheck
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &got); err != nil {
		t.Fatalf("self-check %q: %v", m[1], err)
	}
	return got
}

// limitedBuffer keeps the first 64 KiB written to it: Chromium's stderr is
// for failure messages only, and it can be chatty.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
