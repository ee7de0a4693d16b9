package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/chromiumtest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// TestReportDataCrunchSweep builds the report a team would mail around
// for the DataCrunch Llama-3.3-70B sweep (summary-only SGLang runs at 1,
// 2 and 4 req/s on 4×H200, TP4), observed against a calibrated
// simulation, as a user would: ingest, calibrate by replay on two of the
// rates (two coefficients, to keep it CI-sized), replay the three rates
// with the fitted cost model, report. Chromium opens the page: no script
// error, every chart holds series with points, the sweep and compare
// sections are there, one comparison table per rate (never the sweep
// pooled), and the header names the fitted cost model.
func TestReportDataCrunchSweep(t *testing.T) {
	bin := chromiumtest.Find(t)
	dir := t.TempDir()
	in := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl")
	obs := filepath.Join(dir, "dc.parquet")
	step := func(args ...string) {
		t.Helper()
		if _, stderr, err := opaltrace(t, args...); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, stderr)
		}
	}
	step("ingest", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "4xH200", "--tp", "4",
		"--engine", "sglang", "--engine-opt", "disable_radix_cache=true", "-o", obs, in)
	cm := filepath.Join(dir, "costmodel.yaml")
	step("calibrate", "-o", cm, "--fit", "mfu,bandwidth_efficiency", "--train", "rate=1&dataset=random", "--train", "rate=4&dataset=random", obs)
	sim := filepath.Join(dir, "sim.parquet")
	step("replay", "--model", cm, "--run", "1-3", "-o", sim, obs)
	page := filepath.Join(dir, "report.html")
	step("report", "--html", page, "observed="+obs, "simulated="+sim)
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	got := chromiumtest.Run(t, bin, html)
	if len(got.Errors) > 0 {
		t.Errorf("script errors: %q", got.Errors)
	}
	if len(got.Scripts) > 0 {
		t.Errorf("remote scripts: %q", got.Scripts)
	}
	if len(got.Charts) == 0 {
		t.Fatal("no chart on the page")
	}
	for chart, series := range got.Charts {
		if len(series) == 0 {
			t.Errorf("chart %s holds no series", chart)
		}
		for name, n := range series {
			if n <= 0 {
				t.Errorf("chart %s: series %q has %d points", chart, name, n)
			}
		}
	}
	for _, id := range []string{"s-compare", "s-sweep"} {
		sec, ok := got.Sections[id]
		if !ok {
			t.Fatalf("section %s missing (have %v)", id, got.Sections)
		}
		if id == "s-sweep" && len(sec.Charts) == 0 {
			t.Errorf("the sweep section has no chart")
		}
	}
	// One comparison per rate, each with the observed run's reported
	// statistics against the simulated run that replays it.
	if n := got.Sections["s-compare"].Tables; n != 3 {
		t.Errorf("compare section: %d tables, want one per rate (3)", n)
	}
	for i, rate := range []string{"1", "2", "4"} {
		n := string(rune('1' + i))
		caption := regexp.MustCompile(`<caption>observed / [^<]*#` + n + ` \(#` + n + ` [^<]*rate=` + rate + ` [^<]*\) vs simulated / [^<]*#` + n + `</caption>`)
		if !caption.Match(html) {
			t.Errorf("no comparison of run #%s (rate=%s) with its replay", n, rate)
		}
	}
	if rows := regexp.MustCompile(`<tr><td>TTFT</td><td class="n">p50</td>`).FindAll(html, -1); len(rows) != 3 {
		t.Errorf("%d TTFT median comparison rows, want 3 (one per rate)", len(rows))
	}
	if !strings.Contains(string(html), "replay fit") {
		t.Error("the page does not say the simulation's cost model was fitted (replay fit)")
	}
}
