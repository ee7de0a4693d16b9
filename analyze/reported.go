package analyze

import (
	"math"
	"regexp"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// reportedKey matches a latency statistic of a benchmark's own summary in
// milliseconds: vLLM's "mean_ttft_ms", "p99.9_itl_ms", "median_e2el_ms",
// SGLang's "median_e2e_latency_ms" and LambdaLabs-era vLLM's
// "mean_latency_ms" (E2E).
var reportedKey = regexp.MustCompile(`^(mean|median|p[0-9]+(?:\.[0-9]+)?)_(ttft|tpot|itl|e2el|e2e_latency|latency)_ms$`)

// ReportedStats returns the latency statistics run's source reported in
// its own summary (trace.Run.Reported), by metric ("ttft", "tpot", "itl",
// "e2el") and statistic ("mean", "p50", "p99", … as Compare names them;
// "median" is "p50"), in seconds. Values that are not finite and ≥ 0 are
// left out; nil when the run reported none. A summary-only run (e.g. an
// old SGLang bench_serving line) has nothing else to compare. Other
// sources' summaries are read through ReportedFields.
func ReportedStats(run trace.Run) map[string]map[string]float64 {
	rep := ReportedFields(run)
	var out map[string]map[string]float64
	for k, v := range rep {
		m := reportedKey.FindStringSubmatch(k)
		f, ok := v.(float64)
		if m == nil || !ok || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
			continue
		}
		stat, metric := m[1], m[2]
		switch metric {
		case "e2e_latency", "latency":
			metric = "e2el"
		}
		if stat == "median" {
			stat = "p50"
		} else if p, ok := reportedPercentile(stat); ok {
			stat = percentileName(p) // "p50.0" and "p50" are one statistic
		} else if stat != "mean" {
			continue
		}
		if out == nil {
			out = map[string]map[string]float64{}
		}
		if out[metric] == nil {
			out[metric] = map[string]float64{}
		}
		out[metric][stat] = f / 1000
	}
	return out
}

// reportedPercentile reads "p99.9" as 99.9.
func reportedPercentile(stat string) (float64, bool) {
	if len(stat) < 2 || stat[0] != 'p' {
		return 0, false
	}
	p, err := strconv.ParseFloat(stat[1:], 64)
	return p, err == nil && p >= 0 && p <= 100
}

// percentileName names percentile p as Compare's statistics do: "p50",
// "p99.9".
func percentileName(p float64) string { return "p" + strconv.FormatFloat(p, 'f', -1, 64) }
