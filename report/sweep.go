package report

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// A sweepRun is one run of a sweep: its load and the table values the
// sweep charts plot (ms; NaN when neither the data nor the source has
// them).
type sweepRun struct {
	rate, achieved float64 // offered (NaN when not recorded or infinite) and achieved req/s
	outTokPerSec   float64 // output tok/s, NaN when unknown
	gpus           int
	values         map[string]float64 // "median_ttft_ms", "p99_ttft_ms", …, "median_tpot_ms"
}

// A sweepLine is the runs of one configuration of one dataset: a
// deployment (as recorded) under one workload shape, so that runs which
// differ only in load are drawn as one line and different
// configurations are never pooled into one curve.
type sweepLine struct {
	name string
	runs []sweepRun
}

// sweepMetrics are the latency charts of a sweep.
var sweepMetrics = []struct{ id, title, key string }{
	{"ttft", "TTFT", "ttft"}, {"itl", "ITL", "itl"}, {"e2e", "E2E", "e2el"},
}

// configKey names a run's configuration: its deployment and workload
// shape without the load (rate, concurrency, prompts).
func configKey(r trace.Run) string {
	k := deploymentOf(r)
	if w := r.Workload; w != nil {
		k += fmt.Sprintf(" · %s in %d out %d", w.Dataset, w.InputLen, w.OutputLen)
	}
	return k
}

// sweepLines groups each dataset's runs by configuration, keeping the
// lines with at least two runs at different loads.
func sweepLines(sets []reportSet) []sweepLine {
	var lines []sweepLine
	for _, s := range sets {
		if len(s.sums) < 2 {
			continue
		}
		var keys []string
		by := map[string][]sweepRun{}
		for _, sum := range s.sums {
			k := configKey(sum.Run)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], newSweepRun(sum))
		}
		for _, k := range keys {
			runs := by[k]
			if len(runs) < 2 {
				continue
			}
			name := s.name
			if len(keys) > 1 {
				name += " · " + k
			}
			lines = append(lines, sweepLine{name: safeLabel(name), runs: runs})
		}
	}
	return lines
}

func newSweepRun(s *analyze.Summary) sweepRun {
	t := summaryTable(s, htmlPercentiles)
	rep := decodeReported(s)
	perRequest := s.Requests > 0 || len(rep) == 0
	num := func(key string) float64 {
		if perRequest {
			if _, ok := t.lookup(key); ok {
				return t.float(key)
			}
			return math.NaN()
		}
		if f, ok := rep[key].(float64); ok {
			return f
		}
		return math.NaN()
	}
	sr := sweepRun{rate: math.NaN(), achieved: num("request_throughput"), outTokPerSec: num("output_throughput"),
		gpus: gpuCount(s.Run), values: map[string]float64{}}
	if w := s.Run.Workload; w != nil && w.RequestRate > 0 && !math.IsInf(float64(w.RequestRate), 1) {
		sr.rate = float64(w.RequestRate)
	}
	for _, m := range []string{"ttft", "itl", "e2el", "tpot"} {
		for _, st := range []string{"median", "p99"} {
			key := st + "_" + m + "_ms"
			v := math.NaN()
			if _, ok := t.lookup(key); ok {
				v = t.float(key) // per request, or reported by source when the data has none
			}
			sr.values[key] = v
		}
	}
	return sr
}

var (
	deploymentGPUs = regexp.MustCompile(`on (\d+)×`)
	deploymentWork = regexp.MustCompile(`(\d+) workers?$`)
	hardwareCount  = regexp.MustCompile(`^(\d+)\s*[x×]`)
)

// gpuCount is the GPUs a run used: a replay's deployment header ("… on
// 4×h200 …, 2 workers": 8), a hardware string with a count ("4xH200"),
// else TP × PP × DP.
func gpuCount(r trace.Run) int {
	if d := r.Extra["deployment"]; d != "" {
		if m := deploymentGPUs.FindStringSubmatch(d); m != nil {
			g, _ := strconv.Atoi(m[1])
			w := 1
			if m := deploymentWork.FindStringSubmatch(d); m != nil {
				w, _ = strconv.Atoi(m[1])
			}
			return max(1, g*w)
		}
	}
	if m := hardwareCount.FindStringSubmatch(r.Hardware); m != nil {
		g, _ := strconv.Atoi(m[1])
		return max(1, g)
	}
	return max(1, r.TP) * max(1, r.PP) * max(1, r.DP)
}

// sweepSection draws, per configuration with several runs, median and
// p99 latency against the load (the offered rate when every run of the
// sweep records a finite one, else the achieved request throughput), and
// a Pareto view: output tokens/s per user (1000 / median TPOT) against
// output tokens/s per GPU.
func sweepSection(sets []reportSet, _ HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "sweep", Title: "Sweeps"}
	lines := sweepLines(sets)
	if len(lines) == 0 {
		return sec, nil
	}
	offered := true
	for _, l := range lines {
		for _, r := range l.runs {
			offered = offered && !math.IsNaN(r.rate)
		}
	}
	xName, xOf := "achieved request throughput (req/s)", func(r sweepRun) float64 { return r.achieved }
	if offered {
		xName, xOf = "request rate (req/s, offered)", func(r sweepRun) float64 { return r.rate }
	}
	sec.Intro = "One line per configuration (deployment and workload shape) and dataset; runs differing only in load " +
		"are its points, configurations are never pooled. Solid: median; dashed: p99. Values the source reported " +
		"(summary-only runs) are plotted as reported."
	for _, m := range sweepMetrics {
		var ss []series
		for _, l := range lines {
			for _, st := range []string{"median", "p99"} {
				var pts []point
				for _, r := range l.runs {
					x, y := xOf(r), r.values[st+"_"+m.key+"_ms"]
					if !math.IsNaN(x) && !math.IsNaN(y) {
						pts = append(pts, point{x, y})
					}
				}
				if len(pts) == 0 {
					continue
				}
				slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.MS, b.MS) })
				ss = append(ss, series{Name: l.name + " " + st, Data: pts, Dashed: st == "p99", Symbol: true})
			}
		}
		if len(ss) == 0 {
			sec.Notes = append(sec.Notes, fmt.Sprintf("No %s values in the sweep's runs.", m.title))
			continue
		}
		v, err := chart{ID: "sweep-" + m.id, Title: m.title + " against load", X: axis{Name: xName}, Y: axis{Name: m.title + " (ms)", Min: 0}, Series: ss}.view()
		if err != nil {
			return sec, err
		}
		sec.Charts = append(sec.Charts, v)
	}
	var ss []series
	for _, l := range lines {
		var pts []point
		for _, r := range l.runs {
			tpot := r.values["median_tpot_ms"]
			if math.IsNaN(r.outTokPerSec) || math.IsNaN(tpot) || tpot <= 0 {
				continue
			}
			pts = append(pts, point{r.outTokPerSec / float64(r.gpus), 1000 / tpot})
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.MS, b.MS) })
		ss = append(ss, series{Name: l.name, Data: pts, Symbol: true})
	}
	if len(ss) == 0 {
		sec.Notes = append(sec.Notes, "No Pareto view: the sweep's runs lack output throughput or TPOT.")
		return sec, nil
	}
	v, err := chart{ID: "sweep-pareto", Title: "Pareto: per-user speed against per-GPU throughput",
		X: axis{Name: "output tokens/s per GPU"}, Y: axis{Name: "output tokens/s per user (1000 / median TPOT)"}, Series: ss}.view()
	if err != nil {
		return sec, err
	}
	sec.Charts = append(sec.Charts, v)
	return sec, nil
}
