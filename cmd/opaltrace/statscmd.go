package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print a vLLM-style summary per run, recomputed from the per-request data",
		ArgsUsage: "FILE...",
		Flags: append(ingestFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON in vLLM's result vocabulary"},
			&cli.StringFlag{Name: "percentiles", Value: "99", Usage: "comma-separated percentiles (numpy linear)"},
			&cli.StringSliceFlag{Name: "goodput", Usage: "SLOs for request goodput, vLLM's KEY:MS pairs (ttft, tpot, e2el), e.g. --goodput ttft:200 --goodput tpot:50"},
			&cli.Float64Flag{Name: "trim-warmup", Validator: secondsIn(), Usage: "drop requests that arrive in the first `S` seconds"},
			&cli.Float64Flag{Name: "trim-cooldown", Validator: secondsIn(), Usage: "drop requests that end in the last `S` seconds"},
			&cli.StringFlag{Name: "by", Value: "run", Usage: "group by run, stage, worker, prefill_worker (a disaggregated replay's prefill worker, which the router chose) or model"},
			&cli.BoolFlag{Name: "series", Usage: "print per-second arrivals, completions, running requests and output tokens"},
			&cli.BoolFlag{Name: "cache-curve", Usage: "print the hit rate of an ideal LRU prefix cache by capacity (from hash_ids)"},
			&cli.StringFlag{Name: "compare", Usage: "compare FILE with `OTHER` (e.g. observed vs simulated): differences, bootstrap intervals, KS, W1, verdicts"},
			&cli.BoolFlag{Name: "check", Usage: "with --compare: exit with status 1 when a statistic's verdict is outside the margin (for CI)"},
			&cli.StringFlag{Name: "margin", Value: "5%", Usage: "relative margin of the comparison verdicts (5% or 0.05)"},
			&cli.IntFlag{Name: "resamples", Value: 1000, Validator: intIn(minResamples, maxResamples), Usage: fmt.Sprintf("bootstrap resamples of the comparison (%d to %d)", minResamples, maxResamples)},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the comparison bootstrap"},
			&cli.BoolFlag{Name: "as-source", Usage: "reproduce the summary the source tool printed, with its names and rules (aiperf, guidellm)"},
			&cli.BoolFlag{Name: "low-memory", Usage: fmt.Sprintf("for Parquet inputs: the exact summary in passes over the file, without loading it (automatic above %d requests)", lowMemoryRequests)},
			runFlag(),
			&cli.StringFlag{Name: "per-second", Usage: "with each run, what the replay's per-second `FILE` (replay --per-second) says of it: running, waiting, busy workers, KV cache usage of its capacity"},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("stats: no input files")
			}
			// The two list-valued flags are parsed first, before any
			// input is read (a Validator would print the whole usage).
			pcts, err := parsePercentiles(c.String("percentiles"))
			if err != nil {
				return fmt.Errorf("--percentiles: %w", err)
			}
			if _, err := parseMargin(c.String("margin")); err != nil {
				return fmt.Errorf("--margin: %w", err)
			}
			opts := report.StatsOptions{Percentiles: pcts}
			slo, err := analyze.ParseSLO(c.StringSlice("goodput"))
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			aopts := analyze.AnalysisOptions{
				Summary: analyze.Options{
					Goodput:         slo,
					TrimWarmupSec:   c.Float64("trim-warmup"),
					TrimCooldownSec: c.Float64("trim-cooldown"),
				},
				Series:     c.Bool("series"),
				CacheCurve: c.Bool("cache-curve"),
			}
			if c.Bool("low-memory") && (c.String("compare") != "" || c.Bool("as-source")) {
				return errors.New("--low-memory: --compare and --as-source need the requests in memory")
			}
			if c.Bool("check") && c.String("compare") == "" {
				return errors.New("--check: only with --compare")
			}
			if other := c.String("compare"); other != "" {
				return statsCompare(c, other, aopts.Summary)
			}
			if c.Bool("as-source") {
				return statsAsSource(c)
			}
			needsMemory := aopts.Series || aopts.CacheCurve || aopts.Summary.TrimWarmupSec != 0 || aopts.Summary.TrimCooldownSec != 0
			var as []*analyze.Analysis
			for _, arg := range c.Args().Slice() {
				_, path := splitLabel(arg)
				passes, err := byPasses(path, c.Bool("low-memory"), needsMemory)
				if err != nil {
					return err
				}
				if passes {
					sums, err := statsByPasses(c, path, pcts, slo)
					if err != nil {
						return err
					}
					as = append(as, sums...)
					continue
				}
				ds, err := loadSelected(c, arg)
				if err != nil {
					return err
				}
				groups, err := analyze.GroupBy(c.String("by"), ds.Runs, ds.Requests)
				if err != nil {
					return fmt.Errorf("--by: %w", err)
				}
				ga := analyze.AnalyzeGroups(groups, aopts)
				labelRuns(ga, ds.Loaded)
				as = append(as, ga...)
			}
			if err := attachSeconds(as, c.String("per-second")); err != nil {
				return err
			}
			if c.Bool("json") {
				b, err := report.AnalysesJSON(as, opts)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.Writer, "%s\n", b)
				return err
			}
			if err := report.WriteAnalyses(c.Writer, as, opts); err != nil {
				return err
			}
			if by := c.String("by"); by == "worker" || by == "prefill_worker" {
				return report.WriteWorkerLoad(c.Writer, as, by)
			}
			return nil
		},
	}
}

// attachSeconds gives each analysis of a run its part of the per-second
// file at path (none when path is empty).
func attachSeconds(as []*analyze.Analysis, path string) error {
	if path == "" {
		return nil
	}
	runs, _, err := trace.ReadSeconds(path)
	if err != nil {
		return fmt.Errorf("--per-second: %w", err)
	}
	for _, r := range runs {
		found := false
		for _, a := range as {
			if a.Summary.Run.Name == r.Run && a.Summary.Run.Stage == "" {
				s := analyze.SummarizeSeconds(r)
				a.Seconds, found = &s, true
			}
		}
		if !found {
			return fmt.Errorf("--per-second: %s: run %q is not among the inputs' runs", path, r.Run)
		}
	}
	return nil
}

// statsCompare compares the runs of the first input with those of other,
// run by run as analyze.PairRuns pairs them (a replay with the run it
// replays, else in order; --run picks), each trimmed alike when asked.
// With --check, a verdict outside the margin is an error after the
// comparison is printed, so the exit status says it.
func statsCompare(c *cli.Command, other string, sopts analyze.Options) error {
	if c.NArg() != 1 {
		return errors.New("stats --compare: give exactly one FILE to compare with OTHER")
	}
	margin, err := parseMargin(c.String("margin"))
	if err != nil {
		return fmt.Errorf("--margin: %w", err)
	}
	sels, err := trace.ParseRunSelectors(c.StringSlice("run"))
	if err != nil {
		return err
	}
	var groups [2][]analyze.Group
	var runs [2][]trace.Run
	var names [2]string
	for i, arg := range []string{c.Args().First(), other} {
		ds, err := loadDataset(arg, ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
		if err != nil {
			return err
		}
		names[i], groups[i] = ds.Name, analyze.GroupByRun(ds.Runs, ds.Requests)
		for _, g := range groups[i] {
			runs[i] = append(runs[i], g.Run)
		}
	}
	pairing, err := analyze.PairRuns(runs[0], runs[1], sels)
	if err != nil {
		return fmt.Errorf("stats --compare %s with %s: %w", names[0], names[1], err)
	}
	if len(pairing.Unpaired) > 0 {
		fmt.Fprintf(c.ErrWriter, "not compared (%d runs without a replay on the other side): %s\n", len(pairing.Unpaired), strings.Join(pairing.Unpaired, "; "))
	}
	labels := [2][]string{trace.RunLabels(runs[0]), trace.RunLabels(runs[1])}
	var cmps []*analyze.Comparison
	for _, p := range pairing.Pairs {
		var sums [2]*analyze.Summary
		var ns [2]string
		for side, k := range [2]int{p.A, p.B} {
			g := groups[side][k]
			opts := sopts
			opts.ITLByRequest = true // the bootstrap resamples ITL by request
			sums[side] = analyze.SummarizeWith(g.Run, g.Requests, opts)
			ns[side] = names[side] + " " + labels[side][k]
		}
		cmps = append(cmps, analyze.Compare(ns[0], sums[0], ns[1], sums[1], analyze.CompareOptions{
			Margin: margin, Resamples: c.Int("resamples"), Seed: c.Uint64("seed"),
		}))
	}
	if c.Bool("json") {
		b, err := report.ComparisonsJSON(cmps)
		if err != nil {
			return err
		}
		if _, err = fmt.Fprintf(c.Writer, "%s\n", b); err != nil {
			return err
		}
	} else if err := report.WriteComparisons(c.Writer, cmps); err != nil {
		return err
	}
	if c.Bool("check") {
		return checkVerdicts(cmps, margin)
	}
	return nil
}

// checkVerdicts is --check's error: every statistic whose verdict is
// outside the margin, by pair and metric; nil when there is none.
func checkVerdicts(cmps []*analyze.Comparison, margin float64) error {
	var out []string
	for _, cmp := range cmps {
		for _, m := range cmp.Metrics {
			for _, s := range m.Stats {
				if s.Verdict == analyze.VerdictOutside {
					out = append(out, fmt.Sprintf("%s: %s %s %+.1f%%", cmp.A, m.Metric, s.Stat, s.RelDiff*100))
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return fmt.Errorf("--check: %d statistics outside ±%g%%: %s", len(out), margin*100, strings.Join(out, "; "))
}

// statsAsSource prints each run as its source tool computed it.
func statsAsSource(c *cli.Command) error {
	var names []string
	var views []*analyze.SourceView
	for _, arg := range c.Args().Slice() {
		ds, err := loadSelected(c, arg)
		if err != nil {
			return err
		}
		for _, g := range analyze.GroupByRun(ds.Runs, ds.Requests) {
			v, err := analyze.AsSource(g.Run, g.Requests)
			if err != nil {
				return err
			}
			names, views = append(names, g.Run.Name), append(views, v)
		}
	}
	if c.Bool("json") {
		b, err := report.SourceViewsJSON(names, views)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.Writer, "%s\n", b)
		return err
	}
	return report.WriteSourceViews(c.Writer, names, views)
}

// parseMargin reads "5%" or "0.05".
func parseMargin(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if pct {
		v /= 100
	}
	if err != nil || !finiteIn(v, 0, 1) || v == 0 || v == 1 {
		return 0, fmt.Errorf("%q is not a relative margin in (0, 1) like 5%% or 0.05", s)
	}
	return v, nil
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || !finiteIn(p, 0, 100) {
			return nil, fmt.Errorf("%q is not a percentile in [0, 100]", f)
		}
		if len(out) == maxPercents {
			return nil, fmt.Errorf("more than %d percentiles", maxPercents)
		}
		out = append(out, p)
	}
	return out, nil
}
