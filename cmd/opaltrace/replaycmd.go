package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
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
			sum, err := replayToParquet(cl, ds.Requests, c.String("run"), c.String("output"), c.ErrWriter)
			if err != nil {
				return err
			}
			return report.WriteStats(c.Writer, []*analyze.Summary{sum}, report.StatsOptions{})
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

// replayToParquet replays reqs through the cluster and writes the
// simulated requests atomically to out, returning their summary.
func replayToParquet(cl cluster, reqs []*trace.Request, runName, out string, stderr io.Writer) (*analyze.Summary, error) {
	dep, err := cl.deployment()
	if err != nil {
		return nil, err
	}
	kvTokens, err := dep.KVCacheTokens(cl.GPUMemoryUtilization)
	if err != nil {
		return nil, err
	}
	cfg := cl.Config
	block := cfg.Scheduler.BlockSize
	if block == 0 {
		block = replay.DefaultConfig().Scheduler.BlockSize
	}
	f, err := atomicfile.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Abort()
	w, err := trace.NewWriter(f)
	if err != nil {
		return nil, err
	}
	run := trace.Run{
		Name: runName, Source: "simulated", Model: dep.LLM.Name, Engine: "vllm",
		Hardware: dep.Hardware.Name, TP: cl.TP,
		Extra: map[string]string{"config": cl.yaml()},
	}
	var sim []*trace.Request
	step, err := cl.stepModel(dep)
	if err != nil {
		return nil, err
	}
	st, err := replay.RunInputs(cfg, step, kvTokens/block, replay.Requests(reqs), func(r *trace.Request) error {
		r.Run = runName
		if r.Model == "" {
			r.Model = run.Model
		}
		sim = append(sim, r)
		return w.Write(r)
	}, replay.Options{PerSecond: cl.perSecond != ""})
	if err != nil {
		return nil, err
	}
	if cl.perSecond != "" {
		if err := writeSeconds(cl, dep, st.Seconds); err != nil {
			return nil, err
		}
	}
	w.SetRuns([]trace.Run{run})
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "wrote %s: %d simulated requests (%d rejected, %d timed out, %d preemptions, %d steps in %d events, %.1f s simulated) on %d workers\n",
		out, st.Requests, st.Rejected, st.TimedOut, st.Preemptions, st.Steps, st.Events, st.End.Seconds(), cfg.Workers)
	return analyze.Summarize(run, sim), nil
}

// writeSeconds writes a replay's per-second statistics atomically to
// cl.perSecond, with the configuration and the cost model in the metadata.
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
