package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write an offline HTML report comparing datasets (observed and simulated)",
		ArgsUsage: "[LABEL=]FILE...",
		Flags: append(ingestFlags(),
			&cli.StringFlag{Name: "html", Aliases: []string{"o", "output"}, Required: true, Usage: "HTML file to write (-o and --output, as the other commands name their output)"},
			&cli.StringFlag{Name: "per-second", Usage: "add a replay's per-second `FILE` (replay --per-second): KV cache usage of its capacity, running and waiting requests, busy and ready workers over time"},
			&cli.BoolFlag{Name: "no-compare", Usage: "leave out the comparison of each dataset with the first, run by run"},
			runFlag(),
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("report: no input files")
			}
			var inputs []string
			for _, arg := range c.Args().Slice() {
				_, path := splitLabel(arg)
				inputs = append(inputs, path)
			}
			if err := checkOutputs([]outputFile{{"html", c.String("html")}}, inputs); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			var sets []report.Dataset
			for _, arg := range c.Args().Slice() {
				label, path := splitLabel(arg)
				passes, err := byPasses(path, false, false)
				if err != nil {
					return err
				}
				if passes {
					ds, err := reportByPasses(label, path, c.StringSlice("run"))
					if err != nil {
						return err
					}
					sets = append(sets, ds)
					continue
				}
				ds, err := loadSelected(c, arg)
				if err != nil {
					return err
				}
				sets = append(sets, report.Dataset{Name: ds.Name, Runs: ds.Runs, Requests: ds.Requests})
			}
			o := report.HTMLOptions{NoCompare: c.Bool("no-compare")}
			if p := c.String("per-second"); p != "" {
				var err error
				if o.Seconds, _, err = trace.ReadSeconds(p); err != nil {
					return fmt.Errorf("--per-second: %w", err)
				}
			}
			if err := writeReport(c.String("html"), sets, o); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrWriter, "wrote %s\n", c.String("html"))
			return nil
		},
	}
}

// reportByPasses summarizes the runs of the Parquet file at path, and all
// of them pooled, by passes over it: a report of a million simulated
// requests in bounded memory.
func reportByPasses(label, path string, sel []string) (report.Dataset, error) {
	runs, _, src, err := selectedSource(path, "run", false, sel)
	if err != nil {
		return report.Dataset{}, err
	}
	opts := report.HTMLStreamOptions()
	sums, err := analyze.SummarizeStreamGroups(src, "run", runs,
		analyze.StreamOptions{Percentiles: opts.Percentiles}, trace.Run{Name: label}, &opts)
	if err != nil {
		return report.Dataset{}, err
	}
	// One more pass for the sections beyond the summaries (lengths, per
	// second, per worker, TTFT decomposition, cache curve).
	_, collect, err := selectedColumns(path, sel, append([]string{"run"}, report.CollectorColumns...))
	if err != nil {
		return report.Dataset{}, err
	}
	c := report.NewCollector()
	if err := collect(func(r *trace.Request) error {
		c.Add(r)
		return nil
	}); err != nil {
		return report.Dataset{}, err
	}
	n := len(sums) - 1
	return report.Dataset{Name: label, Summaries: sums[:n], Pooled: sums[n], Extras: c.Extras()}, nil
}

// writeReport renders the report in memory, then writes it atomically.
func writeReport(path string, sets []report.Dataset, o report.HTMLOptions) error {
	var buf bytes.Buffer
	if err := report.WriteHTMLWith(&buf, sets, o); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, buf.Bytes())
}
