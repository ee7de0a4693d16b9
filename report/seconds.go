package report

import (
	"fmt"
	"math"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// maxSecondsPoints caps the points of a per-second series: longer runs
// are drawn as means over buckets of several seconds, which the chart's
// title says.
const maxSecondsPoints = 2000

// timeSection draws per-second series: from every dataset's own request
// times, arrivals, completions and running requests; from a replay's
// per-second file, running and waiting requests, KV cache usage, busy
// workers and ready workers (the autoscaling plot), with a table per
// run.
func timeSection(sets []reportSet, o HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "time", Title: "Over time",
		Intro: "Per second of trace time. Arrivals, completions and running requests come from each dataset's " +
			"request times (running: requests active at some time in the second, as vLLM's benchmark counts them); " +
			"the rest from the replay's per-second file when one is given (time-weighted means over each second)."}
	for _, ch := range []struct {
		id, title, y string
		of           func(*RequestSeconds) []int64
	}{
		{"time-arrivals", "Arrivals", "requests/s", func(s *RequestSeconds) []int64 { return s.Arrivals }},
		{"time-completions", "Completions", "requests/s", func(s *RequestSeconds) []int64 { return s.Completions }},
		{"time-running", "Running requests (client view)", "requests", func(s *RequestSeconds) []int64 { return s.Running }},
	} {
		var runs []secondsLine
		for _, s := range sets {
			if s.extras == nil || s.extras.Seconds == nil {
				continue
			}
			rs := s.extras.Seconds
			vals := ch.of(rs)
			line := secondsLine{name: s.name, start: float64(rs.Start), values: make([]float64, len(vals))}
			for i, v := range vals {
				line.values[i] = float64(v)
			}
			runs = append(runs, line)
		}
		if v, ok, err := secondsChart(ch.id, ch.title, ch.y, "trace time (s)", runs); err != nil {
			return sec, err
		} else if ok {
			sec.Charts = append(sec.Charts, v)
		}
	}
	for _, s := range sets {
		if s.extras != nil && s.extras.Seconds == nil && s.extras.Requests > 0 {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: no per-second series from requests (no arrival times, or a span over 30 days).", s.name))
		}
	}
	if len(o.Seconds) == 0 {
		return sec, nil
	}
	for _, r := range o.Seconds {
		s := analyze.SummarizeSeconds(r)
		tv := tableView{Caption: "Per second: " + safeLabel(r.Run), Head: []string{"statistic", "value"}}
		for _, c := range secondsTable(&s) {
			if c.kind != rowValue || c.label == "" {
				continue
			}
			val := c.shown
			if val == "" {
				if f, ok := toFloat(c.value); ok && c.fixed {
					val = fmt.Sprintf("%.2f", f)
				} else {
					val = fmt.Sprint(c.value)
				}
			}
			tv.Rows = append(tv.Rows, []cell{{V: c.label}, {V: val}})
		}
		sec.Tables = append(sec.Tables, tv)
	}
	for _, ch := range []struct {
		id, title, y string
		value        func(trace.SecondsRun, trace.Second) float64
		need         func(trace.SecondsRun) bool
	}{
		{"sec-workers", "Ready workers (autoscaling)", "workers", func(_ trace.SecondsRun, s trace.Second) float64 { return s.ReadyWorkers },
			func(r trace.SecondsRun) bool {
				return anySecond(r, func(s trace.Second) bool { return s.ReadyWorkers > 0 })
			}},
		{"sec-held", "Requests held at the gateway (scale to zero)", "requests", func(_ trace.SecondsRun, s trace.Second) float64 { return s.HeldAtGateway },
			func(r trace.SecondsRun) bool {
				return anySecond(r, func(s trace.Second) bool { return s.HeldAtGateway > 0 })
			}},
		{"sec-kv", "KV cache usage", "% of capacity", func(r trace.SecondsRun, s trace.Second) float64 { return 100 * r.KVUsage(s) },
			func(r trace.SecondsRun) bool { return r.KVBlocks > 0 }},
		{"sec-running", "Running requests", "requests", func(_ trace.SecondsRun, s trace.Second) float64 { return s.Running }, nil},
		{"sec-waiting", "Waiting requests", "requests", func(_ trace.SecondsRun, s trace.Second) float64 { return s.Waiting }, nil},
		{"sec-busy", "GPU busy", "% of the second, mean over workers", func(_ trace.SecondsRun, s trace.Second) float64 { return 100 * s.Busy }, nil},
	} {
		var runs []secondsLine
		for _, r := range o.Seconds {
			if ch.need != nil && !ch.need(r) || len(r.Seconds) == 0 {
				continue
			}
			// Seconds are contiguous from the first.
			line := secondsLine{name: safeLabel(r.Run), start: float64(r.Seconds[0].Second)}
			for _, s := range r.Seconds {
				line.values = append(line.values, ch.value(r, s))
			}
			runs = append(runs, line)
		}
		if v, ok, err := secondsChart(ch.id, ch.title, ch.y, "simulated time (s)", runs); err != nil {
			return sec, err
		} else if ok {
			sec.Charts = append(sec.Charts, v)
		}
	}
	if err := poolChart(&sec, o.Seconds); err != nil {
		return sec, err
	}
	if err := tierCharts(&sec, o.Seconds); err != nil {
		return sec, err
	}
	return sec, nil
}

// poolChart draws the ready workers of each pool of prefill/decode
// disaggregation, per run that had the pools: a line a pool.
func poolChart(sec *sectionView, runs []trace.SecondsRun) error {
	var lines []secondsLine
	for _, r := range runs {
		if len(r.Seconds) == 0 || !anySecond(r, func(s trace.Second) bool { return s.PrefillReadyWorkers > 0 }) {
			continue
		}
		prefill := secondsLine{name: safeLabel(r.Run) + " · prefill", start: float64(r.Seconds[0].Second)}
		decode := secondsLine{name: safeLabel(r.Run) + " · decode", start: prefill.start}
		for _, s := range r.Seconds {
			prefill.values = append(prefill.values, s.PrefillReadyWorkers)
			decode.values = append(decode.values, s.DecodeReadyWorkers)
		}
		lines = append(lines, prefill, decode)
	}
	v, ok, err := secondsChart("sec-pools", "Ready workers by pool (prefill/decode disaggregation)", "workers", "simulated time (s)", lines)
	if ok {
		sec.Charts = append(sec.Charts, v)
	}
	return err
}

// tierCharts draws the KV tiers below the GPU, when the replay had any:
// each tier's occupancy as a share of its capacity, and each class of
// link's utilisation, per run.
func tierCharts(sec *sectionView, runs []trace.SecondsRun) error {
	tiers := []struct {
		name string
		cap  func(trace.SecondsRun) int64
		used func(trace.Second) int64
	}{
		{"host memory", func(r trace.SecondsRun) int64 { return r.HostKVCapacity }, func(s trace.Second) int64 { return s.HostKVBytes }},
		{"local disk", func(r trace.SecondsRun) int64 { return r.DiskKVCapacity }, func(s trace.Second) int64 { return s.DiskKVBytes }},
		{"remote store", func(r trace.SecondsRun) int64 { return r.RemoteKVCapacity }, func(s trace.Second) int64 { return s.RemoteKVBytes }},
	}
	var occ []secondsLine
	for _, r := range runs {
		for _, tier := range tiers {
			c := tier.cap(r)
			if c <= 0 || len(r.Seconds) == 0 {
				continue
			}
			line := secondsLine{name: safeLabel(r.Run) + " " + tier.name, start: float64(r.Seconds[0].Second)}
			for _, s := range r.Seconds {
				line.values = append(line.values, 100*float64(tier.used(s))/float64(c))
			}
			occ = append(occ, line)
		}
	}
	if v, ok, err := secondsChart("sec-tiers", "KV tier occupancy", "% of the tier's capacity", "simulated time (s)", occ); err != nil {
		return err
	} else if ok {
		sec.Charts = append(sec.Charts, v)
	}
	links := []struct {
		name string
		util func(trace.Second) float64
	}{
		{"PCIe host→GPU", func(s trace.Second) float64 { return s.PCIeH2DUtil }},
		{"PCIe GPU→host", func(s trace.Second) float64 { return s.PCIeD2HUtil }},
		{"host memory", func(s trace.Second) float64 { return s.HostMemUtil }},
		{"NVMe", func(s trace.Second) float64 { return s.NVMeUtil }},
		{"NIC", func(s trace.Second) float64 { return s.NICUtil }},
	}
	var util []secondsLine
	for _, r := range runs {
		for _, l := range links {
			if len(r.Seconds) == 0 || !anySecond(r, func(s trace.Second) bool { return l.util(s) > 0 }) {
				continue
			}
			line := secondsLine{name: safeLabel(r.Run) + " " + l.name, start: float64(r.Seconds[0].Second)}
			for _, s := range r.Seconds {
				line.values = append(line.values, 100*l.util(s))
			}
			util = append(util, line)
		}
	}
	if v, ok, err := secondsChart("sec-links", "KV transfer link utilisation", "% of the links' bandwidth", "simulated time (s)", util); err != nil {
		return err
	} else if ok {
		sec.Charts = append(sec.Charts, v)
	}
	return nil
}

func anySecond(r trace.SecondsRun, f func(trace.Second) bool) bool {
	for _, s := range r.Seconds {
		if f(s) {
			return true
		}
	}
	return false
}

// A secondsLine is one series of consecutive seconds from start.
type secondsLine struct {
	name   string
	start  float64
	values []float64
}

// secondsChart draws lines of per-second values, as means over buckets of
// seconds when the longest has more than maxSecondsPoints.
func secondsChart(id, title, y, x string, lines []secondsLine) (chartView, bool, error) {
	if len(lines) == 0 {
		return chartView{}, false, nil
	}
	bucket := 1
	for _, l := range lines {
		bucket = max(bucket, int(math.Ceil(float64(len(l.values))/maxSecondsPoints)))
	}
	t := title + " per second"
	if bucket > 1 {
		t = fmt.Sprintf("%s (means over %d s)", title, bucket)
	}
	var ss []series
	for _, l := range lines {
		var pts []point
		for i := 0; i < len(l.values); i += bucket {
			part := l.values[i:min(i+bucket, len(l.values))]
			sum := 0.0
			for _, v := range part {
				sum += v
			}
			pts = append(pts, point{l.start + float64(i), sum / float64(len(part))})
		}
		ss = append(ss, series{Name: l.name, Data: pts})
	}
	v, err := chart{ID: id, Title: t, X: axis{Name: x}, Y: axis{Name: y, Min: 0}, Series: ss}.view()
	return v, err == nil, err
}
