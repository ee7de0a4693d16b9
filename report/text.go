package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/human"
)

// StatsOptions chooses what the vLLM-style summary prints.
type StatsOptions struct {
	Percentiles []float64 // e.g. 99 (vLLM's default) or 50, 90, 99
}

// DefaultPercentiles is vLLM's default --metric-percentiles.
var DefaultPercentiles = []float64{99}

// statMetric is one latency metric of the summary.
type statMetric struct {
	key, title, header string // key as in vLLM's JSON (ttft, tpot, itl, e2el)
	dist               func(*analyze.Summary) analyze.Dist
}

var statMetrics = []statMetric{
	{"ttft", "TTFT", "Time to First Token", func(s *analyze.Summary) analyze.Dist { return s.TTFT }},
	{"tpot", "TPOT", "Time per Output Token (excl. 1st token)", func(s *analyze.Summary) analyze.Dist { return s.TPOT }},
	{"itl", "ITL", "Inter-token Latency", func(s *analyze.Summary) analyze.Dist { return s.ITL }},
	{"e2el", "E2EL", "End-to-end Latency", func(s *analyze.Summary) analyze.Dist { return s.E2E }},
}

// percentileKey is vLLM's name of a percentile: p99, p99.9.
func percentileKey(p float64) string {
	return "p" + strconv.FormatFloat(p, 'f', -1, 64)
}

// reportedValue returns a summary value the source printed itself (e.g.
// "mean_tpot_ms"), for metrics the per-request data cannot reproduce.
// LambdaLabs-era vLLM files call E2E "latency".
func reportedValue(rep map[string]any, stat, key string) (float64, bool) {
	for _, k := range []string{key, strings.Replace(key, "e2el", "latency", 1), strings.Replace(key, "e2el", "e2e_latency", 1)} {
		if v, ok := rep[stat+"_"+k+"_ms"].(float64); ok {
			return v, true
		}
	}
	return 0, false
}

// decodeReported is the summary the run's source reported, under vLLM's
// keys (analyze.ReportedFields).
func decodeReported(s *analyze.Summary) map[string]any { return analyze.ReportedFields(s.Run) }

// WriteStats prints a vLLM-style "Serving Benchmark Result" block per run.
// Every number is recomputed from the per-request data; where the data has
// none for a metric (a summary-only file, or E2E in files that never saved
// it) the source's own value is printed and marked "reported by source".
func WriteStats(w io.Writer, sums []*analyze.Summary, opts StatsOptions) error {
	as := make([]*analyze.Analysis, len(sums))
	for i, s := range sums {
		as[i] = &analyze.Analysis{Summary: s}
	}
	return WriteAnalyses(w, as, opts)
}

// WriteAnalyses prints, per analysis, the vLLM-style block (with the
// semantics it was computed under) and then the sections the data has:
// TTFT decomposition, KV cache, per-second series, cache curve.
func WriteAnalyses(w io.Writer, as []*analyze.Analysis, opts StatsOptions) error {
	pcts := opts.Percentiles
	if len(pcts) == 0 {
		pcts = DefaultPercentiles
	}
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeSummary(&b, a.Summary, pcts)
		writeNotes(&b, a)
		writeDecomp(&b, a.Decomp)
		writeKV(&b, a.KV)
		writeSeries(&b, a.Series)
		writeCacheCurve(&b, a)
		if a.Seconds != nil {
			secondsTable(a.Seconds).writeText(&b)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSummary(b *strings.Builder, s *analyze.Summary, pcts []float64) {
	summaryTable(s, pcts).writeText(b)
}

// writeNotes prints what was not computed, trimming and the steady state,
// and warnings, under the block.
func writeNotes(b *strings.Builder, a *analyze.Analysis) {
	s := a.Summary
	if s.Requests > 0 && s.Peak == nil && s.PeakMissing != "" {
		fmt.Fprintf(b, "Peak output tokens/s and concurrency: not computed (%s).\n", s.PeakMissing)
	}
	if s.Peak != nil && s.Peak.TokensMissing != "" {
		fmt.Fprintf(b, "Peak output tokens/s: not computed (%s).\n", s.Peak.TokensMissing)
	}
	if t := s.Trim; t != nil {
		fmt.Fprintf(b, "Trimmed: warmup %gs, cooldown %gs: window [%.3f, %.3f] s, %d requests dropped.\n", t.WarmupSec, t.CooldownSec, t.Start, t.End, t.Dropped)
	}
	if st := a.Steady; st != nil && st.WarmupSec == 0 && st.CooldownSec == 0 {
		fmt.Fprintf(b, "Steady state (detected): no warmup or cooldown to trim (%s).\n", st.Method)
	} else if st != nil {
		fmt.Fprintf(b, "Steady state (detected, not applied): --trim-warmup %g --trim-cooldown %g (%s).\n", st.WarmupSec, st.CooldownSec, st.Method)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(b, "Warning: %s.\n", w)
	}
	if len(a.NotComputed) > 0 {
		fmt.Fprintf(b, "Not computed by passes over the file: %s (they need the requests in memory).\n", strings.Join(a.NotComputed, ", "))
	}
}

func bandLabel(lo, hi float64) string {
	return "p" + strconv.FormatFloat(lo, 'f', -1, 64) + "-" + strconv.FormatFloat(hi, 'f', -1, 64)
}

func writeDecomp(b *strings.Builder, d *analyze.Decomposition) {
	if d == nil {
		return
	}
	fmt.Fprintf(b, "\n%s\n", center(" TTFT decomposition by TTFT percentile ", 50, '-'))
	fmt.Fprintf(b, "%d completed requests with server-side timings; share of the band's TTFT.\n", d.Requests)
	fmt.Fprintf(b, "%-9s %7s %11s", "band", "n", "TTFT ms")
	for _, p := range analyze.DecompParts {
		fmt.Fprintf(b, " %9s", p)
	}
	fmt.Fprintf(b, "  %s\n", "dominant")
	for _, band := range d.Bands {
		if band.N == 0 {
			fmt.Fprintf(b, "%-9s %7d  (no requests)\n", bandLabel(band.LoPct, band.HiPct), 0)
			continue
		}
		fmt.Fprintf(b, "%-9s %7d %11.2f", bandLabel(band.LoPct, band.HiPct), band.N, band.MeanTTFT*1000)
		for _, sh := range band.Share {
			fmt.Fprintf(b, " %8.1f%%", sh*100)
		}
		fmt.Fprintf(b, "  %s\n", band.Dominant)
	}
	if d.PrefillIncludesQueue > 0 {
		fmt.Fprintf(b, "Note: for %d requests the source's prefill includes the queue wait (no separate queue time).\n", d.PrefillIncludesQueue)
	}
	if q := d.QueueSplit; q != nil {
		fmt.Fprintf(b, "Queue wait: %.1f%% idle or busy with others, %.1f%% blocked by the token/memory budget.\n", q.IdleShare*100, q.BudgetWaitShare*100)
	}
}

func writeKV(b *strings.Builder, u *analyze.KVUsage) {
	if u == nil {
		return
	}
	fmt.Fprintf(b, "\n%s\n", center(" KV cache ", 50, '-'))
	if u.Requests > 0 {
		fmt.Fprintf(b, "Cached prompt tokens: %d of %d (%.2f%%) over %d requests\n", u.CachedTokens, u.InputTokens, u.CachedShare*100, u.Requests)
	}
	if u.TierRequests > 0 {
		fmt.Fprintf(b, "%-8s %14s %12s %12s\n", "tier", "hit tokens", "% of prompt", "% of cached")
		for i, tier := range analyze.KVTiers {
			fmt.Fprintf(b, "%-8s %14d %11.2f%% %11.2f%%\n", tier, u.TierTokens[i], u.TierShare[i]*100, u.TierOfCached[i]*100)
		}
	}
}

func writeSeries(b *strings.Builder, s *analyze.Series) {
	if s == nil {
		return
	}
	fmt.Fprintf(b, "\n%s\n", center(" Per second ", 50, '-'))
	fmt.Fprintf(b, "Seconds from the first arrival (t=%.3f s); output tokens counted per chunk unless chunk sizes are known.\n", s.Start)
	fmt.Fprintf(b, "%6s %9s %12s %8s %14s\n", "second", "arrivals", "completions", "running", "output tokens")
	for k := range s.Arrivals {
		fmt.Fprintf(b, "%6d %9d %12d %8d %14d\n", k, s.Arrivals[k], s.Completions[k], s.Running[k], s.OutputTokens[k])
	}
}

// curveCapacities are the capacities printed: powers of two up to the
// number of distinct blocks, and that number.
func curveCapacities(c *analyze.CacheCurve) []int64 {
	var caps []int64
	for k := int64(1); k < c.Distinct; k *= 2 {
		caps = append(caps, k)
	}
	return append(caps, c.Distinct)
}

func writeCacheCurve(b *strings.Builder, a *analyze.Analysis) {
	if a.CacheCurve == nil && a.CacheCurveErr == "" {
		return
	}
	fmt.Fprintf(b, "\n%s\n", center(" Prefix-cache what-if (ideal LRU) ", 50, '-'))
	if a.CacheCurve == nil {
		fmt.Fprintf(b, "Not computed: %s.\n", a.CacheCurveErr)
		return
	}
	c := a.CacheCurve
	b.WriteString("The trace's theoretical reuse: an ideal block-level LRU cache over hash_ids, requests in\n" +
		"arrival order, hit = longest cached prefix; not any engine's behaviour.\n")
	fmt.Fprintf(b, "Block size %d tokens; %d requests, %d block lookups, %d distinct blocks.\n", c.BlockSize, c.Requests, c.Blocks, c.Distinct)
	fmt.Fprintf(b, "%15s %16s %11s %11s\n", "capacity blocks", "capacity tokens", "hit blocks", "hit tokens")
	for _, k := range curveCapacities(c) {
		hb, ht := c.HitRate(k)
		fmt.Fprintf(b, "%15d %16d %10.2f%% %10.2f%%\n", k, k*c.BlockSize, hb*100, ht*100)
	}
}

func center(s string, width int, fill byte) string {
	if len(s) >= width {
		return s
	}
	left := (width - len(s)) / 2
	right := width - len(s) - left
	return strings.Repeat(string(fill), left) + s + strings.Repeat(string(fill), right)
}

// StatsJSON returns the summaries in vLLM's result-JSON vocabulary
// (completed, duration, mean_ttft_ms, p99_itl_ms, …), one object per run,
// plus "run", "source" and, per metric, "<metric>_basis": "per_request" when
// recomputed from the data or "reported" when copied from the source.
func StatsJSON(sums []*analyze.Summary, opts StatsOptions) ([]byte, error) {
	as := make([]*analyze.Analysis, len(sums))
	for i, s := range sums {
		as[i] = &analyze.Analysis{Summary: s}
	}
	return AnalysesJSON(as, opts)
}

// AnalysesJSON is StatsJSON with every section of the analyses: status
// counts, semantics, goodput, peaks, trimming, steady state, TTFT
// decomposition, KV cache, per-second series and cache curve, each present
// only when computed.
func AnalysesJSON(as []*analyze.Analysis, opts StatsOptions) ([]byte, error) {
	out := make([]orderedJSON, 0, len(as))
	for _, a := range as {
		out = append(out, analysisJSON(a, opts))
	}
	return json.MarshalIndent(out, "", "  ")
}

func analysisJSON(a *analyze.Analysis, opts StatsOptions) orderedJSON {
	pcts := opts.Percentiles
	if len(pcts) == 0 {
		pcts = DefaultPercentiles
	}
	s := a.Summary
	o := orderedJSON{}
	summaryTable(s, pcts).addJSON(&o)
	if t := s.Trim; t != nil {
		tj := orderedJSON{}
		tj.add("warmup_s", t.WarmupSec)
		tj.add("cooldown_s", t.CooldownSec)
		tj.add("start_s", t.Start)
		tj.add("end_s", t.End)
		tj.add("dropped", t.Dropped)
		o.add("trim", tj)
	}
	if st := a.Steady; st != nil {
		sj := orderedJSON{}
		sj.add("warmup_s", st.WarmupSec)
		sj.add("cooldown_s", st.CooldownSec)
		sj.add("method", st.Method)
		sj.add("applied", false)
		o.add("steady_state", sj)
	}
	if len(s.Warnings) > 0 {
		o.add("warnings", s.Warnings)
	}
	if len(a.NotComputed) > 0 {
		o.add("not_computed", a.NotComputed)
	}
	if d := a.Decomp; d != nil {
		dj := orderedJSON{}
		dj.add("requests", d.Requests)
		dj.add("parts", analyze.DecompParts)
		var bands []orderedJSON
		for _, band := range d.Bands {
			bj := orderedJSON{}
			bj.add("band", bandLabel(band.LoPct, band.HiPct))
			bj.add("n", band.N)
			bj.add("mean_ttft_ms", band.MeanTTFT*1000)
			means := make([]float64, len(band.Mean))
			for i, v := range band.Mean {
				means[i] = v * 1000
			}
			bj.add("mean_ms", means)
			bj.add("share", band.Share)
			bj.add("dominant", band.Dominant)
			bands = append(bands, bj)
		}
		dj.add("bands", bands)
		if d.PrefillIncludesQueue > 0 {
			dj.add("prefill_includes_queue", d.PrefillIncludesQueue)
		}
		if q := d.QueueSplit; q != nil {
			dj.add("queue_idle_share", q.IdleShare)
			dj.add("queue_budget_wait_share", q.BudgetWaitShare)
		}
		o.add("ttft_decomposition", dj)
	}
	if u := a.KV; u != nil {
		kj := orderedJSON{}
		kj.add("requests", u.Requests)
		kj.add("input_tokens", u.InputTokens)
		kj.add("cached_tokens", u.CachedTokens)
		kj.add("cached_share", u.CachedShare)
		if u.TierRequests > 0 {
			kj.add("tiers", analyze.KVTiers)
			kj.add("tier_tokens", u.TierTokens)
			kj.add("tier_share_of_prompt", u.TierShare)
			kj.add("tier_share_of_cached", u.TierOfCached)
		}
		o.add("kv_cache", kj)
	}
	if se := a.Series; se != nil {
		sj := orderedJSON{}
		sj.add("start_s", se.Start)
		sj.add("arrivals", se.Arrivals)
		sj.add("completions", se.Completions)
		sj.add("running", se.Running)
		sj.add("output_tokens", se.OutputTokens)
		o.add("per_second", sj)
	}
	if c := a.CacheCurve; c != nil {
		cj := orderedJSON{}
		cj.add("note", "theoretical reuse of the trace under an ideal block-level LRU cache, not an engine's behaviour")
		cj.add("block_size", c.BlockSize)
		cj.add("requests", c.Requests)
		cj.add("block_lookups", c.Blocks)
		cj.add("tokens", c.Tokens)
		cj.add("distinct_blocks", c.Distinct)
		var pts []orderedJSON
		for _, k := range curveCapacities(c) {
			hb, ht := c.At(k)
			pj := orderedJSON{}
			pj.add("capacity_blocks", k)
			pj.add("capacity_tokens", k*c.BlockSize)
			pj.add("hit_blocks", hb)
			pj.add("hit_tokens", ht)
			rb, rt := c.HitRate(k)
			pj.add("hit_rate_blocks", rb)
			pj.add("hit_rate_tokens", rt)
			pts = append(pts, pj)
		}
		cj.add("points", pts)
		o.add("cache_curve", cj)
	} else if a.CacheCurveErr != "" {
		o.add("cache_curve_missing", a.CacheCurveErr)
	}
	if a.Seconds != nil {
		sj := orderedJSON{}
		secondsTable(a.Seconds).addJSON(&sj)
		o.add("per_second_file", sj)
	}
	return o
}

func pctKeys(pcts []float64) []string {
	keys := make([]string, len(pcts))
	for i, p := range pcts {
		keys[i] = percentileKey(p)
	}
	return keys
}

// orderedJSON is a JSON object that keeps its keys in insertion order, so
// output is deterministic and reads like vLLM's.
type orderedJSON struct {
	keys []string
	vals []any
}

func (o *orderedJSON) add(k string, v any) {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		v = nil
	}
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// MarshalJSON writes the keys in order.
func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// passes says "1 pass" or "n passes".
func passes(n int) string {
	if n == 1 {
		return "1 pass"
	}
	return strconv.Itoa(n) + " passes"
}

// kvLine prints a label and a value as the summary block does.
func kvLine(b *strings.Builder, label string, v any) { fmt.Fprintf(b, "%-40s %-10v\n", label, v) }

// WriteSourceViews prints each run as its source tool summarized it, with
// the tool's metric names, units and rules.
func WriteSourceViews(w io.Writer, runs []string, views []*analyze.SourceView) error {
	var b strings.Builder
	for i, v := range views {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s\n", center(" As "+v.Source+" computes it ", 50, '='))
		kvLine(&b, "Run:", runs[i])
		fmt.Fprintf(&b, "Rule: %s.\n", v.Rule)
		if v.Window != "" {
			fmt.Fprintf(&b, "Window: %s.\n", v.Window)
		}
		kvLine(&b, "Requests counted:", v.N)
		for _, s := range v.Values {
			kvLine(&b, s.Name+":", human.Number(s.Value))
		}
		for _, m := range v.Metrics {
			fmt.Fprintf(&b, "%s\n", center(" "+m.Name+" ("+m.Unit+", our "+m.Ours+") ", 50, '-'))
			kvLine(&b, "count:", m.Count)
			for _, kv := range []struct {
				k string
				v float64
			}{{"mean", m.Mean}, {"std", m.Std}, {"min", m.Min}, {"median", m.Median}, {"max", m.Max}} {
				kvLine(&b, kv.k+":", human.Number(kv.v))
			}
			if v.Source == "guidellm" { // fields only GuideLLM prints
				for _, kv := range []struct {
					k string
					v float64
				}{{"mode", m.Mode}, {"variance", m.Variance}, {"total_sum", m.TotalSum}} {
					kvLine(&b, kv.k+":", human.Number(kv.v))
				}
			}
			for _, p := range m.Percentiles {
				kvLine(&b, p.Key+":", human.Number(p.Value))
			}
		}
		for _, n := range v.NotReproduced {
			fmt.Fprintf(&b, "Not reproduced: %s: %s.\n", n.Name, n.Why)
		}
		b.WriteString(strings.Repeat("=", 50))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SourceViewsJSON returns the source views as JSON, one object per run.
func SourceViewsJSON(runs []string, views []*analyze.SourceView) ([]byte, error) {
	out := make([]orderedJSON, 0, len(views))
	for i, v := range views {
		o := orderedJSON{}
		o.add("run", runs[i])
		o.add("source", v.Source)
		o.add("rule", v.Rule)
		if v.Window != "" {
			o.add("window", v.Window)
		}
		o.add("requests", v.N)
		for _, s := range v.Values {
			o.add(s.Name, s.Value)
		}
		for _, m := range v.Metrics {
			mj := orderedJSON{}
			mj.add("unit", m.Unit)
			mj.add("ours", m.Ours)
			mj.add("count", m.Count)
			mj.add("mean", m.Mean)
			mj.add("std", m.Std)
			mj.add("min", m.Min)
			mj.add("median", m.Median)
			mj.add("max", m.Max)
			if v.Source == "guidellm" {
				mj.add("mode", m.Mode)
				mj.add("variance", m.Variance)
				mj.add("total_sum", m.TotalSum)
			}
			for _, p := range m.Percentiles {
				mj.add(p.Key, p.Value)
			}
			o.add(m.Name, mj)
		}
		if len(v.NotReproduced) > 0 {
			nr := orderedJSON{}
			for _, n := range v.NotReproduced {
				nr.add(n.Name, n.Why)
			}
			o.add("not_reproduced", nr)
		}
		out = append(out, o)
	}
	return json.MarshalIndent(out, "", "  ")
}

// WriteWorkerLoad prints the load across the groups of stats --by worker
// or --by prefill_worker, key (analyses named "worker=…" or
// "prefill_worker=…"; requests without one are left out):
// the requests per worker and the imbalance, max over mean, by requests
// and by prompt plus output tokens (Imbalance). Nothing for fewer than
// two workers.
func WriteWorkerLoad(w io.Writer, as []*analyze.Analysis, key string) error {
	var ws []WorkerLoad
	for _, a := range as {
		s := a.Summary
		name, ok := strings.CutPrefix(s.Run.Name, key+"=")
		if !ok || name == "(none)" {
			continue
		}
		ws = append(ws, WorkerLoad{Worker: name, Requests: int64(s.Requests), InputTokens: s.TotalInputTokens, OutputTokens: s.TotalOutputTokens})
	}
	if len(ws) < 2 {
		return nil
	}
	lo, hi := ws[0].Requests, ws[0].Requests
	for _, x := range ws {
		lo, hi = min(lo, x.Requests), max(hi, x.Requests)
	}
	byReq, byTok := Imbalance(ws)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n", center(" Load across workers ", 50, '-'))
	kvLine(&b, "Workers:", len(ws))
	kvLine(&b, "Requests per worker (min - max):", fmt.Sprintf("%d - %d", lo, hi))
	kvLine(&b, "Imbalance by requests (max/mean):", fmt.Sprintf("%.3f", byReq))
	kvLine(&b, "Imbalance by tokens (max/mean):", fmt.Sprintf("%.3f", byTok))
	_, err := io.WriteString(w, b.String())
	return err
}
