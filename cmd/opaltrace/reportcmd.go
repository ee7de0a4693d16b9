package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/report"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write an offline HTML report comparing datasets (observed and simulated)",
		ArgsUsage: "[LABEL=]FILE...",
		Flags: append(ingestFlags(),
			&cli.StringFlag{Name: "html", Required: true, Usage: "HTML file to write"},
			runFlag(),
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("report: no input files")
			}
			var sets []report.Dataset
			for _, arg := range c.Args().Slice() {
				ds, err := loadSelected(c, arg)
				if err != nil {
					return err
				}
				sets = append(sets, report.Dataset{Name: ds.Name, Runs: ds.Runs, Requests: ds.Requests})
			}
			if err := writeReport(c.String("html"), sets); err != nil {
				return err
			}
			fmt.Fprintf(c.ErrWriter, "wrote %s\n", c.String("html"))
			return nil
		},
	}
}

// writeReport renders the report in memory, then writes it atomically.
func writeReport(path string, sets []report.Dataset) error {
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, sets); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, buf.Bytes())
}
