// Package chromiumtest opens an opaltrace HTML report in headless
// Chromium, with no network, and returns what the page's self-check
// script wrote: the points of every chart's series, script errors,
// headings, sections, markup found in labels and remote scripts. The
// report package's browser tests and the command's end-to-end report
// tests share it.
package chromiumtest

import (
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// Find returns the Chromium binary, or skips the test (fails it
// under CI=true, where the browser check must run).
func Find(t *testing.T) string {
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

// A SelfCheck is what the report's self-check script writes into
// <pre id="selfcheck">: series point counts per chart, script errors,
// the headings' text, log-x toggles exercised, what each section holds,
// elements that markup in labels would have made, and remote scripts.
type SelfCheck struct {
	Charts   map[string]map[string]int `json:"charts"`
	Errors   []string                  `json:"errors"`
	Headings []string                  `json:"headings"`
	LogX     int                       `json:"logx"`
	Sections map[string]struct {
		Tables int      `json:"tables"`
		Rows   int      `json:"rows"`
		Charts []string `json:"charts"`
	} `json:"sections"`
	Markup  int      `json:"markup"`
	Scripts []string `json:"scripts"`
}

var selfCheckRE = regexp.MustCompile(`(?s)<pre id="selfcheck">(.*?)</pre>`)

// Run writes page to a temporary file, lets headless Chromium
// run it with no network, and returns what the page's self-check wrote.
func Run(t *testing.T, bin string, page []byte) SelfCheck {
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
	var stderr LimitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := selfCheckRE.FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("no self-check output in the dumped DOM (%d bytes); chromium stderr:\n%s", len(out), stderr.String())
	}
	var got SelfCheck
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &got); err != nil {
		t.Fatalf("self-check %q: %v", m[1], err)
	}
	return got
}

// A LimitedBuffer keeps the first 64 KiB written to it: Chromium's stderr is
// for failure messages only, and it can be chatty.
type LimitedBuffer struct{ b []byte }

func (l *LimitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *LimitedBuffer) String() string { return string(l.b) }
