package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a trace's arrivals through a simulated serving cluster",
		ArgsUsage: "TRACE (with --sample: INPUT...)",
		Flags: append(append(ingestFlags(),
			&cli.StringFlag{Name: "config", Usage: "cluster YAML (hardware, model, tp, workers, router, scheduler, workload, seed)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "simulated Parquet file to write"},
			&cli.StringFlag{Name: "run", Value: "simulated", Usage: "name of the simulated run"},
			&cli.IntFlag{Name: "workers", Usage: "override: number of workers"},
			&cli.StringFlag{Name: "hardware", Usage: "override: GPU preset"},
			&cli.StringFlag{Name: "model", Usage: "override: model name or config.json path; a .yaml file is a cost model written by opaltrace calibrate"},
			&cli.IntFlag{Name: "tp", Usage: "override: tensor-parallel degree"},
			&cli.Int64Flag{Name: "max-num-batched-tokens", Usage: "override: token budget per step"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "override: running requests at most"},
			&cli.StringFlag{Name: "scheduler", Usage: "override: the workers' scheduler, vllm or sglang (default: the input run's engine, else vllm)"},
			&cli.StringFlag{Name: "mode", Usage: "override: open, closed or sessions"},
			&cli.IntFlag{Name: "sessions", Usage: "override: sessions mode: concurrent sessions (0: each starts at its trace arrival)"},
			&cli.IntFlag{Name: "clients", Usage: "override: closed-loop clients"},
			&cli.FloatFlag{Name: "time-scale", Usage: "override: arrival time multiplier (0.5 = twice the rate)"},
			&cli.StringFlag{Name: "seed", Usage: "override: random seed"},
			&cli.Int64Flag{Name: "stream-interval", Usage: "override: tokens per streamed chunk after the first (engines' --stream-interval)"},
			&cli.FloatFlag{Name: "client-latency", Usage: "override: one-way client–server latency in seconds (adds twice to TTFT and E2E)"},
			&cli.StringFlag{Name: "per-second", Usage: "also write per-second statistics (completions, running, waiting, GPU busy, KV blocks, tokens per step) to this Parquet file"},
			&cli.FloatFlag{Name: "client-timeout", Usage: "override: seconds a client waits for the last chunk before it gives up (0: forever)"},
			opalWorkloadFlag,
			&cli.BoolFlag{Name: "low-memory", Usage: fmt.Sprintf("summarise every run by exact passes over the written file instead of keeping its records (automatic above %d requests)", lowMemoryRequests)},
		), sampleFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			sampled := c.IsSet("sample") || c.IsSet("sample-rate")
			if c.String("opal-workload") != "" {
				if sampled {
					return errors.New("replay: --opal-workload and --sample are two workloads: give one")
				}
				return opalReplay(ctx, c)
			}
			if sampled || c.IsSet("sample-rate") {
				return sampledReplay(ctx, c)
			}
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
			in, err := loadReplayInputs(c.Args().First(), ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
			if err != nil {
				return err
			}
			jobs, err := replayJobs(cl, in, c.String("run"), c.ErrWriter)
			if err != nil {
				return err
			}
			done, err := replayRuns(cl, jobs, c.String("output"), c.ErrWriter, streamAbove(c))
			if err != nil {
				return err
			}
			return writeReplayed(c.Writer, done)
		},
	}
}

// streamAbove is the run size above which replay summarises from the
// written file: lowMemoryRequests, or every run with --low-memory.
func streamAbove(c *cli.Command) int {
	if c.Bool("low-memory") {
		return 0
	}
	return lowMemoryRequests
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
	if c.IsSet("scheduler") {
		cl.Scheduler.Engine = c.String("scheduler")
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
	cost, err := cl.costModelText(dep)
	if err != nil {
		return err
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

// schedulerFor returns cfg with the scheduler of the engine that served
// run when the cluster file and flags name none: a trace of an SGLang
// server is replayed through SGLang's scheduler, any other through vLLM's.
// An SGLang run's server options recorded at ingest (--engine-opt, kept as
// Run.Extra "engine_opt.KEY") fill the SGLang settings the cluster leaves
// at their defaults.
func schedulerFor(cfg replay.Config, run trace.Run) (replay.Config, error) {
	s := &cfg.Scheduler
	if s.Engine == "" && strings.EqualFold(run.Engine, replay.EngineSGLang) {
		s.Engine = replay.EngineSGLang
	}
	if s.Engine != replay.EngineSGLang {
		return cfg, nil
	}
	var errs []error
	opt := func(key string, set func(v string) error) {
		v, ok := run.Extra[ingest.EngineOptPrefix+key]
		if !ok {
			return
		}
		if err := set(v); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %s%s: %q: %v", run.Name, ingest.EngineOptPrefix, key, v, err))
		}
	}
	flag := func(dst *bool) func(string) error {
		return func(v string) error {
			b, err := strconv.ParseBool(v)
			*dst = *dst || b
			return err
		}
	}
	count := func(dst *int64) func(string) error {
		return func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && *dst == 0 {
				*dst = n
			}
			return err
		}
	}
	opt("disable_radix_cache", flag(&s.DisableRadixCache))
	opt("enable_mixed_chunk", flag(&s.EnableMixedChunk))
	opt("chunked_prefill_size", count(&s.ChunkedPrefillSize))
	opt("max_prefill_tokens", count(&s.MaxPrefillTokens))
	opt("context_length", count(&s.ContextLength))
	opt("schedule_policy", func(v string) error {
		if s.SchedulePolicy == "" {
			s.SchedulePolicy = v
		}
		return nil
	})
	opt("max_running_requests", func(v string) error {
		n, err := strconv.Atoi(v)
		if err == nil && s.MaxRunningRequests == 0 {
			s.MaxRunningRequests = n
		}
		return err
	})
	if len(errs) == 0 {
		if err := cfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("run %s: engine options: %v", run.Name, err))
		}
	}
	return cfg, errors.Join(errs...)
}

// engineName is the simulated run's engine.
func engineName(cfg replay.Config) string {
	if cfg.Scheduler.Engine == "" {
		return replay.EngineVLLM
	}
	return cfg.Scheduler.Engine
}
