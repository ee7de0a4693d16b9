package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// A headerItem is one line of a dataset's header: what produced the
// data (source tool and version), on what (deployment), under what load
// (workload), priced by what (cost model), and the cluster file of a
// replay. Details holds long text shown folded (the cluster YAML, the
// cost model).
type headerItem struct {
	Label   string
	Values  []string
	Details string
}

// maxHeaderValues caps the distinct values listed per header line; a
// sweep of 40 runs says "and 35 more".
const maxHeaderValues = 5

// datasetHeader describes the runs of a dataset: each line lists the
// distinct values over its runs, in run order.
func datasetHeader(runs []trace.Run) []headerItem {
	var items []headerItem
	add := func(label string, of func(trace.Run) string) {
		var vals []string
		for _, r := range runs {
			if v := of(r); v != "" && !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			return
		}
		if len(vals) > maxHeaderValues {
			vals = append(vals[:maxHeaderValues], fmt.Sprintf("and %d more", len(vals)-maxHeaderValues))
		}
		items = append(items, headerItem{Label: label, Values: vals})
	}
	add("source", sourceOf)
	add("deployment", deploymentOf)
	add("fleet", func(r trace.Run) string { return strings.ReplaceAll(r.Extra["fleet"], "\n", "; ") })
	add("workload", workloadOf)
	add("cost model", func(r trace.Run) string { return firstLine(r.Extra["cost_model"]) })
	// The cluster file and the cost model in full, of the first run that
	// has them (a replay's runs share them).
	for _, key := range []struct{ extra, label string }{{"config", "cluster configuration"}, {"cost_model", "cost model in full"}} {
		for _, r := range runs {
			if v := r.Extra[key.extra]; strings.Contains(strings.TrimSpace(v), "\n") {
				items = append(items, headerItem{Label: key.label, Details: v})
				break
			}
		}
	}
	return items
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// sourceOf is the input format and the tool's version when recorded
// (extra keys named "version" or "…_version").
func sourceOf(r trace.Run) string {
	s := r.Source
	var keys []string
	for k := range r.Extra {
		if k == "version" || strings.HasSuffix(k, "_version") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += fmt.Sprintf(" (%s %s)", k, r.Extra[k])
	}
	if r.File != "" {
		s += ", from " + baseName(r.File)
	}
	return s
}

// baseName is the last element of a path: a report records where a run
// came from, not the machine's directory layout.
func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// deploymentOf is the replay's own description (deploy's header) or what
// the run records: model, hardware, parallelism, engine and its options.
func deploymentOf(r trace.Run) string {
	if d := r.Extra["deployment"]; d != "" {
		return d
	}
	var parts []string
	if r.Model != "" {
		parts = append(parts, r.Model)
	}
	if r.Hardware != "" {
		parts = append(parts, "on "+r.Hardware)
	}
	var par []string
	for _, p := range []struct {
		name string
		n    int
	}{{"TP", r.TP}, {"PP", r.PP}, {"DP", r.DP}} {
		if p.n > 0 {
			par = append(par, p.name+strconv.Itoa(p.n))
		}
	}
	if len(par) > 0 {
		parts = append(parts, "("+strings.Join(par, " ")+")")
	}
	if r.Engine != "" {
		parts = append(parts, r.Engine)
	}
	var opts []string
	for k, v := range r.Extra {
		if o, ok := strings.CutPrefix(k, "engine_opt."); ok {
			opts = append(opts, "--"+o+"="+v)
		}
	}
	sort.Strings(opts)
	parts = append(parts, opts...)
	if r.Disaggregated {
		parts = append(parts, "prefill/decode disaggregated")
	}
	if r.Speculative {
		parts = append(parts, "speculative decoding")
	}
	return strings.Join(parts, " ")
}

// workloadOf is the recorded workload: dataset, lengths, rate or
// concurrency, requests.
func workloadOf(r trace.Run) string {
	var parts []string
	if w := r.Workload; w != nil {
		if w.Dataset != "" {
			parts = append(parts, w.Dataset)
		}
		if w.InputLen > 0 || w.OutputLen > 0 {
			parts = append(parts, fmt.Sprintf("input %d, output %d tokens", w.InputLen, w.OutputLen))
		}
		if w.RangeRatio > 0 {
			parts = append(parts, fmt.Sprintf("range ratio %g", w.RangeRatio))
		}
		switch rate := float64(w.RequestRate); {
		case math.IsInf(rate, 1):
			parts = append(parts, "all requests at once")
		case rate > 0:
			parts = append(parts, fmt.Sprintf("%g req/s", rate))
		}
		if w.Burstiness > 0 && w.Burstiness != 1 {
			parts = append(parts, fmt.Sprintf("burstiness %g", w.Burstiness))
		}
		if w.Concurrency > 0 {
			parts = append(parts, fmt.Sprintf("concurrency %d", w.Concurrency))
		}
		if w.NumPrompts > 0 {
			parts = append(parts, fmt.Sprintf("%d prompts", w.NumPrompts))
		}
	}
	if e := r.Extra["workload"]; e != "" {
		parts = append(parts, e)
	}
	return strings.Join(parts, ", ")
}
