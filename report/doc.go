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
// cluster. The page holds, in sections (each a <section id="s-…">):
//
//  1. summary: per dataset a header (source tool and version, deployment,
//     workload, cost model, the replay's cluster file folded), a table of
//     runs (requests ok and failed, duration, req/s, output tok/s) and one
//     of TTFT, TPOT, ITL and E2E mean, median, p90 and p99 in ms; "—"
//     where the data has no value (never 0.00), the source's own values
//     marked † "reported by source";
//  2. compare: every other dataset against the first, run by run (paired
//     by name, else in order, else pooled), analyze.Compare's relative
//     differences with bootstrap intervals and verdicts, and point
//     differences against values a summary-only source reported;
//  3. sweep: per configuration (deployment and workload shape) with
//     several runs, median and p99 TTFT, ITL and E2E against the load, one
//     line per configuration and dataset, and a Pareto view (tokens/s per
//     user against tokens/s per GPU);
//  4. dist: per metric a CDF with a log-x toggle, drawn from at most 2,001
//     exact quantiles (analyze.Dist.Quantiles), and a tail view (1 − CDF
//     on a log axis, with exact p99.5 … p99.999);
//  5. lengths: prompt and output length histograms, TTFT against prompt
//     length (exact median and p99 per bin), ITL against output position;
//  6. time: per-second arrivals, completions and running requests from
//     the requests' times, and from a replay's per-second file running,
//     waiting, KV usage, GPU busy, ready workers (the autoscaling plot),
//     and with KV tiers their occupancy and the links' utilisation;
//  7. why: the TTFT decomposition by percentile band, load per worker and
//     its imbalance (disaggregated, per prefill worker too, with the
//     prefix hit rates there), the ideal LRU cache curve beside the
//     recorded hit rate.
//
// What sections 5–7 need is gathered by a Collector in one pass, so a
// dataset summarized by passes over a file (10⁶ requests) gets them from
// one more pass; every series is capped (quantiles, bins, buckets of
// seconds), which bounds the page's size whatever the number of requests.
//
// Apache ECharts 5.6.0 (assets/echarts.min.js, licence in
// assets/ECHARTS-LICENSE.txt) is inlined with go:embed. A self-check
// script, always included since it costs a few hundred bytes, writes into
// the hidden <pre id="selfcheck"> a JSON object: per chart id its series
// and point counts, script errors, headings, what each section holds; the
// headless-Chromium tests read it from the dumped DOM.
//
// Labels from the input (dataset, run, model, worker names) pass through
// internal/termsafe, so terminal escapes show as text; html/template and
// json.Marshal escape markup. The CDF options are built with go-echarts;
// the other charts as plain option maps (chart.go). Both are rendered by
// this package's own template (assets/report.html.tmpl): go-echarts' page
// templates load ECharts from a CDN and give charts random ids, and the
// report must be offline and byte-for-byte reproducible. Chart ids are
// fixed and nothing depends on time or map order, so the same datasets
// always give the same bytes.
//
// Package report does not read or write files; the command line does.
package report
