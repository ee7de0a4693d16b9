package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/progress"
	"github.com/opaltrace/opaltrace/trace"
)

// summaryColumns are the columns the passes of a summary after the first
// read (analyze.SummarizeStream: latencies and peaks); firstColumns are
// those the first reads besides (counts, tokens, semantics). Reading only
// them makes each pass over a large file several times faster (trace's
// BenchmarkReadParquetColumns).
var (
	summaryColumns = []string{"status", "output_tokens", "arrival_s", "ttft_s", "e2e_s", "itl_s"}
	firstColumns   = []string{"input_tokens", "itl_unit", "e2e_basis", "ttft_basis", "output_tokens_source"}
)

// streamColumns are the columns of the first pass and of the others of a
// summary by passes grouped by key, with the request ids goodput names
// when a request lacks a metric.
func streamColumns(key string, goodput bool) (first, rest []string) {
	rest = append(append([]string(nil), summaryColumns...), analyze.GroupColumns(key)...)
	first = append(append([]string(nil), rest...), firstColumns...)
	if goodput {
		first = append(first, "request_id")
	}
	return first, rest
}

// parquetSource scans an opaltrace Parquet file once per call: the
// columns first on the first call, rest on the others (the passes of a
// summary after the first read fewer fields).
//
// It hands out trace.ScanColumns' one reused request, valid only during
// the call: the summaries by passes read the values and keep none.
// Scanning the columns directly instead of through trace.Reader, which
// allocates a Request and its ITL slice per row, made a pass over a
// simulated file several times faster (trace's BenchmarkScanColumns).
func parquetSource(path string, first, rest []string) analyze.Source {
	calls := 0
	return func(yield func(*trace.Request) error) error {
		cols := rest
		if calls == 0 {
			cols = first
		}
		calls++
		return trace.ScanColumns(path, cols, yield)
	}
}

// selectedSource returns the runs of the Parquet file at path that the
// --run selectors sel pick (all without any), all the file's runs, and a
// source of the picked runs' requests for a summary by passes grouped by
// key.
func selectedSource(path, key string, goodput bool, sel []string) (picked, all []trace.Run, src analyze.Source, err error) {
	all, _, err = trace.ReadRuns(path)
	if err != nil {
		return nil, nil, nil, err
	}
	first, rest := streamColumns(key, goodput)
	picked, src, err = selectRuns(path, all, sel, first, rest)
	return picked, all, src, err
}

// selectedColumns is selectedSource for a pass reading cols.
func selectedColumns(path string, sel []string, cols []string) ([]trace.Run, analyze.Source, error) {
	runs, _, err := trace.ReadRuns(path)
	if err != nil {
		return nil, nil, err
	}
	return selectRuns(path, runs, sel, cols, cols)
}

// selectRuns returns the runs sel picks of the file at path and a source
// of their requests reading the columns first, then rest.
func selectRuns(path string, runs []trace.Run, sel []string, first, rest []string) ([]trace.Run, analyze.Source, error) {
	sels, err := trace.ParseRunSelectors(sel)
	if err != nil || len(sels) == 0 {
		return runs, parquetSource(path, first, rest), err
	}
	idx, err := trace.SelectRuns(runs, sels)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	keep := map[string]bool{}
	picked := make([]trace.Run, 0, len(idx))
	for _, i := range idx {
		keep[runs[i].Name] = true
		picked = append(picked, runs[i])
	}
	src := parquetSource(path, append(first, "run"), append(rest, "run"))
	return picked, func(yield func(*trace.Request) error) error {
		return src(func(r *trace.Request) error {
			if !keep[r.Run] {
				return nil
			}
			return yield(r)
		})
	}, nil
}

// byPasses reports whether stats summarizes the input at path by passes
// over it rather than in memory: always with --low-memory (Parquet only),
// and for Parquet files of more than lowMemoryRequests requests unless a
// section that needs the requests in memory is asked for (then in memory,
// as asked).
func byPasses(path string, lowMemory, needsMemory bool) (bool, error) {
	parquet := path != "-" && isParquet(path)
	switch {
	case lowMemory && !parquet:
		return false, errors.New(path + ": --low-memory reads opaltrace Parquet files only (ingest it first)")
	case lowMemory && needsMemory:
		return false, errors.New("--low-memory: --series, --cache-curve and trimming need the requests in memory")
	case lowMemory:
		return true, nil
	case !parquet || needsMemory:
		return false, nil
	}
	_, rows, err := trace.ReadRuns(path)
	return rows > lowMemoryRequests, err
}

// statsByPasses summarizes each group (by key) of the Parquet file at
// path by passes over it, with the same numbers as the in-memory summary.
func statsByPasses(c *cli.Command, path string, pcts []float64, slo analyze.SLO) ([]*analyze.Analysis, error) {
	key := c.String("by")
	runs, loaded, src, err := selectedSource(path, key, !slo.Empty(), c.StringSlice("run"))
	if err != nil {
		return nil, err
	}
	opts := analyze.StreamOptions{Percentiles: pcts, Goodput: slo}
	task := progress.New(c.ErrWriter).Start("stats "+filepath.Base(path), "requests", 0)
	sums, err := analyze.SummarizeStreamGroups(countingSource(src, task), key, runs, opts, trace.Run{}, nil)
	if err != nil {
		task.Abort()
		return nil, fmt.Errorf("--by: %w", err)
	}
	task.Finish()
	as := make([]*analyze.Analysis, len(sums))
	for i, s := range sums {
		as[i] = &analyze.Analysis{Summary: s, NotComputed: analyze.ByPassesOmits}
	}
	labelRuns(as, loaded)
	return as, nil
}
