// Command opaltrace ingests LLM-serving traces into Parquet, prints
// vLLM-exact summaries, replays them through a simulated serving cluster
// and writes offline HTML reports. See doc.go and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/termsafe"
)

func main() {
	onSignal(os.Stderr, os.Exit)
	if err := run(context.Background(), os.Stdout, os.Stderr, os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "opaltrace: %s\n", termsafe.Text(err.Error()))
		os.Exit(exitCode(err))
	}
}

// exitCode is the exit status of a failed run: 2 for a command line that
// does not parse (as flag and getopt do), 1 for anything else (bad data,
// dropped records, I/O). A run without error exits 0.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case isUsage(err):
		return 2
	}
	return 1
}

func isUsage(err error) bool {
	_, ok := errors.AsType[*usageError](err)
	return ok
}

// run is the whole program, given its output streams and arguments
// (args[0] is the program name), so tests drive it without a process.
func run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	return newApp(stdout, stderr).Run(ctx, args)
}

// interruptSignals end a run early: Ctrl-C, kill, a closed terminal.
var interruptSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// onSignal makes an interrupt discard every output being written (no
// hidden temporary file is left beside it) and exit with 128 + the
// signal's number, as shells report a process a signal killed (130 for
// SIGINT, 143 for SIGTERM, 129 for SIGHUP).
//
// Note: the outputs are removed, then the process exits at once, rather
// than cancelling a context: the long loops (ingest, the replay engine)
// do not poll one, and an interrupt must not wait for them. A Commit in
// progress finishes first (atomicfile holds its lock), so a file is either
// whole in place or gone.
func onSignal(stderr io.Writer, exit func(int)) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, interruptSignals...)
	go func() {
		sig := <-ch
		discarded := atomicfile.AbortAll()
		msg := fmt.Sprintf("opaltrace: interrupted (%v)", sig)
		if len(discarded) > 0 {
			msg += "; discarded the unfinished " + strings.Join(discarded, ", ")
		}
		fmt.Fprintln(stderr, msg)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		exit(code)
	}()
}
