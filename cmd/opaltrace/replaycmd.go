package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/prefault"
	"github.com/opaltrace/opaltrace/metricsout"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a trace's arrivals through a simulated serving cluster",
		ArgsUsage: "TRACE (with --sample: INPUT...)",
		Flags: append(append(append(ingestFlags(),
			&cli.StringFlag{Name: "config", Usage: "cluster YAML (hardware, model, tp, workers, router, scheduler, workload, seed)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "simulated Parquet file to write"},
			&cli.StringFlag{Name: "run-name", Value: "simulated", Usage: "`NAME` of the simulated run; with several input runs, each is NAME/INPUT-RUN"},
			runFlag(),
			&cli.StringFlag{Name: "carry-cache", Value: "auto", Usage: "replay each run after the run before it with the prefix cache it left: auto (when their metadata say one server ran them one after the other with the same prompts, and prefix caching is on), on (every run after the first) or off"},
			&cli.IntFlag{Name: "workers", Usage: "override: number of workers"},
			&cli.IntFlag{Name: "prefill-workers", Usage: "override: prefill/decode disaggregation: this many of the workers prefill, the rest decode (cluster key disaggregation.prefill_workers)"},
			&cli.StringFlag{Name: "decode-router", Usage: "override: prefill/decode disaggregation: round_robin, least_requests, random, power_of_two or dynamo_kv (the default with router dynamo_kv), how each request's decode worker is chosen (cluster key disaggregation.decode_router)"},
			&cli.StringFlag{Name: "hardware", Usage: "override: GPU preset (" + hardwarePresets() + "), or a server's GPUs as ingest records them (4xH200: TP4 unless --tp/--pp/--dp say otherwise)"},
			&cli.StringFlag{Name: "model", Usage: "override: a shipped model (" + modelPresets() + "), its Hugging Face id, or a config.json path; a .yaml file is a cost model written by opaltrace calibrate"},
			&cli.IntFlag{Name: "tp", Usage: "override: tensor-parallel degree"},
			&cli.Int64Flag{Name: "max-num-batched-tokens", Usage: "override: token budget per step"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "override: running requests at most"},
			&cli.Int64Flag{Name: "num-gpu-blocks-override", Usage: "override: each worker's KV capacity in blocks (vLLM's --num-gpu-blocks-override), instead of the capacity derived from memory"},
			&cli.BoolFlag{Name: "assume-deployment", Usage: "replay measured runs that record no model or hardware on the cluster's (default) deployment anyway"},
			&cli.StringFlag{Name: "scheduler", Usage: "override: the workers' scheduler, vllm or sglang (default: the input run's engine, else vllm)"},
			&cli.StringFlag{Name: "mode", Usage: "override: open, closed or sessions"},
			&cli.IntFlag{Name: "sessions", Usage: "override: sessions mode: concurrent sessions (0: each starts at its trace arrival)"},
			&cli.IntFlag{Name: "clients", Usage: "override: closed-loop clients"},
			&cli.FloatFlag{Name: "time-scale", Usage: "override: arrival time multiplier (0.5 = twice the rate)"},
			&cli.Uint64Flag{Name: "seed", Usage: "override: random seed, 0 to 18446744073709551615"},
			&cli.Int64Flag{Name: "stream-interval", Usage: "override: tokens per streamed chunk after the first (engines' --stream-interval)"},
			&cli.FloatFlag{Name: "client-latency", Usage: "override: one-way client–server latency in seconds (adds twice to TTFT and E2E)"},
			&cli.StringFlag{Name: "per-second", Usage: "also write per-second statistics (completions, running, waiting, GPU busy, KV blocks, tokens per step) to this Parquet file"},
			&cli.StringFlag{Name: "planner-log", Usage: "with a planner (disaggregation.planner, or planner for an aggregated fleet): also write its adjustments (what the SLA planner observed and its correction factors, or the load-based planner's largest engine load per pool; the workers it asked for) to this CSV file", TakesFile: true},
			&cli.StringFlag{Name: "metrics-out", Usage: "also write the run as OpenMetrics samples under the engine's own metric names (vllm: or sglang:) to this `FILE`, for promtool tsdb create-blocks-from openmetrics"},
			&cli.DurationFlag{Name: "metrics-interval", Value: 15 * time.Second, Usage: "simulated time between two --metrics-out samples"},
			&cli.StringFlag{Name: "metrics-start", Usage: "wall time of the run's start for --metrics-out, RFC 3339 (default: the time the input run recorded)"},
			&cli.FloatFlag{Name: "client-timeout", Usage: "override: seconds a client waits for the last chunk before it gives up (0: forever)"},
			opalWorkloadFlag(),
			&cli.BoolFlag{Name: "low-memory", Usage: fmt.Sprintf("summarise every run by exact passes over the written file instead of keeping its records (automatic above %d requests)", lowMemoryRequests)},
		), sampleFlags()...), opalConfigFlags()...),
		Before: printConfigBefore,
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.String("opal-config") != "" && c.Bool("print-config") {
				return opalConfigReplay(ctx, c)
			}
			outs := []outputFile{{"output", c.String("output")}, {"per-second", c.String("per-second")}, {"metrics-out", c.String("metrics-out")}}
			ins := append(c.Args().Slice(), c.String("config"), c.String("opal-workload"), c.String("opal-config"), c.String("model"))
			if err := checkOutputs(outs, ins); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			if c.String("opal-config") != "" {
				return opalConfigReplay(ctx, c)
			}
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
			cl, err := clusterFor(c)
			if err != nil {
				return err
			}
			over, err := overridesFor(cl)
			if err != nil {
				return err
			}
			over.AssumeDeployment = c.Bool("assume-deployment")
			sels, err := trace.ParseRunSelectors(c.StringSlice("run"))
			if err != nil {
				return err
			}
			prefault.HugeHeap(replayHugeHeap)
			trace.Prewarm() // the writer's compressor, while the input is read on this core
			in, err := loadReplayInputs(c.Args().First(), ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
			if err != nil {
				return err
			}
			if err := in.selectRuns(sels); err != nil {
				return err
			}
			jobs, err := replayJobs(cl, over, in, c.String("run-name"), c.String("carry-cache"), c.ErrWriter)
			if err != nil {
				return err
			}
			done, err := replayRuns(jobs, c.String("output"), sideOutputsOf(c), c.ErrWriter, summaryPlan{streamAbove: streamAbove(c), printed: true})
			if err != nil {
				return err
			}
			return writeReplayed(c.Writer, done)
		},
	}
}

// replayHugeHeap is how much of its heap a replay of a trace has mapped
// in huge pages before it reads the input (prefault.HugeHeap): the
// Mooncake trace's replay on 4 or 16 workers peaks at 175–225 MiB with it
// (145–180 MiB without).
//
// Note: it is done before the input is read, not on a goroutine while it
// is: the reader's allocations then faulted in page by page (on the
// 4-worker command, 3,900 faults against 2,700, under load).
const replayHugeHeap = 256 << 20

// streamAbove is the run size above which replay summarises from the
// written file: lowMemoryRequests, or every run with --low-memory.
func streamAbove(c *cli.Command) int {
	if c.Bool("low-memory") {
		return 0
	}
	return lowMemoryRequests
}

// writeSeconds writes the per-second statistics of a replayed run to
// path, with the run's KV capacity (all workers; its tiers', the workers
// that have them) and the setup's cluster and cost model in the file's
// metadata.
func writeSeconds(path string, s *deploy.Setup, run string, rows []replay.Second) error {
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	sec := []trace.SecondsRun{{Run: run, KVBlocks: s.FleetKVBlocks(), Seconds: rows}}
	sec[0].HostKVCapacity, sec[0].DiskKVCapacity, sec[0].RemoteKVCapacity = s.TierCapacityBytes()
	if err := trace.WriteSeconds(f, sec, [][2]string{{trace.MetaReplayConfig, s.Cluster.YAML()}, {trace.MetaCostModel, s.CostModelText}}); err != nil {
		return err
	}
	return f.Commit()
}

// readyWorkers sets each second's ready workers: the autoscaler's fleet
// when it ran (fleet per second, time-weighted), else the fixed number;
// with disaggregation, each pool's too.
func readyWorkers(rows []replay.Second, fleet []replay.FleetSecond, cfg replay.Config) {
	at := make(map[int64]replay.FleetSecond, len(fleet))
	for _, f := range fleet {
		at[f.Second] = f
	}
	d := cfg.Disaggregation
	for i := range rows {
		r := &rows[i]
		switch f, ok := at[r.Second]; {
		case fleet == nil:
			r.ReadyWorkers = float64(max(cfg.Workers, 1))
			if d.PrefillWorkers > 0 {
				r.PrefillReadyWorkers = float64(d.PrefillWorkers)
				r.DecodeReadyWorkers = r.ReadyWorkers - r.PrefillReadyWorkers
			}
		case ok:
			r.ReadyWorkers, r.PrefillReadyWorkers, r.DecodeReadyWorkers = f.Ready, f.PrefillReady, f.DecodeReady
		}
	}
}

// sideOutputs are the files a replay writes besides its records.
type sideOutputs struct {
	perSecond string
	// metrics is --metrics-out's file ("": none), sampled every
	// metricsInterval from metricsStart (RFC 3339; "": the run's start).
	metrics         string
	metricsInterval time.Duration
	metricsStart    string
	// plannerLog is --planner-log's CSV file ("": none).
	plannerLog string
}

func sideOutputsOf(c *cli.Command) sideOutputs {
	return sideOutputs{perSecond: c.String("per-second"), metrics: c.String("metrics-out"),
		metricsInterval: c.Duration("metrics-interval"), metricsStart: c.String("metrics-start"), plannerLog: c.String("planner-log")}
}

func (s sideOutputs) interval() time.Duration {
	if s.metricsInterval == 0 {
		return 15 * time.Second
	}
	return s.metricsInterval
}

// recorder returns the metrics recorder of a run: its engine's names, its
// model, and its start as given or as the run recorded it. A run that
// recorded none needs --metrics-start: samples dated 1970 would fall out
// of any Prometheus retention at once.
func (s sideOutputs) recorder(run trace.Run, startUnixN int64) (*metricsout.Recorder, error) {
	var start time.Time
	switch {
	case s.metricsStart != "":
		t, err := time.Parse(time.RFC3339, s.metricsStart)
		if err != nil {
			return nil, fmt.Errorf("--metrics-start %q: not an RFC 3339 time (2025-06-01T12:00:00Z)", s.metricsStart)
		}
		start = t
	case startUnixN > 0:
		start = time.Unix(0, startUnixN)
	default:
		return nil, fmt.Errorf("--metrics-out: run %s records no start time: give --metrics-start (RFC 3339)", run.Name)
	}
	if s.interval() < time.Millisecond {
		return nil, fmt.Errorf("--metrics-interval %v: under 1ms", s.metricsInterval)
	}
	engine := run.Engine
	if engine != "sglang" {
		engine = "vllm"
	}
	return metricsout.New(metricsout.Options{Engine: engine, Model: run.Model, Interval: s.interval(), Start: start})
}

// writeMetrics writes the recorder's OpenMetrics file atomically.
func writeMetrics(path string, r *metricsout.Recorder) error {
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := r.WriteOpenMetrics(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}
