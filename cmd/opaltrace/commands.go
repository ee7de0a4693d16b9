package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v3"
)

// commands lists every subcommand in one table: name, one-line
// description, usage, flags and action. Actions only parse flags and call
// the library.
func commands() []*cli.Command {
	return []*cli.Command{
		ingestCommand(),
		statsCommand(),
		calibrateCommand(),
		replayCommand(),
		reportCommand(),
		demoCommand(),
	}
}

func newApp(stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "opaltrace",
		Usage:     "ingest LLM-serving traces, compute vLLM-exact metrics, replay them through a simulated cluster, report",
		Writer:    stdout,
		ErrWriter: stderr,
		Commands:  commands(),
		// Errors are returned to main, which prints them once and exits 1.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		HideVersion:    true,
	}
}
