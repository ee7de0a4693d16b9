package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
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

func decodeReported(s *analyze.Summary) map[string]any {
	var rep map[string]any
	if len(s.Run.Reported) > 0 {
		json.Unmarshal(s.Run.Reported, &rep)
	}
	return rep
}

// WriteStats prints a vLLM-style "Serving Benchmark Result" block per run.
// Every number is recomputed from the per-request data; where the data has
// none for a metric (a summary-only file, or E2E in files that never saved
// it) the source's own value is printed and marked "reported by source".
func WriteStats(w io.Writer, sums []*analyze.Summary, opts StatsOptions) error {
	pcts := opts.Percentiles
	if len(pcts) == 0 {
		pcts = DefaultPercentiles
	}
	var b strings.Builder
	for i, s := range sums {
		if i > 0 {
			b.WriteByte('\n')
		}
		rep := decodeReported(s)
		title := " Serving Benchmark Result "
		fmt.Fprintf(&b, "%s\n", center(title, 50, '='))
		row := func(label string, v any) { fmt.Fprintf(&b, "%-40s %-10v\n", label, v) }
		rowf := func(label string, v float64) { fmt.Fprintf(&b, "%-40s %-10.2f\n", label, v) }
		row("Run:", s.Run.Name)
		if s.Run.Source != "" {
			row("Source:", s.Run.Source)
		}
		if s.Run.Model != "" {
			row("Model:", s.Run.Model)
		}
		if s.Requests == 0 {
			b.WriteString("No per-request data: every value below is reported by source.\n")
			for _, k := range []string{"completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
				"request_throughput", "output_throughput", "total_token_throughput"} {
				if v, ok := rep[k]; ok {
					row(k+":", v)
				}
			}
		} else {
			row("Successful requests:", s.Completed)
			row("Failed requests:", s.Failed)
			if s.DurationSec > 0 {
				basis := "reported by source"
				if s.DurationMeasured {
					basis = "first arrival to last completion"
				}
				fmt.Fprintf(&b, "%-40s %-10.2f (%s)\n", "Benchmark duration (s):", s.DurationSec, basis)
			}
			row("Total input tokens:", s.TotalInputTokens)
			row("Total generated tokens:", s.TotalOutputTokens)
			if s.DurationSec > 0 {
				rowf("Request throughput (req/s):", s.RequestThroughput)
				rowf("Output token throughput (tok/s):", s.OutputThroughput)
				rowf("Total Token throughput (tok/s):", s.TotalTokenThroughput)
			}
		}
		for _, m := range statMetrics {
			d := m.dist(s)
			fromData := d.N() > 0
			if !fromData {
				if _, ok := reportedValue(rep, "mean", m.key); !ok {
					if _, ok := reportedValue(rep, "median", m.key); !ok {
						continue
					}
				}
			}
			header := m.header
			if !fromData {
				header += " (reported by source)"
			}
			fmt.Fprintf(&b, "%s\n", center(header, 50, '-'))
			stat := func(name, key string, v float64) {
				label := fmt.Sprintf("%s %s (ms):", name, m.title)
				if fromData {
					rowf(label, v*1000)
				} else if rv, ok := reportedValue(rep, key, m.key); ok {
					rowf(label, rv)
				}
			}
			stat("Mean", "mean", d.Mean)
			stat("Median", "median", d.Median())
			stat("Std", "std", d.Std)
			for _, p := range pcts {
				stat("P"+strconv.FormatFloat(p, 'f', -1, 64), percentileKey(p), d.Percentile(p))
			}
		}
		b.WriteString(strings.Repeat("=", 50))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
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
	pcts := opts.Percentiles
	if len(pcts) == 0 {
		pcts = DefaultPercentiles
	}
	out := make([]orderedJSON, 0, len(sums))
	for _, s := range sums {
		rep := decodeReported(s)
		o := orderedJSON{}
		o.add("run", s.Run.Name)
		o.add("source", s.Run.Source)
		o.add("requests", s.Requests)
		o.add("completed", s.Completed)
		o.add("failed", s.Failed)
		if s.DurationSec > 0 {
			o.add("duration", s.DurationSec)
			o.add("duration_basis", map[bool]string{true: "measured", false: "reported"}[s.DurationMeasured])
			o.add("request_throughput", s.RequestThroughput)
			o.add("input_throughput", s.InputThroughput)
			o.add("output_throughput", s.OutputThroughput)
			o.add("total_token_throughput", s.TotalTokenThroughput)
		}
		o.add("total_input_tokens", s.TotalInputTokens)
		o.add("total_output_tokens", s.TotalOutputTokens)
		for _, m := range statMetrics {
			d := m.dist(s)
			if d.N() > 0 {
				o.add(m.key+"_basis", "per_request")
				o.add(m.key+"_count", d.N())
				o.add("mean_"+m.key+"_ms", d.Mean*1000)
				o.add("median_"+m.key+"_ms", d.Median()*1000)
				o.add("std_"+m.key+"_ms", d.Std*1000)
				for _, p := range pcts {
					o.add(percentileKey(p)+"_"+m.key+"_ms", d.Percentile(p)*1000)
				}
				continue
			}
			added := false
			for _, stat := range append([]string{"mean", "median", "std"}, pctKeys(pcts)...) {
				if v, ok := reportedValue(rep, stat, m.key); ok {
					if !added {
						o.add(m.key+"_basis", "reported")
						added = true
					}
					o.add(stat+"_"+m.key+"_ms", v)
				}
			}
		}
		out = append(out, o)
	}
	return json.MarshalIndent(out, "", "  ")
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
