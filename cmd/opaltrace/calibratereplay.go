package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/internal/progress"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// replayFitFlags are calibrate's flags for the fit by replay in the loop.
func replayFitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "train", Usage: "replay fit: the runs to fit (run selectors as --run; default: every run)"},
		&cli.StringSliceFlag{Name: "holdout", Usage: "replay fit: runs only predicted, to measure the error out of sample (run selectors)"},
		&cli.StringSliceFlag{Name: "fit", Usage: "replay fit: coefficients to fit (default: what the training runs determine; +NAME: that and NAME): " + strings.Join(calibrate.ReplayCoefficients, ", ")},
		&cli.StringSliceFlag{Name: "fix", Usage: "replay fit and --table: coefficient held at a value, `NAME=VALUE` (repeatable)"},
		&cli.StringSliceFlag{Name: "assume", Usage: "--table: a prior on a coefficient, `NAME=VALUE±REL` (REL a relative standard deviation such as 20%; repeatable)"},
		&cli.IntFlag{Name: "max-evals", Value: 300, Usage: "replay fit: at most this many replays of the training runs per descent; a first descent that needs more has not converged and writes nothing"},
		&cli.IntFlag{Name: "restarts", Value: calibrate.DefaultRestarts, Usage: "replay fit: restart the descent this many times from the best minimum so far, each coefficient moved, and keep the lowest (0: one descent only)"},
		&cli.FloatFlag{Name: "prior", Value: 0.01, Usage: "replay fit: weight of the coefficients' log distance from their defaults (or --start-from's)"},
		&cli.StringFlag{Name: "start-from", Usage: "replay fit: start from the coefficients of `COSTMODEL.yaml`, another fit of the GPU and engine (e.g. on another model), keep near them by --prior and hold those not fitted at them, so that what these runs cannot determine stays where that fit put it"},
		&cli.BoolFlag{Name: "json", Usage: "replay fit: print the error table as JSON"},
		&cli.FloatFlag{Name: "saturation-ttft", Value: calibrate.DefaultSaturationTTFT, Usage: "replay fit: a run is saturated when its p99 TTFT exceeds this many `SECONDS`; the outputs print the first such rate of the sweep, observed and replayed"},
		&cli.BoolFlag{Name: "markdown", Usage: "replay fit: print the error table as Markdown (scripts/fidelity builds the README's table from it)"},
		&cli.StringFlag{Name: "carry-cache", Value: "auto", Usage: "replay fit: replay each run after the run before it with the prefix cache it left: auto (when their metadata say one server ran them one after the other with the same prompts, and prefix caching is on), on (every run after the first) or off"},
		&cli.BoolFlag{Name: "assume-deployment", Usage: "replay runs that record no model or hardware on the cluster's deployment anyway"},
		&cli.StringFlag{Name: "scheduler", Usage: "override: the workers' scheduler, vllm or sglang (default: the run's engine, else vllm)"},
		&cli.Int64Flag{Name: "max-num-batched-tokens", Usage: "override: token budget per step"},
		&cli.IntFlag{Name: "max-num-seqs", Usage: "override: running requests at most"},
		&cli.Int64Flag{Name: "num-gpu-blocks-override", Usage: "override: each worker's KV capacity in blocks (vLLM's --num-gpu-blocks-override)"},
		&cli.Int64Flag{Name: "stream-interval", Usage: "override: tokens per streamed chunk after the first"},
	}
}

// calibrateByReplay fits the coefficients by replaying the --train runs
// of the inputs, predicts the --holdout runs, and returns the cost model
// with the error table.
func calibrateByReplay(c *cli.Command) (*calibrate.CostModel, error) {
	satTTFT := c.Float("saturation-ttft")
	if !(satTTFT > 0) || math.IsInf(satTTFT, 0) {
		return nil, fmt.Errorf("--saturation-ttft %g: want a positive number of seconds", satTTFT)
	}
	cl, err := clusterFor(c)
	if err != nil {
		return nil, err
	}
	over, err := overridesFor(cl)
	if err != nil {
		return nil, err
	}
	over.AssumeDeployment = c.Bool("assume-deployment")
	over.Measured = true
	var runs []trace.Run
	byRun := map[string][]*trace.Request{}
	for _, arg := range c.Args().Slice() {
		ds, err := loadDataset(arg, ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
		if err != nil {
			return nil, err
		}
		runs = append(runs, ds.Runs...)
		for _, r := range ds.Requests {
			byRun[r.Run] = append(byRun[r.Run], r)
		}
	}
	labels := trace.RunLabels(runs)
	pick := func(flag string, all bool) (map[int]bool, error) {
		texts := c.StringSlice(flag)
		if len(texts) == 0 && !all {
			return nil, nil
		}
		sels, err := trace.ParseRunSelectors(texts)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		idx, err := trace.SelectRuns(runs, sels)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		m := map[int]bool{}
		for _, i := range idx {
			m[i] = true
		}
		return m, nil
	}
	train, err := pick("train", true)
	if err != nil {
		return nil, err
	}
	hold, err := pick("holdout", false)
	if err != nil {
		return nil, err
	}
	carry := c.String("carry-cache")
	if carry != "auto" && carry != "on" && carry != "off" {
		return nil, fmt.Errorf("--carry-cache %q: want auto, on or off", carry)
	}
	// prepare resolves run i's deployment and what to send; its notes
	// are printed once, and a note an earlier run said is not said
	// again.
	prepared := map[int]*calibrate.ReplayRun{}
	var said runNotes
	headers := map[int]string{}
	prepare := func(i int, set string) (*calibrate.ReplayRun, error) {
		if r, ok := prepared[i]; ok {
			return r, nil
		}
		run, reqs := runs[i], byRun[runs[i].Name]
		setup, err := deploy.Resolve(cl, run, over)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", runRef(set, run.Name, labels[i]), err)
		}
		if p := setup.Prefill; p != nil && !strings.EqualFold(p.Deployment.Hardware.Name, setup.Deployment.Hardware.Name) {
			return nil, fmt.Errorf("%s: a prefill pool on another GPU (disaggregation.prefill_hardware %s, the cluster's %s): calibrate fits one GPU's coefficients: not modelled yet (a prefill pool of its own TP or batch limits on the cluster's GPU is)", runRef(set, run.Name, labels[i]), p.Deployment.Hardware.Name, setup.Deployment.Hardware.Name)
		}
		said.sayOnce(c.ErrWriter, run.Name, runRef(set, run.Name, labels[i]), setup.Notes)
		var in replay.Inputs
		if len(reqs) > 0 {
			arrivals := true
			for _, r := range reqs {
				arrivals = arrivals && r.Arrival.OK
			}
			setup.Config, in, _ = sendLikeTheBenchmark(setup.Config, run, replay.Requests(reqs), arrivals)
		} else {
			gen, mode, err := replay.Regenerate(run, setup.Cluster.Seed)
			if err != nil {
				return nil, fmt.Errorf("%s: cannot be replayed: %w", runRef(set, run.Name, labels[i]), err)
			}
			in = gen
			w := &setup.Config.Workload
			w.Mode, w.Clients, w.TimeScale = mode.Mode, mode.Clients, mode.TimeScale
		}
		r := &calibrate.ReplayRun{
			Label: labels[i], Run: run, Deployment: setup.Deployment, Config: setup.Config,
			KVBlocks: setup.KVBlocks, Inputs: in, Offload: setup.Offload, DecodeOffload: setup.DecodeOffload,
		}
		if p := setup.Prefill; p != nil {
			r.Prefill, r.PrefillKVBlocks = p.Deployment, p.KVBlocks
		}
		prepared[i] = r
		headers[i] = setup.Header()
		return r, nil
	}
	var rr []*calibrate.ReplayRun
	for i, run := range runs {
		if !train[i] && !hold[i] {
			continue
		}
		if train[i] && hold[i] {
			return nil, fmt.Errorf("%s is selected by both --train and --holdout", runRef("", run.Name, labels[i]))
		}
		set := "--train"
		if hold[i] {
			set = "--holdout"
		}
		targets, err := calibrate.ObservedTargets(run, byRun[run.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", runRef(set, run.Name, labels[i]), err)
		}
		r, err := prepare(i, set)
		if err != nil {
			return nil, err
		}
		r.Targets, r.Train = targets, train[i]
		fmt.Fprintf(c.ErrWriter, "%s %s: %s, %d requests, targets %s\n", strings.TrimPrefix(set, "--"), labels[i], headers[i], r.Inputs.Len(), targetNames(targets))
		if i > 0 && carry != "off" {
			same, why := calibrate.SameSession(runs[i-1], run, replay.Requests(byRun[runs[i-1].Name]), replay.Requests(byRun[run.Name]))
			switch {
			case carry == "on" || same && prefixCaching(r.Config):
				if r.After, err = prepare(i-1, "the run before"); err != nil {
					return nil, err
				}
				fmt.Fprintf(c.ErrWriter, "  replayed after %s with the prefix cache it left (--carry-cache %s)\n", labels[i-1], carry)
			case !same && prefixCaching(r.Config):
				fmt.Fprintf(c.ErrWriter, "  replayed with a cold cache: not one server session with %s: %s\n", labels[i-1], why)
			}
		}
		rr = append(rr, r)
	}
	fixed, err := fixedFlags(c)
	if err != nil {
		return nil, err
	}
	var free, also []string
	for _, f := range c.StringSlice("fit") {
		for _, name := range strings.Split(f, ",") {
			if a, ok := strings.CutPrefix(name, "+"); ok {
				also = append(also, a)
			} else {
				free = append(free, name)
			}
		}
	}
	if free != nil && also != nil {
		return nil, fmt.Errorf("--fit %s: either the coefficients to fit or additions to the default choice (+NAME), not both", strings.Join(c.StringSlice("fit"), ","))
	}
	opts := calibrate.ReplayOptions{
		Free: free, Also: also, Fixed: fixed, PriorWeight: c.Float("prior"), MaxEvals: c.Int("max-evals"), Restarts: c.Int("restarts"),
		Parallel: 2, Source: strings.Join(c.Args().Slice(), ", "), SaturationTTFT: satTTFT,
	}
	if opts.PriorWeight == 0 {
		opts.PriorWeight = -1 // no prior at all
	}
	if path := c.String("start-from"); path != "" {
		if opts.Start, err = startValues(path, rr, c.ErrWriter); err != nil {
			return nil, err
		}
		opts.StartFrom = filepath.Base(path)
	}
	if opts.Restarts < 0 {
		return nil, fmt.Errorf("--restarts %d: not a number of restarts", opts.Restarts)
	}
	if opts.Restarts == 0 {
		opts.Restarts = -1 // FitReplay's none; its 0 is the default
	}
	maxEvals := opts.MaxEvals
	if maxEvals <= 0 {
		maxEvals = 300 // FitReplay's default
	}
	maxEvals *= 1 + max(c.Int("restarts"), 0)
	task := progress.New(c.ErrWriter).Start("calibrate", "evaluations", int64(maxEvals))
	opts.Progress = func(n int) { task.Set(int64(n)) }
	cm, err := calibrate.FitReplay(rr, opts)
	if err != nil {
		task.Abort()
		return nil, err
	}
	task.Finish()
	return cm, nil
}

// fixedFlags reads the --fix flags.
func fixedFlags(c *cli.Command) (map[string]float64, error) {
	fixed := map[string]float64{}
	for _, kv := range c.StringSlice("fix") {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || !(f >= 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("--fix %q: want NAME=VALUE with a non-negative number", kv)
		}
		fixed[k] = f
	}
	return fixed, nil
}

// tableConstraints turns --fix and --assume into the prefill table
// fit's fixed terms and priors.
func tableConstraints(c *cli.Command) (map[string]float64, map[string]calibrate.Prior, error) {
	fixedCoefs, err := fixedFlags(c)
	if err != nil {
		return nil, nil, err
	}
	fixed := map[string]float64{}
	for name, v := range fixedCoefs {
		term, tv, err := calibrate.TableTerm(name, v)
		if err != nil {
			return nil, nil, fmt.Errorf("--fix: %w", err)
		}
		fixed[term] = tv
	}
	priors := map[string]calibrate.Prior{}
	for _, kv := range c.StringSlice("assume") {
		k, rest, ok := strings.Cut(kv, "=")
		v, rel, ok2 := strings.Cut(strings.ReplaceAll(rest, "+-", "±"), "±")
		pct := strings.HasSuffix(rel, "%")
		val, err1 := strconv.ParseFloat(v, 64)
		sd, err2 := strconv.ParseFloat(strings.TrimSuffix(rel, "%"), 64)
		if pct {
			sd /= 100
		}
		if !ok || !ok2 || err1 != nil || err2 != nil || !(sd > 0) || math.IsInf(sd, 0) {
			return nil, nil, fmt.Errorf("--assume %q: want NAME=VALUE±REL, e.g. mfu=0.5±20%%", kv)
		}
		term, tv, err := calibrate.TableTerm(k, val)
		if err != nil {
			return nil, nil, fmt.Errorf("--assume: %w", err)
		}
		if _, ok := fixed[term]; ok {
			return nil, nil, fmt.Errorf("--assume %s: the coefficient is also fixed", k)
		}
		priors[term] = calibrate.Prior{Value: tv, RelSD: sd}
	}
	return fixed, priors, nil
}

func targetNames(ts []calibrate.Target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Name())
	}
	return strings.Join(s, ", ")
}

// writeErrorTable prints the replay fit's error table, as text or JSON.
func writeErrorTable(w io.Writer, cm *calibrate.CostModel, asJSON, asMarkdown bool) error {
	if cm.Replay == nil {
		return errors.New("no replay fit")
	}
	if asMarkdown {
		return calibrate.WriteErrorMarkdown(w, cm)
	}
	if asJSON {
		b, err := json.MarshalIndent(struct {
			Coefficients map[string]calibrate.Coefficient `json:"coefficients"`
			Rows         []calibrate.ErrorRow             `json:"rows"`
			Saturation   *calibrate.Saturation            `json:"saturation"`
			Warnings     []string                         `json:"warnings"`
		}{cm.Coefficients, cm.Replay.Rows, cm.Replay.Saturation, cm.Warnings}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return calibrate.WriteErrorTable(w, cm)
}

// prefixCaching says whether the workers of cfg keep a prefix cache:
// vLLM's enable_prefix_caching (on by default), SGLang's radix cache
// unless disabled.
func prefixCaching(cfg replay.Config) bool {
	if cfg.Scheduler.Engine == replay.EngineSGLang {
		return !cfg.Scheduler.DisableRadixCache
	}
	on := cfg.Scheduler.EnablePrefixCaching
	return on == nil || *on
}

// startValues reads the coefficients a replay fit starts from (--start-from)
// from the cost model at path, and says on stderr where they came from,
// and when that fit's GPU is not the training runs'.
func startValues(path string, rr []*calibrate.ReplayRun, stderr io.Writer) (map[string]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--start-from: %w", err)
	}
	cm, err := calibrate.ParseCostModel(path, data)
	if err != nil {
		return nil, fmt.Errorf("--start-from: %w", err)
	}
	start := cm.StartValues()
	if len(start) == 0 {
		return nil, fmt.Errorf("--start-from %s: no coefficient a replay fit takes", path)
	}
	names := slices.Sorted(maps.Keys(start))
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.4g", n, start[n]))
	}
	fmt.Fprintf(stderr, "calibrate: starting from %s (%s, %s, TP%d): %s\n", path, cm.Hardware, cm.Model, cm.TP, strings.Join(parts, ", "))
	for _, r := range rr {
		if r.Train && r.Deployment != nil && !strings.EqualFold(r.Deployment.Hardware.Name, cm.Hardware) {
			fmt.Fprintf(stderr, "calibrate: --start-from %s was fitted on %s; run %s is on %s: a fraction of one GPU's peak need not carry to another\n", path, cm.Hardware, r.Run.Name, r.Deployment.Hardware.Name)
			break
		}
	}
	return start, nil
}

// runRef names a run of the fit in an error: "--train run NAME (#3
// rate=4)", the label left out where it is only the name again (one run).
func runRef(set, name, label string) string {
	ref := "run " + name
	if set != "" {
		ref = set + " " + ref
	}
	if label != "" && label != name {
		ref += " (" + label + ")"
	}
	return ref
}
