package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

// TestReportByPassesEqualsInMemory: the HTML report of a file summarized
// by passes (as files of more than lowMemoryRequests requests are) is the
// in-memory report, byte for byte, for a file of one run and of several.
func TestReportByPassesEqualsInMemory(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.parquet")
	in := sampleSlice(t, dir, 300)
	if _, stderr, err := opaltrace(t, "replay", "-o", one, "--sample", "2500", "--sample-rate", "8", "--workers", "4", in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	two := filepath.Join(dir, "two.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", two, sampleSlice(t, dir, 200), writeTiny(t, dir)); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	for _, path := range []string{one, two} {
		mem, err := loadDataset("x="+path, ingest.Options{}, false, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		passes, err := reportByPasses("x", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		var a, b bytes.Buffer
		if err := report.WriteHTML(&a, []report.Dataset{{Name: mem.Name, Runs: mem.Runs, Requests: mem.Requests}}); err != nil {
			t.Fatal(err)
		}
		if err := report.WriteHTML(&b, []report.Dataset{passes}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: the report by passes differs from the one in memory (%d vs %d bytes)", path, b.Len(), a.Len())
		}
		if passes.Pooled.Passes == 0 {
			t.Errorf("%s: no passes made", path)
		}
	}
}

// --run picks the same runs when the summary is made by passes.
func TestStatsLowMemoryRunSelector(t *testing.T) {
	dir := t.TempDir()
	two := filepath.Join(dir, "two.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", two, sampleSlice(t, dir, 200), writeTiny(t, dir)); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	for _, sel := range []string{"1", "2"} {
		mem, stderr, err := opaltrace(t, "stats", "--run", sel, two)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		low, stderr, err := opaltrace(t, "stats", "--low-memory", "--run", sel, two)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if strings.Count(low, "Serving Benchmark Result") != 1 || !strings.Contains(low, "Exact summary in") || !strings.Contains(low, "Not computed by passes over the file: steady state") {
			t.Fatalf("--run %s by passes:\n%s", sel, low)
		}
		// The same block; the sections that need memory are not printed.
		block := strings.SplitAfter(mem, strings.Repeat("=", 50)+"\n")[0]
		lowBlock := strings.SplitAfter(low, strings.Repeat("=", 50)+"\n")[0]
		var kept []string
		for _, l := range strings.SplitAfter(lowBlock, "\n") {
			if !strings.HasPrefix(l, "Exact summary in") {
				kept = append(kept, l)
			}
		}
		if strings.Join(kept, "") != block {
			t.Errorf("--run %s: by passes\n%s\nin memory\n%s", sel, lowBlock, block)
		}
	}
}

// The replay's per-second file names its run and holds the KV capacity of
// all workers; stats and report read it and show the usage as a fraction.
func TestPerSecondFileReadByStatsAndReport(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	out, sec := filepath.Join(dir, "sim.parquet"), filepath.Join(dir, "sec.parquet")
	if _, stderr, err := opaltrace(t, "replay", "-o", out, "--per-second", sec, "--run-name", "r1", "--workers", "3", in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	runs, meta, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Run != "r1" || runs[0].KVBlocks <= 0 || runs[0].KVBlocks%3 != 0 || meta[trace.MetaReplayConfig] == "" {
		t.Fatalf("per-second runs %+v, metadata %v", runs, meta)
	}
	peak := 0.0
	for _, s := range runs[0].Seconds {
		peak = max(peak, runs[0].KVUsage(s))
	}
	if peak <= 0 || peak > 1 {
		t.Errorf("peak KV usage %v of capacity", peak)
	}
	for _, s := range runs[0].Seconds {
		if s.ReadyWorkers != 3 {
			t.Fatalf("second %d: %v ready workers, want the fixed fleet's 3", s.Second, s.ReadyWorkers)
		}
	}
	js, stderr, err := opaltrace(t, "stats", "--json", "--per-second", sec, out)
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, stderr)
	}
	var got []struct {
		Sec map[string]any `json:"per_second_file"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Sec["max_kv_usage"] != peak || got[0].Sec["seconds"] != float64(len(runs[0].Seconds)) {
		t.Errorf("stats --per-second: %v, want peak KV usage %v", got, peak)
	}
	html := filepath.Join(dir, "r.html")
	if _, stderr, err := opaltrace(t, "report", "--html", html, "--per-second", sec, out); err != nil {
		t.Fatalf("report: %v\n%s", err, stderr)
	}
	page, _ := os.ReadFile(html)
	for _, want := range []string{`id="sec-kv"`, `id="sec-running"`, `id="sec-workers"`, `<caption>Per second: r1</caption>`, "Peak KV cache usage (%):"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the report lacks %s", want)
		}
	}
	if _, _, err := opaltrace(t, "stats", "--per-second", out, out); err == nil {
		t.Error("a requests' file was read as a per-second file")
	}
	// -o names the page, as it names the other commands' outputs.
	short := filepath.Join(dir, "o.html")
	if _, stderr, err := opaltrace(t, "report", "-o", short, "--per-second", sec, out); err != nil {
		t.Fatalf("report -o: %v\n%s", err, stderr)
	}
	if b, _ := os.ReadFile(short); !bytes.Equal(b, page) {
		t.Error("report -o wrote another page than --html")
	}
}

// An autoscaled replay's per-second file records the ready workers of
// each second, as the autoscaler's fleet had them: the report's
// autoscaling plot.
func TestPerSecondReadyWorkersAutoscaled(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 600)
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte("workers: 6\nautoscale:\n  metric: queue_depth\n  target: 1\n  min_replicas: 1\n  max_replicas: 6\n  sync_period_s: 5\n  container_start_s: 5\n  weights_gb: 1\n  storage_gbps: 2\n  scale_down_stabilization_s: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, sec := filepath.Join(dir, "sim.parquet"), filepath.Join(dir, "sec.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", out, "--per-second", sec, in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	runs, _, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.Inf(1), 0.0
	for _, s := range runs[0].Seconds[:len(runs[0].Seconds)-1] { // the last second is partial
		lo, hi = min(lo, s.ReadyWorkers), max(hi, s.ReadyWorkers)
	}
	// stderr prints the same range from the autoscaler's fleet.
	want := fmt.Sprintf("ready workers per whole second %.2f to %.2f", lo, hi)
	if !strings.Contains(stderr, want) || lo < 1 || hi > 6 || lo == hi {
		t.Errorf("ready workers %v to %v; stderr:\n%s", lo, hi, stderr)
	}
}

// replay --metrics-out writes the run under vLLM's names; its TTFT
// histogram counts every completed simulated request, and promtool (when
// installed) backfills it.
func TestReplayMetricsOut(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	out, om := filepath.Join(dir, "sim.parquet"), filepath.Join(dir, "sim.om")
	if _, stderr, err := opaltrace(t, "replay", "-o", out, "--metrics-out", om, in); err == nil || !strings.Contains(err.Error()+stderr, "--metrics-start") {
		t.Fatalf("a run without a start time replayed to metrics: %v\n%s", err, stderr)
	}
	_, stderr, err := opaltrace(t, "replay", "-o", out, "--metrics-out", om, "--metrics-start", "2025-06-01T12:00:00Z", "--metrics-interval", "5s", in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(om)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	ds, err := loadDataset(out, ingest.Options{}, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range ds.Requests {
		if r.Status == trace.StatusOK {
			ok++
		}
	}
	// The last TTFT count line holds every completed request.
	lines := regexp.MustCompile(`(?m)^vllm:time_to_first_token_seconds_count\{[^}]*\} (\d+) (\S+)$`).FindAllStringSubmatch(text, -1)
	if len(lines) < 2 || lines[len(lines)-1][1] != strconv.Itoa(ok) {
		t.Fatalf("TTFT count samples %v, want the last at %d", len(lines), ok)
	}
	if first, _ := strconv.ParseFloat(lines[0][2], 64); first != 1748779205 { // 12:00:05
		t.Errorf("first sample at %v, want 2025-06-01T12:00:05Z", lines[0][2])
	}
	for _, want := range []string{"# TYPE vllm:num_requests_running gauge", "vllm:prefix_cache_queries_total{", "# EOF\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if msg, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, filepath.Join(dir, "tsdb")).CombinedOutput(); err != nil {
			t.Errorf("promtool: %v\n%s", err, msg)
		}
	}
}

// A fleet that scales to zero between two bursts holds the second
// burst's first requests at the gateway: stderr counts them, and the
// per-second file's gateway_held, summed over the seconds, is the
// records' waits (worker_arrival − router_arrival) summed.
func TestPerSecondHeldAtGateway(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../samples/mooncake/conversation_trace_first10min.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))[:60]
	var in bytes.Buffer
	for _, shift := range []int64{0, 900_000} { // the second burst 15 min later
		for _, l := range lines {
			var r map[string]any
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatal(err)
			}
			r["timestamp"] = r["timestamp"].(float64) + float64(shift)
			b, _ := json.Marshal(r)
			in.Write(append(b, '\n'))
		}
	}
	input := filepath.Join(dir, "in.jsonl")
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(input, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("workers: 2\nautoscale:\n  metric: queue_depth\n  target: 1\n  min_replicas: 0\n  max_replicas: 4\n  polling_interval_s: 10\n  cooldown_s: 60\n  container_start_s: 20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, sec := filepath.Join(dir, "sim.parquet"), filepath.Join(dir, "sec.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", cfg, "-o", out, "--per-second", sec, input)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	_, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	held, waits := 0, 0.0
	for _, r := range reqs {
		if w := r.WorkerArrival.V.Sub(r.RouterArrival.V).Seconds(); w > 0 {
			held++
			waits += w
		}
	}
	runs, _, err := trace.ReadSeconds(sec)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, s := range runs[0].Seconds {
		sum += s.HeldAtGateway
	}
	if held == 0 || !strings.Contains(stderr, fmt.Sprintf("%d requests waited at the gateway", held)) || math.Abs(sum-waits) > 1e-6*waits {
		t.Errorf("%d records waited %v s in all; the per-second file holds %v request-seconds; stderr:\n%s", held, waits, sum, stderr)
	}
	// The TTFT decomposition names the waits "routing", not "other".
	d := analyze.Decompose(reqs, analyze.DefaultBands)
	routing := slices.Index(analyze.DecompParts, "routing")
	var parted float64
	for _, b := range d.Bands {
		parted += b.Mean[routing] * float64(b.N)
	}
	if math.Abs(parted-waits) > 1e-6*waits {
		t.Errorf("decomposition: %v s of routing, want the records' %v", parted, waits)
	}
}
