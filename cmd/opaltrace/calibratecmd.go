package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	"go.yaml.in/yaml/v3"

	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// calibrateCommand fits the cost model:
//
//	opaltrace calibrate -o costmodel.yaml [--train SEL]... [--holdout SEL]... RUNS...
//	opaltrace calibrate --server-side -o costmodel.yaml [--config cluster.yaml] TRACE...
//	opaltrace calibrate --table -o costmodel.yaml [--form opal] MEASUREMENTS...
//	opaltrace calibrate --links -o links.yaml [--config cluster.yaml] LINKTABLE...
//
// The deployment (hardware, model, parallelism) comes from the cluster
// file and the override flags, as for replay; the regressors are computed
// from its shapes. The fits, with R², MAPE, residual quantiles and
// identifiability warnings, go to stdout; the coefficients to the YAML.
func calibrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "calibrate",
		Usage:     "fit the cost model's coefficients: by replaying measured runs (benchmark results, engine-side timestamps), or to server-side timings, prefill tables or tier tables",
		ArgsUsage: "DATA...",
		Flags: append(append(ingestFlags(),
			&cli.BoolFlag{Name: "server-side", Usage: "DATA are traces with server-side timings (prefill_s, decode_s, storage_prefetch_io_s, kv_fetch_s)"},
			&cli.BoolFlag{Name: "links", Usage: "DATA are single-request tables of TTFT by tier (prompt_tokens, ttft_gpu_ms, ttft_cpu_ms, ttft_disk_ms, ttft_remote_ms) or of KV transfer times (kv_transfer_ms): fit each link's bandwidth and latency; -o gets the cluster file's node_override keys"},
			&cli.BoolFlag{Name: "table", Usage: "DATA are prefill measurement tables: Opal's JSON {\"<prompt_len>\": seconds} or CSV prompt_tokens,seconds[,cached_tokens]"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "costmodel.yaml to write"},
			&cli.StringFlag{Name: "form", Value: model.FormRoofline, Usage: "step-time form: roofline or opal"},
			&cli.StringFlag{Name: "config", Usage: "cluster YAML giving the deployment (hardware, model, tp, ...)"},
			&cli.StringFlag{Name: "hardware", Usage: "override: GPU preset (" + hardwarePresets() + "), or a server's GPUs as ingest records them (4xH200: TP4 unless --tp/--pp/--dp say otherwise)"},
			&cli.StringFlag{Name: "model", Usage: "override: a shipped model (" + modelPresets() + "), its Hugging Face id, or a config.json path"},
			&cli.IntFlag{Name: "tp", Usage: "override: tensor-parallel degree"},
			runFlag(),
		), replayFitFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return errors.New("calibrate: want at least one DATA file")
			}
			if n := btoi(c.Bool("server-side")) + btoi(c.Bool("table")) + btoi(c.Bool("links")); n > 1 {
				return errors.New("calibrate: give one of --server-side, --table or --links (none: fit by replaying the runs)")
			}
			if c.Bool("links") {
				return calibrateLinks(c)
			}
			if len(c.StringSlice("assume")) > 0 && !c.Bool("table") {
				return errors.New("calibrate: --assume is for --table fits (the replay fit's prior is --prior)")
			}
			if !c.Bool("server-side") && !c.Bool("table") {
				if c.Bool("json") && c.Bool("markdown") {
					return errors.New("calibrate: give one of --json or --markdown")
				}
				cm, err := calibrateByReplay(c)
				if err != nil {
					return err
				}
				if err := writeErrorTable(c.Writer, cm, c.Bool("json"), c.Bool("markdown")); err != nil {
					return err
				}
				return writeCostModel(c, cm)
			}
			cl, err := clusterFor(c)
			if err != nil {
				return err
			}
			dep, err := cl.Deployment()
			if err != nil {
				return err
			}
			opts := calibrate.Options{Deployment: dep, Form: c.String("form"), Source: strings.Join(c.Args().Slice(), ", ")}
			var res *calibrate.Result
			if c.Bool("table") {
				if opts.Fixed, opts.Priors, err = tableConstraints(c); err != nil {
					return err
				}
				var pts []calibrate.Point
				if pts, err = readTables(c.Args().Slice(), calibrate.ParseTable); err != nil {
					return err
				}
				res, err = calibrate.FitTable(pts, opts)
			} else {
				var reqs []*trace.Request
				if reqs, opts.Deployment, err = serverSideRuns(c, cl); err != nil {
					return err
				}
				dep = opts.Deployment
				res, err = calibrate.FitServerSide(reqs, opts)
			}
			if err != nil {
				return err
			}
			cm := calibrate.NewCostModel(res, dep, dep.Hardware.Name, dep.LLM.Name)
			data, err := cm.Marshal()
			if err != nil {
				return err
			}
			if err := calibrate.WriteSummary(c.Writer, cm); err != nil {
				return err
			}
			return writeCostModelData(c, cm, data)
		},
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// calibrateLinks is calibrate --links: it fits the links of the tables'
// tiers, prints the fits and writes the node_override keys that give
// the cluster's node those links.
func calibrateLinks(c *cli.Command) error {
	cl, err := clusterFor(c)
	if err != nil {
		return err
	}
	dep, err := cl.Deployment()
	if err != nil {
		return err
	}
	node, gpus, kvPerToken, err := cl.WorkerNode(dep)
	if err != nil {
		return err
	}
	pts, err := readTables(c.Args().Slice(), calibrate.ParseLinkTable)
	if err != nil {
		return err
	}
	fits, err := calibrate.FitLinks(pts, kvPerToken)
	if err != nil {
		return err
	}
	spec, warn := calibrate.LinkNodeSpec(fits, node, gpus)
	if err := calibrate.WriteLinkFits(c.Writer, fits, warn); err != nil {
		return err
	}
	data, err := yaml.Marshal(struct {
		Node         string          `yaml:"node"`
		NodeOverride *model.NodeSpec `yaml:"node_override"`
	}{node.Name, &spec})
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# opaltrace calibrate --links %s: the links fitted on node %s (%s a worker, %s); merge into the cluster file\n",
		strings.Join(c.Args().Slice(), " "), node.Name, human.Plural(gpus, "GPU"), linkBytesText(pts, kvPerToken))
	f, err := atomicfile.Create(c.String("output"))
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(append([]byte(head), data...)); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(c.ErrWriter, "wrote %s: node_override for %d links\n", c.String("output"), len(fits))
	return nil
}

// writeCostModel writes cm atomically to --output.
func writeCostModel(c *cli.Command, cm *calibrate.CostModel) error {
	data, err := cm.Marshal()
	if err != nil {
		return err
	}
	return writeCostModelData(c, cm, data)
}

func writeCostModelData(c *cli.Command, cm *calibrate.CostModel, data []byte) error {
	f, err := atomicfile.Create(c.String("output"))
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	if rf := cm.Replay; rf != nil {
		// A replay fit has no regression fits; say what it did instead.
		at := "uncalibrated"
		if rf.StartFrom != "" {
			at = "at " + rf.StartFrom + "'s coefficients"
		}
		fmt.Fprintf(c.ErrWriter, "wrote %s: %d coefficients fitted by replay (%d replays of the training runs, objective %.4g %s, %.4g fitted)\n",
			c.String("output"), len(cm.Coefficients), rf.Evaluations, rf.Uncalibrated, at, rf.Objective)
		return nil
	}
	fmt.Fprintf(c.ErrWriter, "wrote %s: %d coefficients from %d fits\n", c.String("output"), len(cm.Coefficients), len(cm.Fits))
	return nil
}

// readTables reads and parses each of paths with parse (a prefill table,
// a link table) and returns all their rows, in order.
func readTables[P any](paths []string, parse func(file string, data []byte) ([]P, error)) ([]P, error) {
	var pts []P
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		p, err := parse(path, data)
		if err != nil {
			return nil, err
		}
		pts = append(pts, p...)
	}
	return pts, nil
}

// linkBytesText says where the link fit's bytes came from: the tables'
// own (kv_bytes or kv_size on every row), the model's KV bytes a token,
// or both.
func linkBytesText(pts []calibrate.LinkPoint, kvPerToken int64) string {
	given := 0
	for _, p := range pts {
		if p.Bytes > 0 {
			given++
		}
	}
	switch given {
	case len(pts):
		return "each row's KV bytes from its table"
	case 0:
		return fmt.Sprintf("%d KV bytes a token", kvPerToken)
	}
	return fmt.Sprintf("%d rows' KV bytes from their tables, the others' %d a token", given, kvPerToken)
}

// serverSideRuns reads the runs calibrate --server-side fits and the
// deployment they ran on: each run's own record (model, hardware,
// parallel sizes, engine and its options), under the cluster file's and
// the flags' keys, as replay resolves a run's. The runs must share one
// deployment: the fit gives one GPU's and model's coefficients.
//
// Note: the fit took the cluster's deployment alone (the defaults: an
// H100 and Llama-3.1-8B without flags), whatever the runs recorded, so
// that an RTX 4090's engine-side timings were fitted as an H100's and
// the bandwidth efficiency came out 0.085.
func serverSideRuns(c *cli.Command, cl deploy.Cluster) ([]*trace.Request, *model.Deployment, error) {
	over, err := overridesFor(cl)
	if err != nil {
		return nil, nil, err
	}
	over.AssumeDeployment, over.Measured = c.Bool("assume-deployment"), true
	var reqs []*trace.Request
	var runs []trace.Run
	var refs []string
	for _, arg := range c.Args().Slice() {
		ds, err := loadSelected(c, arg)
		if err != nil {
			return nil, nil, err
		}
		reqs = append(reqs, ds.Requests...)
		for _, run := range ds.Runs {
			runs, refs = append(runs, run), append(refs, arg+": run "+run.Name)
		}
	}
	s, err := oneDeployment(cl, over, runs, refs, c.ErrWriter, "the fit is of one deployment's runs (--run picks them)")
	if err != nil {
		return nil, nil, fmt.Errorf("calibrate --server-side: %w", err)
	}
	return reqs, s.Deployment, nil
}
