package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/opal"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

// opalConfigFlags are the flags of replay --opal-config, new for each
// command.
func opalConfigFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "opal-config", Usage: "replay an Opal sim_config.json whole (workload stages, workers, hardware, KV tiers, router), each stage a run of its own; TRACE is then not given"},
		&cli.BoolFlag{Name: "print-config", Usage: "with --opal-config: print the Opal config as an opaltrace cluster file (and what it cannot say) instead of replaying"},
		&cli.BoolFlag{Name: "opal-compat", Usage: "with --opal-config: compute what Opal computes, its quirks included (docs: opal-notes.md); ttft_s is then Opal's TTFT"},
		&cli.StringSliceFlag{Name: "opal-quirk", Usage: "with --opal-compat: NAME=off does what opaltrace does instead of quirk NAME (" + strings.Join(replay.OpalQuirkNames, ", ") + ")"},
		&cli.StringFlag{Name: "opal-stats", Usage: "with --opal-config: also write Opal's outputs, DIR/stage_<i>/opal_stats.json per stage (the latency histogram's bug kept only with --opal-compat)"},
	}
}

// printConfigBefore lets --print-config run without -o: it prints and
// writes nothing.
func printConfigBefore(ctx context.Context, c *cli.Command) (context.Context, error) {
	if c.Bool("print-config") && !c.IsSet("output") {
		if err := c.Set("output", os.DevNull); err != nil {
			return ctx, err
		}
	}
	return ctx, nil
}

// opalConfigReplay is replay --opal-config: the Opal config's stages
// replayed with opaltrace's semantics on the cluster the config describes
// (override flags apply over it), or, with --opal-compat, as Opal
// computes them. The seed is the config's simulation.seed unless --seed.
func opalConfigReplay(_ context.Context, c *cli.Command) error {
	if c.NArg() != 0 {
		return errors.New("replay: --opal-config takes the workload from the Opal config: give no TRACE")
	}
	for _, f := range []string{"config", "opal-workload", "sample", "sample-rate"} {
		if c.IsSet(f) {
			return fmt.Errorf("replay: --opal-config and --%s: the Opal config says the cluster and the workload; give one", f)
		}
	}
	if c.IsSet("run") {
		return errors.New("replay: --run selects input runs, and --opal-config has none (--run-name names the simulated run)")
	}
	if c.Bool("print-config") {
		cfg, missing, err := opal.LoadCluster(c.String("opal-config"))
		if err != nil {
			return err
		}
		text, notes := cfg.ClusterYAML()
		fmt.Fprint(c.Writer, text)
		for _, n := range append(notes, missing...) {
			fmt.Fprintf(c.ErrWriter, "note: %s\n", n)
		}
		return nil
	}
	cfg, err := opal.Load(c.String("opal-config"))
	if err != nil {
		return err
	}
	if c.Bool("opal-compat") {
		return opalCompatReplay(c, cfg)
	}
	if c.IsSet("opal-quirk") {
		return errors.New("replay: --opal-quirk switches quirks of --opal-compat")
	}
	cl, notes, err := cfg.Cluster()
	if err != nil {
		return err
	}
	if cl, err = withFlags(c, cl); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(c.ErrWriter, "note: %s\n", n)
	}
	over, err := overridesFor(cl)
	if err != nil {
		return err
	}
	seed := cfg.Seed
	if c.IsSet("seed") {
		seed = cl.Seed
	}
	jobs, err := opalJobs(cl, over, cfg.Workload, seed, c.String("run-name"))
	if err != nil {
		return err
	}
	sums, err := replayToParquet(jobs, c.String("output"), c.String("per-second"), c.ErrWriter)
	if err != nil {
		return err
	}
	if dir := c.String("opal-stats"); dir != "" {
		_, recs, err := trace.ReadFile(c.String("output"))
		if err != nil {
			return err
		}
		byRun := map[string][]*trace.Request{}
		for _, r := range recs {
			byRun[r.Run] = append(byRun[r.Run], r)
		}
		for i, j := range jobs {
			st := opal.ReplayStage(byRun[j.name], cl.Workers)
			if err := writeOpalStats(dir, cfg.Workload.Stages[i].StageName(), st, false, c.ErrWriter); err != nil {
				return err
			}
		}
	}
	return report.WriteStats(c.Writer, sums, report.StatsOptions{})
}

// opalCompatReplay is replay --opal-config --opal-compat.
func opalCompatReplay(c *cli.Command, cfg *opal.Config) error {
	q := replay.AllOpalQuirks()
	for _, s := range c.StringSlice("opal-quirk") {
		name, val, ok := strings.Cut(s, "=")
		on := val == "on"
		if !ok || !on && val != "off" {
			return fmt.Errorf("replay: --opal-quirk %q: want NAME=off or NAME=on", s)
		}
		if err := q.Set(name, on); err != nil {
			return fmt.Errorf("replay: --opal-quirk: %w", err)
		}
	}
	seed := cfg.Seed
	if c.IsSet("seed") {
		seed = c.Uint64("seed")
	}
	compat := cfg.Compat(q)
	compat.Seed = seed
	name := c.String("run-name")
	// Opal runs its stages one after another in one simulation, each on
	// the cluster the previous one left.
	var stages []replay.OpalCompatStage
	for _, s := range cfg.Workload.Stages {
		runName := name
		if len(cfg.Workload.Stages) > 1 {
			runName = name + "/" + s.StageName()
		}
		reqs, err := cfg.Workload.Requests(s, seed, runName)
		if err != nil {
			return err
		}
		stages = append(stages, replay.OpalCompatStage{Requests: reqs, Run: runName, FinishGapSec: s.FinishGapSec()})
	}
	outs, err := replay.RunOpalCompatStages(compat, stages)
	if err != nil {
		return err
	}
	var runs []trace.Run
	var all []*trace.Request
	var sums []*analyze.Summary
	for i, s := range cfg.Workload.Stages {
		out, runName := outs[i], stages[i].Run
		run := trace.Run{Name: runName, Stage: s.StageName(), Source: "opal-compat", Engine: "opal", Model: cfg.ModelName,
			DurationSec: trace.Some(out.End - out.Start),
			Extra:       map[string]string{"opal_config": cfg.File, "workload": "opal " + s.Type, "opal_quirks": quirkText(q)}}
		fmt.Fprintf(c.ErrWriter, "%s: %s, Opal-compatible (%s) on %s: %d steps, %d preemptions, %d prompt tokens from the KV tiers, %.0f to %.0f s\n",
			runName, human.Plural(len(out.Records), "request"), quirkText(q), human.Plural(compat.Workers, "worker"), out.Steps, out.Preemptions, out.HitTokens, out.Start, out.End)
		runs = append(runs, run)
		all = append(all, out.Records...)
		sums = append(sums, analyze.Summarize(run, out.Records))
	}
	if err := writeRecords(c.String("output"), runs, all); err != nil {
		return err
	}
	if dir := c.String("opal-stats"); dir != "" {
		for i, st := range outs {
			if err := writeOpalStats(dir, cfg.Workload.Stages[i].StageName(), st, q == replay.AllOpalQuirks(), c.ErrWriter); err != nil {
				return err
			}
		}
	}
	return report.WriteStats(c.Writer, sums, report.StatsOptions{})
}

// quirkText lists the quirks switched off, or says that all are on.
func quirkText(q replay.OpalQuirks) string {
	var off []string
	for _, name := range replay.OpalQuirkNames {
		probe := q
		if err := probe.Set(name, true); err == nil && probe != q {
			off = append(off, name)
		}
	}
	if len(off) == 0 {
		return "all of Opal's quirks"
	}
	return "quirks off: " + strings.Join(off, ", ")
}

// writeRecords writes reqs, of runs, atomically to path.
func writeRecords(path string, runs []trace.Run, reqs []*trace.Request) error {
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	w, err := trace.NewWriterWith(f, trace.WriterOptions{})
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			return err
		}
	}
	w.SetRuns(runs)
	if err := w.Close(); err != nil {
		return err
	}
	return f.Commit()
}

// writeOpalStats writes st as DIR/STAGE/opal_stats.json, atomically.
func writeOpalStats(dir, stage string, st *replay.OpalRun, q7 bool, stderr io.Writer) error {
	path := filepath.Join(dir, stage, "opal_stats.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := opal.WriteStats(f, st, q7); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s\n", path)
	return nil
}
