package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/report"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print a vLLM-style summary per run, recomputed from the per-request data",
		ArgsUsage: "FILE...",
		Flags: append(ingestFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON in vLLM's result vocabulary"},
			&cli.StringFlag{Name: "percentiles", Value: "99", Usage: "comma-separated percentiles (numpy linear)"},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("stats: no input files")
			}
			pcts, err := parsePercentiles(c.String("percentiles"))
			if err != nil {
				return err
			}
			opts := report.StatsOptions{Percentiles: pcts}
			var sums []*analyze.Summary
			for _, arg := range c.Args().Slice() {
				ds, err := loadDataset(arg, ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
				if err != nil {
					return err
				}
				sums = append(sums, analyze.SummarizeRuns(ds.Runs, ds.Requests)...)
			}
			if c.Bool("json") {
				b, err := report.StatsJSON(sums, opts)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.Writer, "%s\n", b)
				return err
			}
			return report.WriteStats(c.Writer, sums, opts)
		},
	}
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || p < 0 || p > 100 {
			return nil, fmt.Errorf("--percentiles: %q is not a percentile in [0, 100]", f)
		}
		out = append(out, p)
	}
	return out, nil
}
