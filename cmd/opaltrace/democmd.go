package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/samples"
	"github.com/opaltrace/opaltrace/trace"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run the whole pipeline on the embedded Mooncake sample: ingest, stats, replay on 4 and 8 workers, report",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "opaltrace-demo", Usage: "directory for the outputs"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			_, err := runDemo(c.String("output"), c.Writer, c.ErrWriter)
			return err
		},
	}
}

// demoResult is what the demo produced, for tests.
type demoResult struct {
	Observed, Report string
	Simulated        map[int]*analyze.Summary // by worker count
}

// demoWorkers are the two cluster variants the demo compares.
var demoWorkers = []int{4, 8}

// runDemo runs the pipeline offline on the sample embedded in the binary:
// the first 10 minutes of the Mooncake conversation trace (1,750 requests;
// Apache-2.0, see samples/SOURCES.md). Mooncake records arrivals, lengths
// and prefix hashes but no latencies, so the report compares the two
// simulated variants with each other.
func runDemo(dir string, stdout, stderr io.Writer) (*demoResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := &demoResult{Simulated: map[int]*analyze.Summary{}}

	// 1. ingest: the embedded sample, as a user's file would be.
	data, err := samples.FS.ReadFile(samples.MooncakeFirst10Min)
	if err != nil {
		return nil, err
	}
	input := filepath.Join(dir, filepath.Base(samples.MooncakeFirst10Min))
	if err := os.WriteFile(input, data, 0o644); err != nil {
		return nil, err
	}
	res.Observed = filepath.Join(dir, "observed.parquet")
	fmt.Fprintf(stdout, "== 1. ingest %s (Mooncake conversation trace, first 10 minutes)\n", input)
	if err := ingestToParquet([]string{input}, res.Observed, ingest.Options{Format: "mooncake"}, false, stdout); err != nil {
		return nil, err
	}
	runs, reqs, err := trace.ReadFile(res.Observed)
	if err != nil {
		return nil, err
	}

	// 2. stats of the observed trace: Mooncake has no latencies, so this
	// is the workload: requests, tokens, rate.
	fmt.Fprintf(stdout, "\n== 2. stats %s\n", res.Observed)
	if err := report.WriteStats(stdout, analyze.SummarizeRuns(runs, reqs), report.StatsOptions{}); err != nil {
		return nil, err
	}

	// 3. replay on two cluster variants.
	sets := make([]report.Dataset, 0, len(demoWorkers))
	for _, n := range demoWorkers {
		cl, err := deploy.DefaultCluster().With(deploy.Setting{Key: "workers", Value: n, From: "demo"})
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("sim-%dw", n)
		out := filepath.Join(dir, name+".parquet")
		fmt.Fprintf(stdout, "\n== 3. replay on %d workers (%s, %s, TP%d, vLLM scheduler) → %s\n", n, cl.Hardware, cl.Model, cl.TP, out)
		jobs, err := traceJob(cl, reqs, name)
		if err != nil {
			return nil, err
		}
		sums, err := replayToParquet(jobs, out, "", stdout)
		if err != nil {
			return nil, err
		}
		sum := sums[0]
		res.Simulated[n] = sum
		if err := report.WriteStats(stdout, []*analyze.Summary{sum}, report.StatsOptions{Percentiles: []float64{50, 90, 99}}); err != nil {
			return nil, err
		}
		_, simReqs, err := trace.ReadFile(out)
		if err != nil {
			return nil, err
		}
		sets = append(sets, report.Dataset{Name: fmt.Sprintf("%d workers", n), Runs: []trace.Run{sum.Run}, Requests: simReqs})
	}

	// 4. report comparing the variants.
	res.Report = filepath.Join(dir, "report.html")
	if err := writeReport(res.Report, sets, report.HTMLOptions{}); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "\n== 4. report: %s\n", res.Report)
	return res, nil
}
