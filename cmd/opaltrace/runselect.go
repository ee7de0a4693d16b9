package main

import (
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// runFlag selects runs of the inputs (trace.RunSelector): an index, a
// name or glob, or fields such as rate=8; repeated, the union.
func runFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "run", Usage: "only the runs `SEL` picks: index (3, 2-4), name or glob, or fields such as rate=8 or file=*qps_16*&rate=16 (repeatable: the union)"}
}

// loadSelected loads the input at arg (loadDataset) and keeps the runs
// --run picks, with their requests.
func loadSelected(c *cli.Command, arg string) (*dataset, error) {
	ds, err := loadDataset(arg, ingestOptions(c), c.Bool("allow-errors"), c.ErrWriter)
	if err != nil {
		return nil, err
	}
	sels, err := trace.ParseRunSelectors(c.StringSlice("run"))
	if err != nil {
		return nil, err
	}
	ds.Loaded = ds.Runs
	return ds, selectDataset(ds, sels)
}

// labelRuns gives the summaries of runs of an input of several runs the
// labels trace.RunLabels names them by among all the input's runs
// (loaded), so that "#3" is what --run 3 picks; summaries of groups other
// than runs keep none.
func labelRuns(as []*analyze.Analysis, loaded []trace.Run) {
	byName := labelsByName(loaded)
	for _, a := range as {
		if s := a.Summary; s.Run.Stage == "" {
			if l, ok := byName[s.Run.Name]; ok {
				s.Label = l
			}
		}
	}
}

// selectDataset keeps the runs of ds that sels pick, and their requests.
func selectDataset(ds *dataset, sels []trace.RunSelector) error {
	if len(sels) == 0 {
		return nil
	}
	idx, err := trace.SelectRuns(ds.Runs, sels)
	if err != nil {
		return fmt.Errorf("%s: %w", ds.Name, err)
	}
	keep := map[string]bool{}
	runs := make([]trace.Run, 0, len(idx))
	for _, i := range idx {
		keep[ds.Runs[i].Name] = true
		runs = append(runs, ds.Runs[i])
	}
	reqs := ds.Requests[:0]
	for _, r := range ds.Requests {
		if keep[r.Run] {
			reqs = append(reqs, r)
		}
	}
	clear(ds.Requests[len(reqs):])
	ds.Runs, ds.Requests = runs, reqs
	return nil
}

// labelsByName maps each run's name to its trace.RunFieldLabels label
// among runs; nil where no field sets them apart.
func labelsByName(runs []trace.Run) map[string]string {
	labels := trace.RunFieldLabels(runs)
	if labels == nil {
		return nil
	}
	byName := make(map[string]string, len(runs))
	for i, r := range runs {
		byName[r.Name] = labels[i]
	}
	return byName
}
