package main

import (
	"context"
	"fmt"
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
	app := &cli.Command{
		Name:      "opaltrace",
		Usage:     "ingest LLM-serving traces, compute vLLM-exact metrics, replay them through a simulated cluster, report",
		Writer:    stdout,
		ErrWriter: stderr,
		Commands:  commands(),
		// Errors are returned to main, which prints them once and exits 1.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		HideVersion:    true,
	}
	app.OnUsageError = onUsageError
	for _, c := range app.Commands {
		c.OnUsageError = onUsageError
	}
	return app
}

// A usageError is a command line that does not parse: a bad flag or
// flag value. main prints it once, with a hint, and exits 2 (as flag and
// getopt do), not with the whole help.
type usageError struct {
	err     error
	command string // "opaltrace stats"
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v (see '%s --help')", e.err, e.command)
}

func (e *usageError) Unwrap() error { return e.err }

func onUsageError(_ context.Context, cmd *cli.Command, err error, _ bool) error {
	return &usageError{err: err, command: cmd.FullName()}
}
