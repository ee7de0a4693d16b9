package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/termsafe"
	"github.com/opaltrace/opaltrace/trace"
)

// A row is one entry of the table model of a summary: a line of the text
// block, a key of the JSON object and a cell of the HTML tables, so that
// the three show the same values, built once (as x/perf's benchtab builds
// the table that texttab renders).
type row struct {
	kind  rowKind
	label string // text label ("Mean TTFT (ms):"), header title or line; "" for a row the text does not show
	key   string // JSON key ("mean_ttft_ms"); "" for a row the JSON does not have
	value any    // int, int64, float64 (in unit), string, bool, orderedJSON or nil
	unit  string // of value: "ms", "s", "req/s", "tok/s" or "" (counts, names)
	fixed bool   // text prints the value with two decimals
	shown string // text only: the value as printed, when not value itself
	note  string // text only: printed after the value in parentheses
	fill  byte   // header: '=' or '-'
}

type rowKind int

const (
	rowValue  rowKind = iota
	rowHeader         // a centred title line of the text (fill characters around label)
	rowLine           // a line of text as it is
)

// A table is the rows of one summary, in text order; the JSON object has
// the keys in the same order.
type table []row

func (t *table) add(r row) { *t = append(*t, r) }
func (t *table) header(title string, fill byte) {
	t.add(row{kind: rowHeader, label: title, fill: fill})
}
func (t *table) line(s string)                 { t.add(row{kind: rowLine, label: s}) }
func (t *table) both(label, key string, v any) { t.add(row{label: label, key: key, value: v}) }
func (t *table) json(key string, v any)        { t.add(row{key: key, value: v}) }
func (t *table) text(label string, v any)      { t.add(row{label: label, value: v}) }
func (t *table) fixed(label, key, unit string, v any) {
	t.add(row{label: label, key: key, value: v, unit: unit, fixed: true})
}

// lookup returns the value of key, and whether the table has it.
func (t table) lookup(key string) (any, bool) {
	for _, r := range t {
		if r.key == key {
			return r.value, true
		}
	}
	return nil, false
}

// float returns the number under key, 0 when absent.
func (t table) float(key string) float64 {
	v, _ := t.lookup(key)
	f, _ := toFloat(v)
	return f
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// writeText renders the rows as the vLLM-style text block: labels padded
// to 40 columns, values to 10.
func (t table) writeText(b *strings.Builder) {
	for _, r := range t {
		switch {
		case r.kind == rowHeader:
			fmt.Fprintf(b, "%s\n", center(r.label, 50, r.fill))
			continue
		case r.kind == rowLine:
			b.WriteString(r.label)
			b.WriteByte('\n')
			continue
		case r.label == "":
			continue
		}
		var v any = r.value
		if r.shown != "" {
			v = r.shown
		}
		if s, ok := v.(string); ok {
			v = termsafe.String(s) // names and ids from the input: no terminal escapes
		}
		if f, ok := toFloat(v); ok && r.fixed {
			fmt.Fprintf(b, "%-40s %-10.2f", r.label, f)
		} else {
			fmt.Fprintf(b, "%-40s %-10v", r.label, v)
		}
		if r.note != "" {
			fmt.Fprintf(b, " (%s)", r.note)
		}
		b.WriteByte('\n')
	}
}

// addJSON adds the rows that have a key to o, in order.
func (t table) addJSON(o *orderedJSON) {
	for _, r := range t {
		if r.kind == rowValue && r.key != "" {
			o.add(r.key, r.value)
		}
	}
}

// summaryTable is the table model of a summary's block with percentiles
// pcts. Every number stats, stats --json and the HTML report show of a
// summary comes from here. Where the data has no per-request value for a
// metric (a summary-only file, or E2E in files that never saved it) the
// source's own value is shown and marked "reported by source".
func summaryTable(s *analyze.Summary, pcts []float64) table {
	rep := decodeReported(s)
	var t table
	t.header(" Serving Benchmark Result ", '=')
	if s.Label != "" && s.Label != s.Run.Name {
		// A file of several runs (a sweep): its runs' names are file#N,
		// so the text also says what the run was (rate=4), and the JSON
		// keeps it apart from the name the selectors take.
		t.add(row{label: "Run:", key: "run", value: s.Run.Name, note: s.Label})
		t.json("label", s.Label)
	} else {
		t.both("Run:", "run", s.Run.Name)
	}
	if s.Run.Stage != "" {
		t.both("Stage:", "stage", s.Run.Stage)
	}
	if s.Run.Source != "" {
		t.both("Source:", "source", s.Run.Source)
	} else {
		t.json("source", s.Run.Source)
	}
	if s.Run.Model != "" {
		t.both("Model:", "model", s.Run.Model)
	}
	// A simulated run names the deployment it replayed on (package
	// deploy: model on GPU×count, parallelism, engine, workers).
	if d := s.Run.Extra["deployment"]; d != "" {
		t.both("Deployment:", "deployment", d)
	} else if r := s.Run; r.Hardware != "" || r.TP > 1 || r.PP > 1 || r.DP > 1 {
		// A measured run names the deployment its source or ingest
		// recorded, as the report's header does: what replay and
		// calibrate will replay it on.
		t.both("Deployment:", "deployment", deploymentOf(r))
	}
	// An autoscaled replay's fleet: its GPU-hours and ready workers,
	// and each pool's with disaggregation, a line each.
	if f := s.Run.Extra["fleet"]; f != "" {
		lines := strings.Split(f, "\n")
		t.add(row{label: "Fleet:", key: "fleet", value: f, shown: lines[0]})
		for _, l := range lines[1:] {
			t.line("  " + l)
		}
		if h, err := strconv.ParseFloat(s.Run.Extra["gpu_hours"], 64); err == nil {
			t.json("gpu_hours", h)
		}
	}
	if s.Passes > 0 {
		t.line(fmt.Sprintf("Exact summary in %s over the file.", passes(s.Passes)))
		t.json("passes", s.Passes)
	}
	t.json("requests", s.Requests)
	// A run of a summary-only file: the text shows what the source
	// reported; the JSON keeps its per-request keys (all zero).
	perRequest := s.Requests > 0 || len(rep) == 0
	label := func(l string) string {
		if perRequest {
			return l
		}
		return ""
	}
	if !perRequest {
		t.line("No per-request data: every value below is reported by source.")
		// vLLM's labels and number formats: counts as integers, the
		// rest with two decimals.
		for _, k := range []struct {
			key, label string
			count      bool
		}{
			{"completed", "Successful requests:", true}, {"failed", "Failed requests:", true},
			{"duration", "Benchmark duration (s):", false},
			{"total_input_tokens", "Total input tokens:", true}, {"total_output_tokens", "Total generated tokens:", true},
			{"request_throughput", "Request throughput (req/s):", false}, {"output_throughput", "Output token throughput (tok/s):", false},
			{"total_token_throughput", "Total Token throughput (tok/s):", false},
			{"max_output_tokens_per_s", "Peak output token throughput (tok/s):", false}, {"max_concurrent_requests", "Peak concurrent requests:", false},
		} {
			v, ok := rep[k.key]
			if !ok {
				continue
			}
			// The JSON keeps vLLM's keys for what the per-request data
			// gives (0 here) and the source's figure as reported_KEY,
			// so that a script reading "completed" is not handed the
			// source's count as if it were recomputed.
			if f, isNum := v.(float64); isNum && k.count && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				t.text(k.label, int64(f))
				t.json("reported_"+k.key, int64(f))
				continue
			}
			t.add(row{label: k.label, value: v, fixed: true})
			t.json("reported_"+k.key, v)
		}
	}
	t.both(label("Successful requests:"), "completed", s.Completed)
	t.both(label("Failed requests:"), "failed", s.Failed)
	// Break failures down when any is other than "failed".
	split := false
	for _, c := range s.ByStatus {
		split = split || (c.Status != trace.StatusOK && c.Status != trace.StatusFailed)
	}
	for _, c := range s.ByStatus {
		if split && c.Status != trace.StatusOK {
			t.text(label("  "+string(c.Status)+":"), c.N)
		}
	}
	if len(s.ByStatus) > 0 {
		st := orderedJSON{}
		for _, c := range s.ByStatus {
			st.add(string(c.Status), c.N)
		}
		t.json("status_counts", st)
	}
	if s.DurationSec > 0 {
		basis, note := "reported", "reported by source"
		switch {
		case s.Trim != nil:
			basis, note = "trimmed", "trimmed window"
		case s.DurationMeasured:
			basis, note = "measured", "measured: first arrival to last end"
		}
		t.add(row{label: label("Benchmark duration (s):"), key: "duration", value: s.DurationSec, unit: "s", fixed: true, note: note})
		t.json("duration_basis", basis)
	}
	t.both(label("Total input tokens:"), "total_input_tokens", s.TotalInputTokens)
	t.both(label("Total generated tokens:"), "total_output_tokens", s.TotalOutputTokens)
	if s.DurationSec > 0 {
		t.fixed(label("Request throughput (req/s):"), "request_throughput", "req/s", s.RequestThroughput)
	}
	if g := s.Goodput; g != nil {
		t.json("goodput_slo", g.SLO.String())
		switch {
		case g.Missing != "":
			t.add(row{label: label("Request goodput (req/s):"), key: "request_goodput", value: nil, unit: "req/s", shown: "not computed: " + g.Missing})
			t.json("goodput_missing", g.Missing)
		default:
			t.json("good_requests", g.Good)
			l := ""
			if s.DurationSec > 0 {
				l = label("Request goodput (req/s):")
			}
			t.add(row{label: l, key: "request_goodput", value: g.Throughput, unit: "req/s", fixed: true,
				note: fmt.Sprintf("%d good of %d, SLO %s", g.Good, s.Completed, g.SLO)})
		}
	}
	if s.DurationSec > 0 {
		t.json("input_throughput", s.InputThroughput)
		t.fixed(label("Output token throughput (tok/s):"), "output_throughput", "tok/s", s.OutputThroughput)
	}
	if p := s.Peak; p != nil {
		if p.TokensMissing == "" {
			t.fixed(label("Peak output token throughput (tok/s):"), "max_output_tokens_per_s", "tok/s", p.OutputTokensPerSec)
		} else {
			t.json("max_output_tokens_per_s_missing", p.TokensMissing)
		}
		t.fixed(label("Peak concurrent requests:"), "max_concurrent_requests", "", p.ConcurrentRequests)
	} else if s.Requests > 0 {
		t.json("peak_missing", s.PeakMissing)
	}
	if s.DurationSec > 0 {
		t.fixed(label("Total Token throughput (tok/s):"), "total_token_throughput", "tok/s", s.TotalTokenThroughput)
	}
	for _, m := range statMetrics {
		metricRows(&t, s, m, rep, pcts)
	}
	if sem := s.Semantics; sem != (analyze.Semantics{}) || s.TokensPerChunk > 0 {
		t.header("Semantics", '-')
		for _, kv := range [][2]string{{"ITL unit:", sem.ITLUnit}, {"E2E basis:", sem.E2EBasis}, {"TTFT basis:", sem.TTFTBasis}, {"Output tokens:", sem.OutputTokens}} {
			if v := kv[1]; v != "" {
				if strings.Contains(v, ",") {
					v = "mixed (" + v + ")"
				}
				t.text(kv[0], v)
			}
		}
		if sem != (analyze.Semantics{}) {
			sj := orderedJSON{}
			sj.add("itl_unit", sem.ITLUnit)
			sj.add("e2e_basis", sem.E2EBasis)
			sj.add("ttft_basis", sem.TTFTBasis)
			sj.add("output_tokens_source", sem.OutputTokens)
			sj.add("mixed", sem.Mixed)
			t.json("semantics", sj)
		}
		if s.TokensPerChunk > 0 {
			t.fixed("Mean tokens per chunk:", "mean_tokens_per_chunk", "", s.TokensPerChunk)
		}
	}
	t.header("", '=')
	return t
}

// metricRows adds one latency metric's rows: count, mean, median, std and
// percentiles in ms, from the data, or as the source reported them.
func metricRows(t *table, s *analyze.Summary, m statMetric, rep map[string]any, pcts []float64) {
	d := m.dist(s)
	if d.N() > 0 {
		t.header(m.header, '-')
		t.json(m.key+"_basis", "per_request")
		t.json(m.key+"_count", d.N())
		stat := func(name, key string, v float64) {
			t.fixed(name+" "+m.title+" (ms):", key+"_"+m.key+"_ms", "ms", v*1000)
		}
		stat("Mean", "mean", d.Mean)
		stat("Median", "median", d.Median())
		stat("Std", "std", d.Std)
		for _, p := range pcts {
			stat("P"+strconv.FormatFloat(p, 'f', -1, 64), percentileKey(p), d.Percentile(p))
		}
		return
	}
	// The text shows the reported block when it has a mean or a median.
	_, mean := reportedValue(rep, "mean", m.key)
	_, median := reportedValue(rep, "median", m.key)
	shown := mean || median
	if shown {
		t.header(m.header+" (reported by source)", '-')
	}
	names := append([]string{"Mean", "Median", "Std"}, pctNames(pcts)...)
	added := false
	for i, stat := range append([]string{"mean", "median", "std"}, pctKeys(pcts)...) {
		v, ok := reportedValue(rep, stat, m.key)
		if !ok {
			continue
		}
		if !added {
			t.json(m.key+"_basis", "reported")
			added = true
		}
		label := ""
		if shown {
			label = names[i] + " " + m.title + " (ms):"
		}
		t.fixed(label, stat+"_"+m.key+"_ms", "ms", v)
	}
}

func pctNames(pcts []float64) []string {
	names := make([]string, len(pcts))
	for i, p := range pcts {
		names[i] = "P" + strconv.FormatFloat(p, 'f', -1, 64)
	}
	return names
}

// secondsTable is the table model of a run's per-second file.
func secondsTable(s *analyze.SecondsSummary) table {
	var t table
	t.line("")
	t.header(" Per second (replay's --per-second file) ", '-')
	t.both("Seconds:", "seconds", s.Seconds)
	mm := func(label, key string, v analyze.MeanMax, unit string) {
		t.fixed("Mean "+label, "mean_"+key, unit, v.Mean)
		t.fixed("Peak "+label, "max_"+key, unit, v.Max)
	}
	mm("running requests:", "running", s.Running, "")
	mm("waiting requests:", "waiting", s.Waiting, "")
	t.add(row{label: "Mean busy workers (%):", key: "mean_busy", value: s.Busy.Mean, fixed: true, shown: pct(s.Busy.Mean)})
	t.add(row{label: "Peak busy workers (%):", key: "max_busy", value: s.Busy.Max, fixed: true, shown: pct(s.Busy.Max)})
	if s.KVKnown {
		t.add(row{label: "Mean KV cache usage (%):", key: "mean_kv_usage", value: s.KVUsage.Mean, fixed: true, shown: pct(s.KVUsage.Mean)})
		t.add(row{label: "Peak KV cache usage (%):", key: "max_kv_usage", value: s.KVUsage.Max, fixed: true, shown: pct(s.KVUsage.Max)})
	} else {
		t.add(row{label: "KV cache usage:", key: "kv_usage_missing", value: "the file records no KV capacity"})
	}
	t.fixed("Tokens per step:", "tokens_per_step", "", s.TokensPerStep)
	t.both("Steps:", "steps", s.Steps)
	t.both("Preemptions:", "preemptions", s.Preemptions)
	t.both("Timed out:", "timed_out", s.TimedOut)
	t.both("Rejected:", "rejected", s.Rejected)
	if x := s.Tiers; x != nil {
		pmm := func(label, key string, v analyze.MeanMax) {
			t.add(row{label: "Mean " + label + " (%):", key: "mean_" + key, value: v.Mean, fixed: true, shown: pct(v.Mean)})
			t.add(row{label: "Peak " + label + " (%):", key: "max_" + key, value: v.Max, fixed: true, shown: pct(v.Max)})
		}
		for _, u := range []struct {
			has        bool
			label, key string
			v          analyze.MeanMax
		}{{x.HasHost, "host tier usage", "host_tier_usage", x.HostUsage}, {x.HasDisk, "storage tier usage", "storage_tier_usage", x.DiskUsage},
			{x.HasRemote, "remote tier usage", "remote_tier_usage", x.RemoteUsage}} {
			if u.has {
				pmm(u.label, u.key, u.v)
			}
		}
		pmm("PCIe H2D utilisation", "pcie_h2d_util", x.PCIeH2D)
		pmm("PCIe D2H utilisation", "pcie_d2h_util", x.PCIeD2H)
		pmm("host memory utilisation", "host_mem_util", x.HostMem)
		pmm("NVMe utilisation", "nvme_util", x.NVMe)
		pmm("NIC utilisation", "nic_util", x.NIC)
		t.both("Offloaded (bytes):", "offload_bytes", x.OffloadBytes)
		t.both("Loaded (bytes):", "load_bytes", x.LoadBytes)
		t.both("Prefetched (bytes):", "prefetch_bytes", x.PrefetchBytes)
	}
	return t
}

// pct prints a fraction as a percentage with two decimals.
func pct(f float64) string { return fmt.Sprintf("%.2f", f*100) }
