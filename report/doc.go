// Package report formats what package analyze computes: the vLLM-style text
// summary and its JSON (WriteStats, StatsJSON), and an offline HTML report
// comparing datasets (WriteHTML). It computes no metric itself: every
// number comes from an analyze.Summary, made in memory or by passes over a
// file (the same numbers), so the text, the JSON and the HTML agree with
// each other and with vLLM's benchmark.
//
// # One table model
//
// A summary is turned into rows once (table.go: label, JSON key, value,
// unit, as x/perf's benchtab builds what texttab prints): the text block
// prints the rows with a label, the JSON object holds those with a key, in
// the same order, and the HTML tables take their cells from the rows by
// key. A row the text or the JSON lacks (the JSON's status_counts object,
// the text's "mixed (…)" semantics) says so by an empty label or key.
//
// # HTML
//
// WriteHTML writes one self-contained file: no request leaves the page, so
// it opens the same on a laptop, in CI artefacts or from an air-gapped
// cluster. The page holds
//
//  1. a summary table per dataset, one row per run (plus a pooled row when a
//     dataset has several runs): requests ok and failed, duration, req/s and
//     output tok/s; and TTFT, TPOT, ITL and E2E mean, median, p90 and p99
//     in ms;
//  2. one CDF chart per metric, one series per dataset, each drawn from at
//     most 2,001 exact quantiles (analyze.Dist.Quantiles), which bounds the
//     page's size: two replays of 12,000 requests give about 1.5 MB;
//  3. Apache ECharts 5.6.0 (assets/echarts.min.js, licence in
//     assets/ECHARTS-LICENSE.txt), inlined with go:embed;
//  4. a self-check script, always included since it costs a few hundred
//     bytes: after the charts are drawn it writes into the hidden
//     <pre id="selfcheck"> a JSON object {"charts": {chart id: {series
//     name: points}}, "errors": [script errors]}. The headless-Chromium
//     test reads it from the dumped DOM.
//
// Chart options are built with go-echarts but rendered by this package's
// own template (assets/report.html.tmpl): go-echarts' page templates load
// ECharts from a CDN and give charts random ids, and the report must be
// offline and byte-for-byte reproducible. Chart ids are fixed (cdf-ttft,
// cdf-tpot, cdf-itl, cdf-e2e) and nothing depends on time or map order, so
// the same datasets always give the same bytes.
//
// Package report does not read or write files; the command line does.
package report
