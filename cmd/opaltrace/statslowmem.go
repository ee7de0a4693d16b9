package main

import (
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

// summaryColumns are the columns analyze.SummarizeStream reads; reading
// only them makes each pass over a large file several times faster
// (trace's BenchmarkReadParquetColumns).
var summaryColumns = []string{"status", "input_tokens", "output_tokens", "arrival_s", "ttft_s", "e2e_s", "itl_s"}

// parquetSource scans an opaltrace Parquet file once per call.
//
// It hands out trace.ScanColumns' one reused request, valid only during
// the call: SummarizeStream reads the values and keeps none. Scanning the
// columns directly instead of through trace.Reader, which allocates a
// Request and its ITL slice per row, made a pass over a simulated file
// several times faster (trace's BenchmarkScanColumns).
func parquetSource(path string) analyze.Source {
	return func(yield func(*trace.Request) error) error {
		return trace.ScanColumns(path, summaryColumns, yield)
	}
}

// statsLowMemory prints the exact latency summary of each Parquet input,
// pooled over its runs, in several passes without loading the file.
func statsLowMemory(c *cli.Command, opts report.StatsOptions) error {
	for _, arg := range c.Args().Slice() {
		label, path := splitLabel(arg)
		if !isParquet(path) {
			return fmt.Errorf("%s: --low-memory reads opaltrace Parquet files only (ingest it first)", path)
		}
		s, err := analyze.SummarizeStream(parquetSource(path), opts.Percentiles)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			b, err := report.StreamSummaryJSON(label, s)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(c.Writer, "%s\n", b); err != nil {
				return err
			}
			continue
		}
		if err := report.WriteStreamSummary(c.Writer, label, "all runs pooled", s); err != nil {
			return err
		}
	}
	return nil
}
