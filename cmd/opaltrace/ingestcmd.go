package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/trace"
)

// ingestFlags are the flags of every command that reads trace files.
func ingestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "format", Value: "auto", Usage: "input format: auto or one of " + strings.Join(ingest.Names(), ", ")},
		&cli.Int64Flag{Name: "block-size", Value: 512, Usage: "tokens per hash_ids entry for formats that do not record it (mooncake)"},
		&cli.IntFlag{Name: "max-errors", Value: 100, Validator: intIn(0, maxErrorsMax), Usage: "stop after this many bad records (0: no limit)"},
		&cli.BoolFlag{Name: "allow-errors", Usage: "exit 0 even when bad records were dropped"},
		&cli.IntFlag{Name: "max-line-bytes", Value: ingest.DefaultMaxLineBytes, Validator: intIn(1, maxLineBytesMax),
			Usage: "a longer line of a line-oriented format (Mooncake, AIPerf, OTLP, SGLang logs) is a bad record"},
		&cli.IntFlag{Name: "max-document-bytes", Value: ingest.DefaultMaxDocumentBytes, Validator: intIn(1, maxDocumentBytesMax),
			Usage: "a longer input of a whole-document JSON format (vLLM, SGLang bench, GenAI-Perf, GuideLLM, LLMPerf, inference-perf, agentic, Opal) is an error"},
	}
}

func ingestOptions(c *cli.Command) ingest.Options {
	return ingest.Options{
		Format:           c.String("format"),
		BlockSize:        c.Int64("block-size"),
		MaxErrors:        c.Int("max-errors"),
		MaxLineBytes:     c.Int("max-line-bytes"),
		MaxDocumentBytes: int64(c.Int("max-document-bytes")),
	}
}

func ingestCommand() *cli.Command {
	return &cli.Command{
		Name:      "ingest",
		Usage:     "read traces in any supported format into one Parquet file",
		ArgsUsage: "FILE|DIR...",
		Flags: append(ingestFlags(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "Parquet file to write"},
			&cli.StringFlag{Name: "run", Usage: "prefix of the run names (default: the input's base name)"},
			&cli.StringFlag{Name: "model", Usage: "model served, for files that do not record it (kept in the run metadata)"},
			&cli.StringFlag{Name: "hardware", Usage: "hardware the server ran on, e.g. 4xH200 (kept in the run metadata)"},
			&cli.IntFlag{Name: "tp", Validator: intIn(0, maxTP), Usage: "tensor-parallel size, for files that do not record it"},
			&cli.StringFlag{Name: "engine", Usage: "serving engine, for files that do not record it: " + strings.Join(ingest.Engines, " or ")},
			&cli.StringFlag{Name: "engine-version", Usage: "the engine's release, e.g. 0.8.3, for files that do not record it: replay takes that version's defaults (kept in the run metadata)"},
			&cli.StringSliceFlag{Name: "engine-opt", Usage: "engine option `KEY=VALUE` kept in the run metadata (repeatable), e.g. disable_radix_cache=true; replay reads " + strings.Join(deploy.EngineOptions(), ", ")},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("ingest: no input files")
			}
			opts := ingestOptions(c)
			opts.Run = c.String("run")
			opts.Model, opts.Hardware, opts.Engine, opts.EngineVersion = c.String("model"), c.String("hardware"), c.String("engine"), c.String("engine-version")
			opts.TP = c.Int("tp")
			for _, kv := range c.StringSlice("engine-opt") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("ingest: --engine-opt %q: want KEY=VALUE", kv)
				}
				if k == ingest.EngineVersionKey {
					return fmt.Errorf("ingest: --engine-opt %q: the engine's version is --engine-version %s", kv, v)
				}
				if !slices.Contains(deploy.EngineOptions(), k) {
					// Kept, as asked, but said: a misspelt option
					// would otherwise change nothing, silently.
					fmt.Fprintf(c.ErrWriter, "opaltrace: ingest: --engine-opt %s: kept in the run metadata, but no replay reads it (replay reads %s)\n", k, strings.Join(deploy.EngineOptions(), ", "))
				}
				if opts.EngineOpts == nil {
					opts.EngineOpts = map[string]string{}
				}
				opts.EngineOpts[k] = v
			}
			if err := checkOutputs([]outputFile{{"output", c.String("output")}}, c.Args().Slice()); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			return ingestToParquet(c.Args().Slice(), c.String("output"), opts, c.Bool("allow-errors"), c.ErrWriter)
		},
	}
}

// ingestToParquet converts inputs into one Parquet file, atomically: a
// fatal error (unreadable input, too many bad records) writes nothing; bad
// records are printed, counted and dropped, and make the command fail after
// the good ones were written unless allowErrors.
func ingestToParquet(inputs []string, out string, opts ingest.Options, allowErrors bool, stderr io.Writer) error {
	f, err := atomicfile.Create(out)
	if err != nil {
		return err
	}
	defer f.Abort()
	w, err := trace.NewWriter(f)
	if err != nil {
		return err
	}
	list := ingest.List(inputs) // directories are walked once, for their size and their files
	task := readMeter(list.Size, stderr).Start("ingest", "requests", 0)
	write, c := countRequests(task, w.Write)
	badOut := task.Out(stderr)
	runs, st, err := list.Read(opts, write, func(e *ingest.SyntaxError) {
		fmt.Fprintf(badOut, "opaltrace: %v\n", e)
	})
	if err != nil {
		task.Abort()
		return err
	}
	c.Flush()
	task.Finish()
	if st.Requests == 0 && st.Dropped > 0 {
		// Nothing good: an empty file would pass for a converted trace.
		printWarnings(stderr, st.Warnings)
		return fmt.Errorf("every record was bad (%d dropped): %s not written", st.Dropped, out)
	}
	w.SetRuns(inputNames(runs, inputs))
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	printWarnings(stderr, st.Warnings)
	if len(st.Companions) > 0 {
		fmt.Fprintf(stderr, "read %d summary files with their traces: %s\n", len(st.Companions), strings.Join(st.Companions, ", "))
	}
	if len(st.Skipped) > 0 {
		fmt.Fprintf(stderr, "skipped %d files that no format recognises or that are not files: %s\n", len(st.Skipped), strings.Join(st.Skipped, ", "))
	}
	fmt.Fprintf(stderr, "wrote %s: %s in %s from %s", out, human.Plural(int(st.Requests), "request"), human.Plural(len(runs), "run"), human.Plural(st.Files, "file"))
	if st.Dropped > 0 {
		fmt.Fprintf(stderr, "; dropped %d bad records", st.Dropped)
	}
	fmt.Fprintln(stderr)
	if st.Dropped > 0 && !allowErrors {
		return fmt.Errorf("%d bad records dropped (the good ones are in %s; --allow-errors accepts this)", st.Dropped, out)
	}
	return nil
}

// printWarnings prints what the readers warned of, one line each.
func printWarnings(stderr io.Writer, ws []*ingest.Warning) {
	for _, w := range ws {
		fmt.Fprintf(stderr, "opaltrace: %v\n", w)
	}
}

// inputNames returns runs with the files they were read from named as
// the inputs name them: a file given on the command line by its base
// name, a file found in a directory given by its path inside that
// directory. An output file then says which input a run came from
// without recording the machine's directory layout (a home directory, a
// user name) wherever it is sent.
func inputNames(runs []trace.Run, inputs []string) []trace.Run {
	name := func(p string) string {
		if p == "" || p == "-" {
			return p
		}
		for _, in := range inputs {
			if st, err := os.Stat(in); err != nil || !st.IsDir() {
				continue
			}
			if rel, err := filepath.Rel(in, p); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
				return filepath.ToSlash(rel)
			}
		}
		return filepath.Base(p)
	}
	out := make([]trace.Run, len(runs))
	for i, r := range runs {
		r.File = name(r.File)
		if len(r.Extra) > 0 {
			r.Extra = maps.Clone(r.Extra)
			for _, k := range []string{"summary_file", "meta_file"} {
				if v := r.Extra[k]; v != "" {
					r.Extra[k] = name(v)
				}
			}
		}
		out[i] = r
	}
	return out
}
