package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// tinyLengths is a hand-made Azure-format input: three successful
// requests whose (prompt, output) pairs are the only lengths a sampled
// workload drawn from it may have (Azure records no failures).
const tinyLengths = `TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,96,109
2023-11-16 18:15:51.0000000,1200,7
`

var tinyPairs = map[[2]int64]bool{{374, 44}: true, {96, 109}: true, {1200, 7}: true}

func writeTiny(t *testing.T, dir string) string {
	t.Helper()
	in := filepath.Join(dir, "tiny.csv")
	if err := os.WriteFile(in, []byte(tinyLengths), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// readSim reads a simulated file and checks it holds one run of n
// requests whose lengths are all from pairs.
func readSim(t *testing.T, path string, n int, pairs map[[2]int64]bool) (trace.Run, []*trace.Request) {
	t.Helper()
	runs, reqs, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || len(reqs) != n {
		t.Fatalf("%s: %d runs, %d requests; want 1 run of %d", path, len(runs), len(reqs), n)
	}
	for _, r := range reqs {
		if p := [2]int64{r.InputTokens.V, r.OutputTokens.V}; !pairs[p] {
			t.Fatalf("request %s has lengths %v, not from the input", r.RequestID, p)
		}
	}
	return runs[0], reqs
}

func arrivals(reqs []*trace.Request) map[string]trace.Time {
	m := make(map[string]trace.Time, len(reqs))
	for _, r := range reqs {
		m[r.RequestID] = r.Arrival.V
	}
	return m
}

// TestReplaySampledTiny samples 400 requests from a three-request input:
// every length is one of its pairs, the run says what was sent, the same
// seed writes the same bytes and another seed other arrivals.
func TestReplaySampledTiny(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	args := []string{"--sample", "400", "--sample-rate", "20", "--workers", "2", "--seed", "3", "--run-name", "tiny", in}
	a, b := replayTwice(t, dir, "s", args...)
	if !bytes.Equal(a, b) {
		t.Error("two sampled replays with the same seed wrote different files")
	}
	run, reqs := readSim(t, filepath.Join(dir, "sa.parquet"), 400, tinyPairs)
	want := "sampled: 400 requests at 20 req/s, lengths from 3 requests of " + in
	if run.Name != "tiny" || run.Extra["workload"] != want {
		t.Errorf("run %q, workload %q; want tiny, %q", run.Name, run.Extra["workload"], want)
	}
	// The run says what priced its steps.
	if c := run.Extra["cost_model"]; !strings.Contains(c, "roofline: llama-3.1-8b on 1 × h100") || !strings.Contains(c, "mfu 0.5") {
		t.Errorf("cost_model metadata %q, want the roofline and its coefficients", c)
	}
	seen := map[[2]int64]bool{}
	for _, r := range reqs {
		seen[[2]int64{r.InputTokens.V, r.OutputTokens.V}] = true
	}
	if len(seen) != 3 {
		t.Errorf("400 draws used %d of the 3 pairs", len(seen))
	}
	// 400 arrivals at 20/s span about 20 s.
	last := trace.Time(0)
	for _, r := range reqs {
		last = max(last, r.Arrival.V)
	}
	if s := last.Seconds(); s < 15 || s > 25 {
		t.Errorf("last arrival at %.1f s; 400 requests at 20/s should end near 20 s", s)
	}

	other := filepath.Join(dir, "other.parquet")
	args[7] = "4" // --seed
	if _, stderr, err := opaltrace(t, append([]string{"replay", "-o", other}, args...)...); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	_, reqs2 := readSim(t, other, 400, tinyPairs)
	a1, a2 := arrivals(reqs), arrivals(reqs2)
	differ := 0
	for id, at := range a1 {
		if a2[id] != at {
			differ++
		}
	}
	if differ == 0 {
		t.Error("seeds 3 and 4 gave the same arrivals")
	}
}

// TestReplaySampledAzure draws 3,000 requests from the Azure conversation
// trace: lengths come from its 19,366 requests only.
func TestReplaySampledAzure(t *testing.T) {
	in := shareddata.Path(t, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
	_, reqs, err := trace.ReadFile(ingestTo(t, in))
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[[2]int64]bool{}
	for _, r := range reqs {
		pairs[[2]int64{r.InputTokens.V, r.OutputTokens.V}] = true
	}
	out := filepath.Join(t.TempDir(), "az.parquet")
	_, stderr, err := opaltrace(t, "replay", "--sample", "3000", "--sample-rate", "45", "--workers", "8", "-o", out, in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	run, _ := readSim(t, out, 3000, pairs)
	if w := run.Extra["workload"]; !strings.Contains(w, "lengths from 19366 requests of") {
		t.Errorf("workload %q does not count the Azure requests", w)
	}
}

// ingestTo ingests in into a scratch Parquet file.
func ingestTo(t *testing.T, in string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "in.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", out, in); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	return out
}

// TestReplaySampledFromParquet draws from an opaltrace Parquet input too,
// and from several inputs in order.
func TestReplaySampledFromParquet(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	pq := ingestTo(t, in)
	out := filepath.Join(dir, "pq.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--sample", "50", "--sample-rate", "5", "-o", out, pq, in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	run, _ := readSim(t, out, 50, tinyPairs)
	if w := run.Extra["workload"]; !strings.Contains(w, "lengths from 6 requests of "+pq+", "+in) {
		t.Errorf("workload %q", w)
	}
}

// TestReplaySampledErrors: bad sample arguments or no usable pair fail
// with a message naming the problem, and write nothing.
func TestReplaySampledErrors(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	empty := filepath.Join(dir, "empty.csv")
	if err := os.WriteFile(empty, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sample", "10", in}, "--sample needs --sample-rate"},
		{[]string{"--sample-rate", "10", in}, "--sample-rate needs --sample"},
		{[]string{"--sample", "0", "--sample-rate", "10", in}, "--sample 0"},
		{[]string{"--sample", "-5", "--sample-rate", "10", in}, "--sample -5"},
		{[]string{"--sample", "10", "--sample-rate", "0", in}, "--sample-rate 0"},
		{[]string{"--sample", "10", "--sample-rate", "-1", in}, "--sample-rate -1"},
		{[]string{"--sample", "10", "--sample-rate", "NaN", in}, "--sample-rate NaN"},
		{[]string{"--sample", "10", "--sample-rate", "Inf", in}, "--sample-rate +Inf"},
		{[]string{"--sample", "10", "--sample-rate", "1"}, "give at least one"},
		{[]string{"--sample", "10", "--sample-rate", "1", empty}, "no successful request"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--mode", "closed", in}, "open loop"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--time-scale", "2", in}, "time scale"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--opal-workload", "sim_config.json"}, "give one"},
		{[]string{"--sample", "10", "--sample-rate", "1e-300", in}, "replay: --sample-rate 1e-300: want a number of requests per second from 1e-06 to 1e+09"},
		{[]string{"--sample", "2000", "--sample-rate", "1e-6", in}, "replay: --sample 2000 at --sample-rate 1e-06: arrivals would span 2e+09 s; want at most 1e+09 s (lower --sample or raise the rate)"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--workers", "0", in}, "--workers 0: want a number of workers from 1 to 4096"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--workers", "5000000", in}, "--workers 5000000: want a number of workers from 1 to 4096"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--tp", "0", in}, "--tp 0: want a tensor-parallel degree from 1 to 1024"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--max-num-seqs", "0", in}, "--max-num-seqs 0: want a number of running sequences from 1 to 1048576"},
		{[]string{"--sample", "10", "--sample-rate", "1", "--block-size", "-1", in}, "--block-size -1: want a number of tokens per hash_ids entry from 1 to 1048576"},
	} {
		_, _, err := opaltrace(t, append([]string{"replay", "-o", out}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
		assertNoFile(t, out)
	}
}

// distLines are the lines of a printed summary that the in-memory and the
// multi-pass summaries print alike: the duration, the throughputs (but the
// peak), and the latency lines (Mean, Median, Std, P99 of TTFT, TPOT, ITL
// and E2EL).
func distLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "Benchmark duration"), strings.HasPrefix(l, "Request throughput"),
			strings.HasPrefix(l, "Output token throughput"), strings.HasPrefix(l, "Total Token throughput"):
			lines = append(lines, l)
		}
		for _, p := range []string{"Mean ", "Median ", "Std ", "P99 "} {
			if strings.HasPrefix(l, p) && strings.Contains(l, " (ms):") {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// TestReplayLowMemoryEqualsInMemory replays the same sampled workload
// with and without --low-memory: the files are the same, the multi-pass
// summary prints the in-memory summary's duration, throughput and latency
// lines, and, computed again from the file, equals its values to the last
// bit.
func TestReplayLowMemoryEqualsInMemory(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	mem, low := filepath.Join(dir, "mem.parquet"), filepath.Join(dir, "low.parquet")
	args := []string{"--sample", "1500", "--sample-rate", "6", "--workers", "4", "--stream-interval", "3", in}
	outMem, stderr, err := opaltrace(t, append([]string{"replay", "-o", mem}, args...)...)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	outLow, stderr, err := opaltrace(t, append([]string{"replay", "--low-memory", "-o", low}, args...)...)
	if err != nil {
		t.Fatalf("replay --low-memory: %v\n%s", err, stderr)
	}
	a, _ := os.ReadFile(mem)
	b, _ := os.ReadFile(low)
	if !bytes.Equal(a, b) {
		t.Error("--low-memory changed the simulated file")
	}
	if !strings.Contains(outLow, "Exact summary in") || strings.Contains(outMem, "Exact summary in") {
		t.Fatalf("summaries not printed the expected ways:\n%s\n%s", outMem, outLow)
	}
	// One summary, one renderer: the block by passes is the in-memory
	// block with the line that says how it was made.
	var kept []string
	for _, l := range strings.SplitAfter(outLow, "\n") {
		if !strings.HasPrefix(l, "Exact summary in") {
			kept = append(kept, l)
		}
	}
	if strings.Join(kept, "") != outMem {
		t.Errorf("the summaries differ:\nin memory:\n%s\nlow memory:\n%s", outMem, outLow)
	}
	if len(distLines(outMem)) != 20 || !strings.Contains(outMem, "Peak concurrent requests:") || !strings.Contains(outMem, "ITL unit:") {
		t.Errorf("the summary lacks lines:\n%s", outMem)
	}

	runs, reqs, err := trace.ReadFile(low)
	if err != nil {
		t.Fatal(err)
	}
	want := analyze.Summarize(runs[0], reqs)
	got, err := analyze.SummarizeStream(runSource(low, runs[0].Name, true), runs[0], analyze.StreamOptions{Percentiles: []float64{50, 90, 99}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Completed != want.Completed || got.TotalOutputTokens != want.TotalOutputTokens || got.Peak == nil || *got.Peak != *want.Peak {
		t.Errorf("counts: stream %d completed, %d tokens, peak %+v; memory %d, %d, %+v", got.Completed, got.TotalOutputTokens, got.Peak, want.Completed, want.TotalOutputTokens, want.Peak)
	}
	if got.DurationSec == 0 || got.DurationSec != want.DurationSec || got.OutputThroughput != want.OutputThroughput {
		t.Errorf("duration: stream %v s, %v tok/s; memory %v s, %v tok/s", got.DurationSec, got.OutputThroughput, want.DurationSec, want.OutputThroughput)
	}
	for i, d := range []struct {
		name     string
		mem, got analyze.Dist
	}{{"TTFT", want.TTFT, got.TTFT}, {"TPOT", want.TPOT, got.TPOT}, {"ITL", want.ITL, got.ITL}, {"E2E", want.E2E, got.E2E}} {
		if d.got.N() == 0 || d.mem.N() != d.got.N() || d.mem.Mean != d.got.Mean || d.mem.Std != d.got.Std || d.mem.Median() != d.got.Median() {
			t.Errorf("%d %s: memory n=%d mean=%v std=%v median=%v; stream n=%d mean=%v std=%v median=%v", i, d.name,
				d.mem.N(), d.mem.Mean, d.mem.Std, d.mem.Median(), d.got.N(), d.got.Mean, d.got.Std, d.got.Median())
		}
		for _, p := range []float64{50, 90, 99} {
			if d.mem.Percentile(p) != d.got.Percentile(p) {
				t.Errorf("%s P%v: memory %v, stream %v", d.name, p, d.mem.Percentile(p), d.got.Percentile(p))
			}
		}
	}
}

// TestRunSourceFiltersRuns: in a file of several runs the multi-pass
// summary of one run sees that run's requests only.
func TestRunSourceFiltersRuns(t *testing.T) {
	dir := t.TempDir()
	two := filepath.Join(dir, "two.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", two, sampleSlice(t, dir, 200), writeTiny(t, dir)); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	out := filepath.Join(dir, "sim.parquet")
	stdout, stderr, err := opaltrace(t, "replay", "--low-memory", "--workers", "2", "-o", out, two)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil || len(runs) != 2 {
		t.Fatalf("%v: %d runs, want 2", err, len(runs))
	}
	printed := map[string]bool{}
	for _, l := range strings.Split(stdout, "\n") {
		if name, ok := strings.CutPrefix(l, "Run:"); ok {
			// The run's name, then what it replays: " (replays #1 …)".
			name, _, _ = strings.Cut(strings.TrimSpace(name), " (")
			printed[name] = true
		}
	}
	for _, run := range runs {
		var mine []*trace.Request
		for _, r := range reqs {
			if r.Run == run.Name {
				mine = append(mine, r)
			}
		}
		want := analyze.Summarize(run, mine)
		got, err := analyze.SummarizeStream(runSource(out, run.Name, true), run, analyze.StreamOptions{Percentiles: []float64{99}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Requests != want.Requests || got.TTFT.Mean != want.TTFT.Mean || got.ITL.Percentile(99) != want.ITL.Percentile(99) {
			t.Errorf("run %s: stream %d requests, mean TTFT %v; memory %d, %v", run.Name, got.Requests, got.TTFT.Mean, want.Requests, want.TTFT.Mean)
		}
		if !printed[run.Name] {
			t.Errorf("no summary printed for run %s:\n%s", run.Name, stdout)
		}
	}
	if n := len(reqs); n != 203 {
		t.Errorf("%d simulated requests, want 200 + 3", n)
	}
}

// TestReplayRunsThreshold: a run of more than streamAbove requests is
// summarised from the file, one of at most streamAbove in memory, with
// the same latency values.
func TestReplayRunsThreshold(t *testing.T) {
	dir := t.TempDir()
	_, reqs, err := trace.ReadFile(ingestTo(t, sampleSlice(t, dir, 300)))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := deploy.DefaultCluster().With(deploy.Setting{Key: "workers", Value: 2, From: "test"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := traceJob(cl, reqs, "r")
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	at, err := replayRuns(jobs, filepath.Join(dir, "at.parquet"), sideOutputs{}, &errb, summaryPlan{streamAbove: 300})
	if err != nil {
		t.Fatal(err)
	}
	above, err := replayRuns(jobs, filepath.Join(dir, "above.parquet"), sideOutputs{}, &errb, summaryPlan{streamAbove: 299})
	if err != nil {
		t.Fatal(err)
	}
	if at[0].mem == nil || at[0].stream != nil || above[0].mem != nil || above[0].stream == nil {
		t.Fatalf("300 requests at threshold 300: %+v; at 299: %+v", at[0], above[0])
	}
	if m, s := at[0].mem, above[0].stream; m.ITL.Mean != s.ITL.Mean || m.E2E.Percentile(99) != s.E2E.Percentile(99) {
		t.Errorf("ITL mean %v vs %v, E2E p99 %v vs %v", m.ITL.Mean, s.ITL.Mean, m.E2E.Percentile(99), s.E2E.Percentile(99))
	}
}

// A bad record in a replay's input, sampled or replayed as it is, is
// reported as FILE:LINE, fails the replay with nothing written, and with
// --allow-errors the good records are still used.
func TestReplaySampledBadInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bad.csv")
	bad := tinyLengths + "2023-11-16 18:15:52.0000000,lots,7\n"
	if err := os.WriteFile(in, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	// A sampled replay, and a replay of the trace itself (its three good
	// requests).
	for _, c := range []struct {
		args []string
		n    int
	}{
		{[]string{"--sample", "50", "--sample-rate", "10"}, 50},
		{nil, 3},
	} {
		out := filepath.Join(dir, "sim"+strconv.Itoa(c.n)+".parquet")
		args := append(append([]string{"replay"}, c.args...), "--workers", "1", "-o", out, in)
		_, stderr, err := opaltrace(t, args...)
		if err == nil || !strings.Contains(stderr, in+":5:") || !strings.Contains(err.Error(), "1 bad records") {
			t.Fatalf("%v: err %v, stderr %q; want the bad line named and the replay failed", c.args, err, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%s written after a failed input (stat: %v)", out, err)
		}
		if _, stderr, err := opaltrace(t, append([]string{args[0], "--allow-errors"}, args[1:]...)...); err != nil {
			t.Fatalf("%v --allow-errors: %v\n%s", c.args, err, stderr)
		}
		readSim(t, out, c.n, tinyPairs)
	}
}

// A sampled workload runs on the deployment the sampled runs record, as
// replay runs a run on its own; runs of two deployments need one given.
func TestReplaySampledRecordedDeployment(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	ingestOn := func(name string, args ...string) string {
		out := filepath.Join(dir, name)
		if _, stderr, err := opaltrace(t, append(append([]string{"ingest", "-o", out}, args...), in)...); err != nil {
			t.Fatalf("ingest: %v\n%s", err, stderr)
		}
		return out
	}
	h200 := ingestOn("h200.parquet", "--model", "llama-3.1-70b", "--hardware", "4xH200")
	a100 := ingestOn("a100.parquet", "--model", "llama-3.1-70b", "--hardware", "8xA100-80GB")
	out := filepath.Join(dir, "sim.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--sample", "20", "--sample-rate", "5", "-o", out, h200); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	run, _ := readSim(t, out, 20, tinyPairs)
	if d := run.Extra["deployment"]; !strings.HasPrefix(d, "llama-3.1-70b on 4×h200 (TP4)") {
		t.Errorf("sampled from a 4×H200 run: deployment %q", d)
	}
	_, _, err := opaltrace(t, "replay", "--sample", "20", "--sample-rate", "5", "-o", filepath.Join(dir, "two.parquet"), h200, a100)
	if err == nil || !strings.Contains(err.Error(), "ran on llama-3.1-70b on 4×h200 (TP4)") || !strings.Contains(err.Error(), "on llama-3.1-70b on 8×a100-80gb (TP8)") {
		t.Errorf("two deployments: %v", err)
	}
	if _, stderr, err := opaltrace(t, "replay", "--sample", "20", "--sample-rate", "5", "--hardware", "h100", "--tp", "4", "-o", out, h200, a100); err != nil {
		t.Errorf("two deployments, one given: %v\n%s", err, stderr)
	} else if run, _ := readSim(t, out, 20, tinyPairs); !strings.HasPrefix(run.Extra["deployment"], "llama-3.1-70b on 4×h100 (TP4)") {
		t.Errorf("given h100 TP4: deployment %q", run.Extra["deployment"])
	}
}
