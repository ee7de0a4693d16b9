package analyze

import (
	"fmt"

	"github.com/opaltrace/opaltrace/trace"
)

// A Group is a set of requests summarized together, with the run metadata
// that applies to them.
type Group struct {
	Run      trace.Run
	Requests []*trace.Request
}

// GroupByRun groups requests by run, in the order of runs; requests whose
// run is not listed get a run of their own, in order of first appearance.
// Every listed run gets a group, even without requests (a summary-only run).
func GroupByRun(runs []trace.Run, reqs []*trace.Request) []Group {
	idx := make(map[string]int, len(runs))
	groups := make([]Group, 0, len(runs))
	for _, r := range runs {
		if _, dup := idx[r.Name]; dup {
			continue
		}
		idx[r.Name] = len(groups)
		groups = append(groups, Group{Run: r})
	}
	for _, r := range reqs {
		i, ok := idx[r.Run]
		if !ok {
			i = len(groups)
			idx[r.Run] = i
			groups = append(groups, Group{Run: trace.Run{Name: r.Run, Source: r.Source}})
		}
		groups[i].Requests = append(groups[i].Requests, r)
	}
	return groups
}

// GroupKeys are the keys GroupBy accepts.
var GroupKeys = []string{"run", "stage", "worker", "model"}

// GroupBy groups requests by run, stage, worker or model, in order of
// first appearance. Groups other than by run are subsets of runs (or span
// runs), so they carry a synthetic run named "key=value" without a
// source-measured duration: their throughputs use the measured span.
// Stages are keyed by run and stage, since stage names repeat across runs.
func GroupBy(key string, runs []trace.Run, reqs []*trace.Request) ([]Group, error) {
	var label func(r *trace.Request) string
	switch key {
	case "run", "":
		return GroupByRun(runs, reqs), nil
	case "stage":
		label = func(r *trace.Request) string { return r.Run + "/" + r.Stage }
	case "worker":
		label = func(r *trace.Request) string { return r.Worker }
	case "model":
		label = func(r *trace.Request) string { return r.Model }
	default:
		return nil, fmt.Errorf("group by %q: want one of run, stage, worker, model", key)
	}
	byName := map[string]int{}
	runOf := map[string]trace.Run{}
	for _, r := range runs {
		runOf[r.Name] = r
	}
	var groups []Group
	for _, r := range reqs {
		v := label(r)
		i, ok := byName[v]
		if !ok {
			i = len(groups)
			byName[v] = i
			name := key + "=" + v
			if v == "" {
				name = key + "=(none)"
			}
			run := trace.Run{Name: name, Source: r.Source, Model: r.Model}
			if key == "stage" {
				base := runOf[r.Run]
				run = trace.Run{Name: r.Run, Stage: r.Stage, Source: base.Source, Model: base.Model, File: base.File}
				if run.Source == "" {
					run.Source = r.Source
				}
			}
			groups = append(groups, Group{Run: run})
		}
		groups[i].Requests = append(groups[i].Requests, r)
	}
	return groups, nil
}
