package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// sampleFlags make replay send a sampled workload: N requests with
// Poisson arrivals whose lengths are drawn from the inputs. (New flags per
// command: a cli flag keeps the value it was last set to.)
func sampleFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "sample", Usage: "replay `N` requests whose (prompt, output) lengths are drawn with replacement from the inputs' successful requests (needs --sample-rate)"},
		&cli.FloatFlag{Name: "sample-rate", Usage: "with --sample: Poisson arrivals at `R` requests per second (open loop; the seed is the cluster's)"},
	}
}

// sampledReplay is replay --sample N --sample-rate R INPUT...: the
// (input_tokens, output_tokens) pairs of the inputs' successful requests,
// in input order (of the runs --run picks in each input), are the length
// table of one sampled open-loop run named --run-name. Nothing is written when an argument or the inputs are unusable.
func sampledReplay(_ context.Context, c *cli.Command) error {
	n, rate, err := sampleArgs(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		return errors.New("replay: --sample draws lengths from INPUT files: give at least one")
	}
	cl, err := clusterFor(c)
	if err != nil {
		return err
	}
	if err := sampledWorkloadFits(cl.Config); err != nil {
		return err
	}
	sels, err := trace.ParseRunSelectors(c.StringSlice("run"))
	if err != nil {
		return err
	}
	trace.Prewarm() // the writer's compressor, while the inputs are read on this core
	pairs, from, err := samplePairs(c.Args().Slice(), sels, ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
	if err != nil {
		return err
	}
	over, err := overridesFor(cl)
	if err != nil {
		return err
	}
	job, err := sampledJob(cl, over, pairs, from, n, rate, c.Args().Slice(), c.String("run-name"), c.ErrWriter)
	if err != nil {
		return err
	}
	done, err := replayRuns([]replayJob{job}, c.String("output"), sideOutputsOf(c), c.ErrWriter, summaryPlan{streamAbove: streamAbove(c), printed: true})
	if err != nil {
		return err
	}
	return writeReplayed(c.Writer, done)
}

// sampleArgs checks --sample and --sample-rate: both or neither, a
// positive count and a positive finite rate.
func sampleArgs(c *cli.Command) (n int, rate float64, err error) {
	switch {
	case !c.IsSet("sample"):
		return 0, 0, errors.New("replay: --sample-rate needs --sample N (the number of requests to send)")
	case !c.IsSet("sample-rate"):
		return 0, 0, errors.New("replay: --sample needs --sample-rate R (requests per second)")
	}
	n, rate = c.Int("sample"), c.Float("sample-rate")
	switch {
	case n <= 0 || n > math.MaxInt32:
		return 0, 0, fmt.Errorf("replay: --sample %d: want a number of requests from 1 to %d", n, math.MaxInt32)
	case !(rate >= minSampleRate && rate <= maxSampleRate):
		return 0, 0, fmt.Errorf("replay: --sample-rate %v: want a number of requests per second from %g to %g", rate, minSampleRate, maxSampleRate)
	case float64(n)/rate > maxSampleSpan:
		return 0, 0, fmt.Errorf("replay: --sample %d at --sample-rate %v: arrivals would span %.3g s; want at most %g s (lower --sample or raise the rate)", n, rate, float64(n)/rate, maxSampleSpan)
	}
	return n, rate, nil
}

// Bounds of a sampled workload: its mean arrival span (requests / rate)
// stays within 10⁹ s, 32 years, far inside the int64 nanoseconds of the
// engine's clock (292 years) whatever the exponential gaps draw.
const (
	minSampleRate = 1e-6
	maxSampleRate = 1e9
	maxSampleSpan = 1e9
)

// sampledWorkloadFits refuses a cluster whose workload settings would
// change the sampled arrivals behind the user's back: the run is open
// loop at --sample-rate, unscaled.
func sampledWorkloadFits(cfg replay.Config) error {
	w := cfg.Workload
	if w.Mode != "" && w.Mode != replay.ModeOpen {
		return fmt.Errorf("replay: --sample sends an open loop at --sample-rate; workload mode %q does not apply", w.Mode)
	}
	if w.TimeScale != 0 && w.TimeScale != 1 {
		return fmt.Errorf("replay: --sample sends at --sample-rate; time scale %v does not apply (change the rate instead)", w.TimeScale)
	}
	return nil
}

// samplePairs reads the inputs in order (opaltrace Parquet files, or any
// ingestible file or directory) and returns the (input_tokens,
// output_tokens) pair of every successful request that has both, of the
// runs sels pick in each input (all without selectors), and those runs.
// Only the pairs are kept, not the requests. Bad records of an ingestible input are printed
// and fail the read unless allowErrors, as loadDataset does.
func samplePairs(args []string, sels []trace.RunSelector, opts ingest.Options, allowErrors bool, stderr io.Writer) ([][2]int64, []trace.Run, error) {
	var pairs [][2]int64
	var from []trace.Run
	for _, arg := range args {
		_, path := splitLabel(arg)
		var filePairs [][2]int64
		var runOf []string // each pair's run, when runs are selected
		add := func(r *trace.Request) error {
			if r.OK() && r.InputTokens.OK && r.OutputTokens.OK {
				filePairs = append(filePairs, [2]int64{r.InputTokens.V, r.OutputTokens.V})
				if len(sels) > 0 {
					runOf = append(runOf, r.Run)
				}
			}
			return nil
		}
		// Of a Parquet file, only the columns the length table needs.
		cols := []string{"status", "input_tokens", "output_tokens"}
		if len(sels) > 0 {
			cols = append(cols, "run")
		}
		runs, err := eachRequest(path, cols, opts, allowErrors, stderr, add)
		if err != nil {
			return nil, nil, err
		}
		if len(sels) == 0 {
			pairs = append(pairs, filePairs...)
			from = append(from, runs...)
			continue
		}
		idx, err := trace.SelectRuns(runs, sels)
		if err != nil {
			return nil, nil, fmt.Errorf("replay: %s: %w", path, err)
		}
		keep := map[string]bool{}
		for _, i := range idx {
			keep[runs[i].Name] = true
			from = append(from, runs[i])
		}
		for i, p := range filePairs {
			if keep[runOf[i]] {
				pairs = append(pairs, p)
			}
		}
	}
	if len(pairs) == 0 {
		return nil, nil, fmt.Errorf("replay: --sample: no successful request with both input and output token counts in %s", strings.Join(args, ", "))
	}
	return pairs, from, nil
}

// sampledJob is the one open-loop job of a sampled workload; its
// workload description, kept in Run.Extra["workload"], says what was
// sent and where the lengths came from. It runs on the deployment the
// runs it samples (from) record, under the cluster file's and the flags'
// keys, as replay runs a run on its own (sampledSetup).
func sampledJob(cl deploy.Cluster, over deploy.Overrides, pairs [][2]int64, from []trace.Run, n int, rate float64, files []string, runName string, stderr io.Writer) (replayJob, error) {
	in, err := replay.NewSampled(runName, n, rate, pairs, cl.Seed)
	if err != nil {
		return replayJob{}, err
	}
	setup, err := sampledSetup(cl, over, from, stderr)
	if err != nil {
		return replayJob{}, err
	}
	setup.Config.Workload.Mode, setup.Config.Workload.TimeScale = replay.ModeOpen, 1
	how := fmt.Sprintf("sampled: %d requests at %s req/s, lengths from %d requests of %s",
		n, strconv.FormatFloat(rate, 'g', -1, 64), len(pairs), strings.Join(files, ", "))
	return replayJob{name: runName, in: in, setup: setup, how: how}, nil
}

// sampledSetup resolves the deployment a sampled workload runs on: the
// one the sampled runs (from) record (oneDeployment). Its notes are said
// once.
//
// Note: it took the cluster's alone (the defaults without flags), so that
// lengths drawn from an H200 benchmark were replayed on an H100 without a
// word.
func sampledSetup(cl deploy.Cluster, over deploy.Overrides, from []trace.Run, stderr io.Writer) (*deploy.Setup, error) {
	refs := make([]string, len(from))
	for i, r := range from {
		refs[i] = "run " + r.Name
	}
	s, err := oneDeployment(cl, over, from, refs, stderr, "give the deployment to replay on (--model, --hardware, or a cluster file), or --run to sample one deployment's runs")
	if err != nil {
		return nil, fmt.Errorf("replay: --sample: %w", err)
	}
	return s, nil
}
