package analyze

import (
	"github.com/opaltrace/opaltrace/trace"
)

// An Analysis is everything stats shows about one group of requests: the
// summary and the sections the data allows.
type Analysis struct {
	Summary *Summary
	// Steady is the detected steady part (a suggestion, never applied);
	// nil when the run is too short or lacks arrivals and E2E.
	Steady *SteadyState
	Decomp *Decomposition // nil without server-side TTFT parts
	KV     *KVUsage       // nil without cache data
	Series *Series        // set when AnalysisOptions.Series
	// CacheCurve is set when AnalysisOptions.CacheCurve and the requests
	// have hash_ids; CacheCurveErr says why not otherwise.
	CacheCurve    *CacheCurve
	CacheCurveErr string
	// Seconds is the run's part of a replay's per-second file, when one
	// was given (stats --per-second).
	Seconds *SecondsSummary
	// NotComputed names the sections left out, and why (a summary by
	// passes over a file has no steady state, TTFT decomposition or KV
	// cache section yet).
	NotComputed []string
}

// ByPassesOmits are the sections of an Analysis that a summary by passes
// does not compute.
var ByPassesOmits = []string{"steady state", "TTFT decomposition", "KV cache"}

// AnalysisOptions choose the sections of an Analysis.
type AnalysisOptions struct {
	Summary    Options
	Bands      []float64 // TTFT percentile bands of the decomposition; nil means DefaultBands
	Series     bool
	CacheCurve bool
}

// Analyze computes the analysis of one group. The sections other than the
// summary use the same (trimmed, when asked) requests as the summary.
func Analyze(g Group, opts AnalysisOptions) *Analysis {
	a := &Analysis{Summary: SummarizeWith(g.Run, g.Requests, opts.Summary)}
	reqs := g.Requests
	if a.Summary.Trim != nil {
		reqs, _, _ = Trim(reqs, opts.Summary.TrimWarmupSec, opts.Summary.TrimCooldownSec)
	}
	if st, ok := DetectSteady(g.Requests); ok {
		a.Steady = &st
	}
	bands := opts.Bands
	if bands == nil {
		bands = DefaultBands
	}
	a.Decomp = Decompose(reqs, bands)
	a.KV = KVCacheUsage(reqs)
	if opts.Series {
		if s, ok := PerSecond(reqs); ok {
			a.Series = s
		}
	}
	if opts.CacheCurve {
		c, err := ComputeCacheCurve(reqs)
		if err != nil {
			a.CacheCurveErr = err.Error()
		} else {
			a.CacheCurve = c
		}
	}
	return a
}

// AnalyzeGroups analyzes each group.
func AnalyzeGroups(groups []Group, opts AnalysisOptions) []*Analysis {
	out := make([]*Analysis, len(groups))
	for i, g := range groups {
		out[i] = Analyze(g, opts)
	}
	return out
}

// Pool returns one group of all requests of a dataset, for comparing two
// datasets as wholes.
func Pool(name string, reqs []*trace.Request) Group {
	return Group{Run: trace.Run{Name: name}, Requests: reqs}
}
