// Command opaltrace ingests LLM-serving traces into Parquet, prints
// vLLM-exact summaries, replays them through a simulated serving cluster
// and writes offline HTML reports. See doc.go and the README.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Stderr, os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "opaltrace: %v\n", err)
		os.Exit(1)
	}
}

// run is the whole program, given its output streams and arguments
// (args[0] is the program name), so tests drive it without a process.
func run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	return newApp(stdout, stderr).Run(ctx, args)
}
