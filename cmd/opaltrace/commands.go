package main

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"

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
		versionCommand(),
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
		// --version prints the build's module version and VCS revision
		// (the version command prints the same).
		Version: versionLine(),
		// completion bash|zsh|fish|pwsh prints a completion script.
		EnableShellCompletion: true,
	}
	app.OnUsageError = onUsageError
	for _, c := range app.Commands {
		c.OnUsageError = onUsageError
		for _, f := range c.Flags {
			hideOverrideDefault(f)
		}
	}
	return app
}

// hideOverrideDefault hides the default of an override flag in the help:
// unset, an override changes nothing, so "(default: 0)" would be a value
// the run does not use.
//
// Note: every flag of urfave/cli v3 is a *cli.FlagBase of its value type,
// with the same Usage and HideDefault fields; a type switch named each
// instantiation in use, and missed any new one.
func hideOverrideDefault(f cli.Flag) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	usage, hide := v.Elem().FieldByName("Usage"), v.Elem().FieldByName("HideDefault")
	if usage.Kind() == reflect.String && hide.Kind() == reflect.Bool && hide.CanSet() &&
		strings.HasPrefix(usage.String(), "override:") {
		hide.SetBool(true)
	}
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
