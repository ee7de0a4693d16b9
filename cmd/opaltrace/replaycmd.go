package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/report"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a trace's arrivals through a simulated serving cluster",
		ArgsUsage: "TRACE",
		Flags: append(ingestFlags(),
			&cli.StringFlag{Name: "config", Usage: "cluster YAML (hardware, model, tp, workers, router, scheduler, workload, seed)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "simulated Parquet file to write"},
			&cli.StringFlag{Name: "run", Value: "simulated", Usage: "name of the simulated run"},
			&cli.IntFlag{Name: "workers", Usage: "override: number of workers"},
			&cli.StringFlag{Name: "hardware", Usage: "override: GPU preset"},
			&cli.StringFlag{Name: "model", Usage: "override: model name or config.json path; a .yaml file is a cost model written by opaltrace calibrate"},
			&cli.IntFlag{Name: "tp", Usage: "override: tensor-parallel degree"},
			&cli.Int64Flag{Name: "max-num-batched-tokens", Usage: "override: token budget per step"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "override: running requests at most"},
			&cli.StringFlag{Name: "mode", Usage: "override: open, closed or sessions"},
			&cli.IntFlag{Name: "sessions", Usage: "override: sessions mode: concurrent sessions (0: each starts at its trace arrival)"},
			&cli.IntFlag{Name: "clients", Usage: "override: closed-loop clients"},
			&cli.FloatFlag{Name: "time-scale", Usage: "override: arrival time multiplier (0.5 = twice the rate)"},
			&cli.StringFlag{Name: "seed", Usage: "override: random seed"},
			&cli.Int64Flag{Name: "stream-interval", Usage: "override: tokens per streamed chunk after the first (engines' --stream-interval)"},
			&cli.FloatFlag{Name: "client-latency", Usage: "override: one-way client–server latency in seconds (adds twice to TTFT and E2E)"},
			&cli.StringFlag{Name: "per-second", Usage: "also write per-second statistics (completions, running, waiting, GPU busy, KV blocks, tokens per step) to this Parquet file"},
			&cli.FloatFlag{Name: "client-timeout", Usage: "override: seconds a client waits for the last chunk before it gives up (0: forever)"},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() != 1 {
				return errors.New("replay: want exactly one TRACE")
			}
			cl, err := loadCluster(c.String("config"))
			if err != nil {
				return err
			}
			if err := applyReplayFlags(c, &cl); err != nil {
				return err
			}
			ds, err := loadDataset(c.Args().First(), ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
			if err != nil {
				return err
			}
			jobs, err := replayJobs(cl, ds.Runs, ds.Requests, c.String("run"), c.ErrWriter)
			if err != nil {
				return err
			}
			sums, err := replayToParquet(cl, jobs, c.String("output"), c.ErrWriter)
			if err != nil {
				return err
			}
			return report.WriteStats(c.Writer, sums, report.StatsOptions{})
		},
	}
}

func applyReplayFlags(c *cli.Command, cl *cluster) error {
	if c.IsSet("workers") {
		cl.Workers = c.Int("workers")
	}
	if c.IsSet("hardware") {
		cl.Hardware = c.String("hardware")
	}
	if c.IsSet("model") {
		if m := c.String("model"); strings.HasSuffix(m, ".yaml") || strings.HasSuffix(m, ".yml") {
			cl.CostModel = m
		} else {
			cl.Model = m
		}
	}
	if c.IsSet("tp") {
		cl.TP = c.Int("tp")
	}
	if c.IsSet("max-num-batched-tokens") {
		cl.Scheduler.MaxNumBatchedTokens = c.Int64("max-num-batched-tokens")
	}
	if c.IsSet("max-num-seqs") {
		cl.Scheduler.MaxNumSeqs = c.Int("max-num-seqs")
	}
	if c.IsSet("mode") {
		cl.Workload.Mode = c.String("mode")
	}
	if c.IsSet("sessions") {
		cl.Workload.Sessions = c.Int("sessions")
	}
	if c.IsSet("clients") {
		cl.Workload.Clients = c.Int("clients")
	}
	if c.IsSet("time-scale") {
		cl.Workload.TimeScale = c.Float("time-scale")
	}
	if c.IsSet("stream-interval") {
		cl.Scheduler.StreamInterval = c.Int64("stream-interval")
	}
	if c.IsSet("client-latency") {
		cl.Client.LatencySec = c.Float("client-latency")
	}
	cl.perSecond = c.String("per-second")
	if c.IsSet("client-timeout") {
		cl.Client.TimeoutSec = c.Float("client-timeout")
	}
	if c.IsSet("seed") {
		s, err := strconv.ParseUint(c.String("seed"), 10, 64)
		if err != nil {
			return fmt.Errorf("--seed: %v", err)
		}
		cl.Seed = s
	}
	return cl.Config.Validate()
}

func writeSeconds(cl cluster, dep *model.Deployment, rows []replay.Second) error {
	cost := fmt.Sprintf("roofline: %s on %d × %s", dep.LLM.Name, cl.TP, dep.Hardware.Name)
	if cl.CostModel != "" {
		data, err := os.ReadFile(cl.CostModel)
		if err != nil {
			return err
		}
		cost = string(data)
	}
	f, err := atomicfile.Create(cl.perSecond)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := replay.WriteSeconds(f, rows, [][2]string{{replay.MetaConfig, cl.yaml()}, {replay.MetaCostModel, cost}}); err != nil {
		return err
	}
	return f.Commit()
}
