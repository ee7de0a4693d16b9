package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

// opalWorkloadFlag makes replay generate its workload from an Opal
// config's stages instead of reading a TRACE. (A function: a flag holds
// its value, and each command gets its own.)
func opalWorkloadFlag() cli.Flag {
	return &cli.StringFlag{Name: "opal-workload", Usage: "replay the workload stages of this Opal sim_config.json (UniformReqRate, ExponentialReqRate, trace), each stage a run of its own; TRACE is then not given"}
}

// opalReplay is replay --opal-workload: every stage of the Opal config is
// generated (or, for a trace stage, read relative to the config) and
// replayed as a run of its own, NAME/stage_<i> (--run-name) when there
// are several.
// The seed is --seed when given, else the Opal config's simulation.seed.
func opalReplay(_ context.Context, c *cli.Command) error {
	if c.NArg() != 0 {
		return errors.New("replay: --opal-workload takes the workload from the Opal config: give no TRACE")
	}
	if c.IsSet("run") {
		return errors.New("replay: --run selects input runs, and --opal-workload has none (--run-name names the simulated run)")
	}
	cl, err := clusterFor(c)
	if err != nil {
		return err
	}
	over, err := overridesFor(cl)
	if err != nil {
		return err
	}
	w, err := replay.LoadOpalWorkload(c.String("opal-workload"))
	if err != nil {
		return err
	}
	seed := w.Seed
	if c.IsSet("seed") {
		seed = cl.Seed
	}
	jobs, err := opalJobs(cl, over, w, seed, c.String("run-name"))
	if err != nil {
		return err
	}
	sums, err := replayToParquet(jobs, c.String("output"), c.String("per-second"), c.ErrWriter)
	if err != nil {
		return err
	}
	return report.WriteStats(c.Writer, sums, report.StatsOptions{})
}

// opalJobs makes one open-loop job per stage of w.
func opalJobs(cl deploy.Cluster, over deploy.Overrides, w *replay.OpalWorkload, seed uint64, runName string) ([]replayJob, error) {
	var jobs []replayJob
	for _, s := range w.Stages {
		name := runName
		if len(w.Stages) > 1 {
			name = runName + "/" + s.StageName()
		}
		reqs, err := w.Requests(s, seed, name)
		if err != nil {
			return nil, err
		}
		setup, err := deploy.Resolve(cl, trace.Run{}, over)
		if err != nil {
			return nil, err
		}
		setup.Config.Workload.Mode = replay.ModeOpen // Opal's stages are open loop; --time-scale still applies
		how := "opal " + s.Type
		jobs = append(jobs, replayJob{name: name, of: s.StageName(), in: reqs, setup: setup, how: how})
	}
	return jobs, nil
}
