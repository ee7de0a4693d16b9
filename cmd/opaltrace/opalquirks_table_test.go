package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

var opalQuirksTable = flag.Bool("opalquirks", false, "replay the first 1,000 Mooncake conversation requests on Opal's reference deployment with Opal's quirks switched off one by one, and write testdata/opal_quirks_mooncake.md and README.md's table")

// opalReferenceConfig writes, in dir, the Opal config of opal-notes.md's
// reference runs: Opal's shipped defaults on 4 workers with a CPU tier of
// 8 GiB and an NVMe tier of 1 TiB, MaxPrefix routing, replaying the first
// n Mooncake conversation requests. It returns its path.
func opalReferenceConfig(t *testing.T, dir string, n int) string {
	t.Helper()
	data, err := os.ReadFile(shareddata.Path(t, "formats/opal/defaults/sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["simulation"].(map[string]any)["num_workers"] = 4
	cfg["kvc"].(map[string]any)["kvc_tiers"] = []string{"CPUMemory", "LocalNVMe"}
	cfg["workload"] = map[string]any{"stages": []any{map[string]any{"type": "trace", "workload_params": map[string]any{
		"total_requests": n, "chunk_size": 512, "multiplier_to_sec": 0.001,
		"trace_file": shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"),
	}}}}
	out, err := json.MarshalIndent(cfg, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sim_config.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A quirkRow is one replay of the quirk table: which quirks were off,
// and Opal's figures of it.
type quirkRow struct {
	what             string
	ttft, tpot       [3]float64 // mean, median, p99, ms
	hit              float64    // prompt tokens from the KV tiers / prompt tokens
	preemptions      int64
	duration         float64 // s
	completed, total int
}

// quirkRowOf computes Opal's printed figures from a replay's records:
// TTFT and, per request, the mean decode gap (Opal's TPOT), as mean,
// median and p99 with numpy's linear interpolation.
func quirkRowOf(what string, recs []*trace.Request, duration float64, total int) quirkRow {
	var ttft, tpot []float64
	var hit, prompt, pre int64
	for _, r := range recs {
		if r.Status != trace.StatusOK {
			continue
		}
		ttft = append(ttft, r.TTFTSec.V*1000)
		if len(r.ITLSec) > 0 {
			var s float64
			for _, g := range r.ITLSec {
				s += g
			}
			tpot = append(tpot, s/float64(len(r.ITLSec))*1000)
		}
		hit += r.CachedTokens.V
		prompt += r.InputTokens.V
		pre += r.Preemptions.V
	}
	return quirkRow{what: what, ttft: meanMedianP99(ttft), tpot: meanMedianP99(tpot),
		hit: float64(hit) / float64(prompt), preemptions: pre, duration: duration, completed: len(ttft), total: total}
}

func meanMedianP99(v []float64) [3]float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	pct := func(p float64) float64 {
		h := p / 100 * float64(len(s)-1)
		i := int(math.Floor(h))
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (h-float64(i))*(s[i+1]-s[i])
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	return [3]float64{sum / float64(len(s)), pct(50), pct(99)}
}

// replayQuirkRow runs `opaltrace replay --opal-config cfg` with args and
// returns its row.
func replayQuirkRow(t *testing.T, what, cfg, out string, n int, args ...string) quirkRow {
	t.Helper()
	argv := append([]string{"replay", "--opal-config", cfg, "-o", out}, args...)
	if _, stderr, err := opaltrace(t, argv...); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr)
	}
	runs, recs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var dur float64
	if len(runs) == 1 {
		dur = runs[0].DurationSec.V
	}
	if dur == 0 { // opaltrace's replay: from the first arrival to the last completion
		var first, last float64 = math.Inf(1), 0
		for _, r := range recs {
			a := r.Arrival.V.Seconds()
			first = min(first, a)
			last = max(last, a+r.E2ESec.V)
		}
		dur = last - first
	}
	return quirkRowOf(what, recs, dur, n)
}

// TestOpalQuirkTable replays the first 1,000 Mooncake conversation
// requests on Opal's reference deployment (opal-notes.md) as Opal computes
// them, then with its quirks switched off one more at a time, in
// OpalQuirkNames' order, then with opaltrace's own replay of the same
// Opal config, and checks the table against
// testdata/opal_quirks_mooncake.md and README.md's opal-quirks section
// (-opalquirks rewrites both; -update only the former). A second table
// switches each quirk off alone. The 10,000-request runs are left out:
// ten of them would add about a minute to every test run.
func TestOpalQuirkTable(t *testing.T) {
	const n = 1000
	dir := t.TempDir()
	cfg := opalReferenceConfig(t, dir, n)
	out := filepath.Join(dir, "out.parquet")
	var cumulative, alone []quirkRow
	cumulative = append(cumulative, replayQuirkRow(t, "Opal: all quirks on", cfg, out, n, "--opal-compat"))
	var off []string
	for _, q := range replay.OpalQuirkNames {
		off = append(off, "--opal-quirk", q+"=off")
		cumulative = append(cumulative, replayQuirkRow(t, "− "+q, cfg, out, n, append([]string{"--opal-compat"}, off...)...))
		alone = append(alone, replayQuirkRow(t, q+" off", cfg, out, n, "--opal-compat", "--opal-quirk", q+"=off"))
	}
	cumulative = append(cumulative, replayQuirkRow(t, "opaltrace's own replay", cfg, out, n))

	var b strings.Builder
	b.WriteString("The first 1,000 Mooncake conversation requests on Opal's reference deployment (opal-notes.md: granite-3.3-8b\n")
	b.WriteString("on 4 H100 workers, a = 4, b = 24, CPU 8 GiB + NVMe 1 TiB tiers, MaxPrefix). First row: `--opal-compat`, which\n")
	b.WriteString("gives Opal's own figures; each next row switches one more quirk off (`--opal-quirk NAME=off`, cumulative);\n")
	b.WriteString("the last row is `replay --opal-config` with opaltrace's own semantics (vLLM's scheduler, its roofline, LMCache\n")
	b.WriteString("tiers). TPOT is Opal's: each request's mean decode gap. Hit: prompt tokens from the KV tiers (or prefix\n")
	b.WriteString("cache) / prompt tokens. Regenerate: `go test ./cmd/opaltrace -run TestOpalQuirkTable -opalquirks`.\n\n")
	writeQuirkTable(&b, cumulative)
	b.WriteString("\nEach quirk switched off alone:\n\n")
	writeQuirkTable(&b, alone)
	table := b.String()
	t.Log("\n" + table)
	golden.CheckOrWrite(t, filepath.Join("testdata", "opal_quirks_mooncake.md"), []byte(table), *opalQuirksTable)
	checkOrWriteReadmeSection(t, "opal-quirks", table, *opalQuirksTable)
}

func writeQuirkTable(b *strings.Builder, rows []quirkRow) {
	b.WriteString("| replay | TTFT mean (ms) | TTFT median (ms) | TTFT p99 (ms) | TPOT mean (ms) | TPOT median (ms) | TPOT p99 (ms) | hit | preemptions | duration (s) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %.3f | %d | %.0f |\n",
			r.what, r.ttft[0], r.ttft[1], r.ttft[2], r.tpot[0], r.tpot[1], r.tpot[2], r.hit, r.preemptions, r.duration)
		if r.completed != r.total {
			fmt.Fprintf(b, "| (%d of %d requests completed) |||||||||\n", r.completed, r.total)
		}
	}
}

// checkOrWriteReadmeSection checks that README.md holds text between
// its <!-- NAME:begin --> and <!-- NAME:end --> markers, or writes it
// there.
func checkOrWriteReadmeSection(t *testing.T, name, text string, write bool) {
	t.Helper()
	path := filepath.Join("..", "..", "README.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	i := strings.Index(string(data), begin)
	j := strings.Index(string(data), end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q … %q section", path, strings.TrimSpace(begin), end)
	}
	i += len(begin)
	if write {
		if err := os.WriteFile(path, []byte(string(data[:i])+text+string(data[j:])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(data[i:j]) != text {
		t.Errorf("%s: the %s table differs from the replays (rerun with -%s to accept)", path, name, strings.ReplaceAll(name, "-", ""))
	}
}
