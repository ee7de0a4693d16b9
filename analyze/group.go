package analyze

import (
	"fmt"
	"slices"

	"github.com/opaltrace/opaltrace/internal/human"
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
	groups, _ := GroupBy("run", runs, reqs)
	return groups
}

// GroupKeys are the keys GroupBy accepts.
var GroupKeys = []string{"run", "stage", "worker", "prefill_worker", "model"}

// GroupBy groups requests by run, stage, worker, prefill worker
// (disaggregated replays: the one the router chose) or model, in order of
// first appearance, workers in their names' natural order (w2 before
// w10; records are in completion order, so the first to appear is the
// first to complete). Groups other than by run are subsets of runs (or span
// runs), so they carry a synthetic run named "key=value" without a
// source-measured duration: their throughputs use the measured span.
// Stages are keyed by run and stage, since stage names repeat across runs.
func GroupBy(key string, runs []trace.Run, reqs []*trace.Request) ([]Group, error) {
	g, err := newGrouper(key, runs)
	if err != nil {
		return nil, err
	}
	var groups []Group
	for _, run := range g.runs {
		groups = append(groups, Group{Run: run})
	}
	for _, r := range reqs {
		i := g.index(r)
		if i == len(groups) {
			groups = append(groups, Group{Run: g.runs[i]})
		}
		groups[i].Requests = append(groups[i].Requests, r)
	}
	return inOrder(g, groups), nil
}

// inOrder returns xs, one per group of g, in the order GroupBy lists the
// groups: as they appeared, or by worker, in the workers' natural order.
func inOrder[T any](g *grouper, xs []T) []T {
	if g.key != "worker" && g.key != "prefill_worker" {
		return xs
	}
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return human.NaturalCompare(g.labels[a], g.labels[b]) })
	out := make([]T, len(xs))
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

// A grouper assigns requests to groups, creating a group (and its run) at
// a key's first appearance: GroupBy's rule, shared by the in-memory
// grouping and the summaries made by passes (SummarizeStreamGroups), so
// both list the same groups in the same order.
type grouper struct {
	key   string
	label func(r *trace.Request) string // nil: by run
	idx   map[string]int
	runOf map[string]trace.Run
	runs  []trace.Run // the groups' runs, in group order
	// labels holds the groups' keys, in group order (not by run).
	labels []string
}

func newGrouper(key string, runs []trace.Run) (*grouper, error) {
	g := &grouper{key: key, idx: map[string]int{}, runOf: map[string]trace.Run{}}
	switch key {
	case "run", "":
		g.key = "run"
		// Every listed run is a group, even without requests.
		for _, r := range runs {
			if _, dup := g.idx[r.Name]; dup {
				continue
			}
			g.idx[r.Name] = len(g.runs)
			g.runs = append(g.runs, r)
		}
		return g, nil
	case "stage":
		g.label = func(r *trace.Request) string { return r.Run + "/" + r.Stage }
	case "worker":
		g.label = func(r *trace.Request) string { return r.Worker }
	case "prefill_worker":
		g.label = func(r *trace.Request) string { return r.PrefillWorker }
	case "model":
		g.label = func(r *trace.Request) string { return r.Model }
	default:
		return nil, fmt.Errorf("group by %q: want one of run, stage, worker, prefill_worker, model", key)
	}
	for _, r := range runs {
		g.runOf[r.Name] = r
	}
	return g, nil
}

// index returns r's group, len(g.runs)−1 after adding it when r is the
// first of a new group.
func (g *grouper) index(r *trace.Request) int {
	if g.label == nil {
		i, ok := g.idx[r.Run]
		if !ok {
			i = len(g.runs)
			g.idx[r.Run] = i
			g.runs = append(g.runs, trace.Run{Name: r.Run, Source: r.Source})
		}
		return i
	}
	v := g.label(r)
	if i, ok := g.idx[v]; ok {
		return i
	}
	i := len(g.runs)
	g.idx[v] = i
	g.labels = append(g.labels, v)
	name := g.key + "=" + v
	if v == "" {
		name = g.key + "=(none)"
	}
	run := trace.Run{Name: name, Source: r.Source, Model: r.Model}
	if g.key == "stage" {
		base := g.runOf[r.Run]
		run = trace.Run{Name: r.Run, Stage: r.Stage, Source: base.Source, Model: base.Model, File: base.File}
		if run.Source == "" {
			run.Source = r.Source
		}
	}
	g.runs = append(g.runs, run)
	return i
}

// GroupColumns are the request fields (Parquet columns) a grouping by key
// reads, beyond what a summary reads.
func GroupColumns(key string) []string {
	switch key {
	case "stage":
		return []string{"run", "stage", "source"}
	case "worker":
		return []string{"worker", "source", "model"}
	case "prefill_worker":
		return []string{"prefill_worker", "source", "model"}
	case "model":
		return []string{"model", "source"}
	}
	return []string{"run", "source"}
}
