package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// The configuration a simulated run records is the one that ran: replayed
// from it, with no flag, the same input gives the same bytes (records, run
// metadata with that same configuration, per-second file), for each
// engine. It holds every default, so it names the engine's own settings
// and the KV capacity, which the flags and the cluster file left unsaid.
func TestReplayFromRecordedConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 200)
	// An autoscaled cluster, one of its scaling policies given and the
	// others the HPA's defaults: the record lists them all, as a list
	// the cluster file reads back.
	scaled := filepath.Join(dir, "scaled.yaml")
	if err := os.WriteFile(scaled, []byte("workers: 2\nautoscale:\n  metric: queue_depth\n  target: 1\n  max_replicas: 4\n"+
		"  sync_period_s: 2\n  scale_up_policies: [{type: pods, value: 1, period_s: 10}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string // keys the recorded configuration must hold
	}{
		{"vllm", []string{"--workers", "3", "--max-num-seqs", "32", "--client-latency", "0.002", "--seed", "9"},
			[]string{"engine: vllm", "max_num_seqs: 32", "kv_cache_tokens:", "block_size: 16", "stream_interval: 1"}},
		{"sglang", []string{"--scheduler", "sglang", "--workers", "2", "--time-scale", "0.5"},
			[]string{"engine: sglang", "chunked_prefill_size: 8192", "max_prefill_tokens: 16384", "max_running_requests:",
				"schedule_policy: lpm", "schedule_conservativeness: 1", "context_length:", "kv_cache_tokens:"}},
		{"autoscaled", []string{"--config", scaled},
			[]string{"scale_up_policies:\n", "type: pods\n", "value: 1\n", "period_s: 10\n", "scale_up_select_policy: max",
				"scale_down_policies:\n", "type: percent\n", "value: 100\n", "scale_down_select_policy: max"}},
	} {
		first := filepath.Join(dir, c.name+"1.parquet")
		firstSec := filepath.Join(dir, c.name+"1.seconds.parquet")
		args := append([]string{"replay", "-o", first, "--per-second", firstSec}, c.args...)
		if _, stderr, err := opaltrace(t, append(args, in)...); err != nil {
			t.Fatalf("%s: replay: %v\n%s", c.name, err, stderr)
		}
		runs, _, err := trace.ReadRuns(first)
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: %v, %d runs", c.name, err, len(runs))
		}
		recorded := runs[0].Extra["config"]
		for _, k := range c.want {
			if !strings.Contains(recorded, k) {
				t.Errorf("%s: recorded configuration lacks %q:\n%s", c.name, k, recorded)
			}
		}
		cfgFile := filepath.Join(dir, c.name+".yaml")
		if err := os.WriteFile(cfgFile, []byte(recorded), 0o644); err != nil {
			t.Fatal(err)
		}
		second := filepath.Join(dir, c.name+"2.parquet")
		secondSec := filepath.Join(dir, c.name+"2.seconds.parquet")
		if _, stderr, err := opaltrace(t, "replay", "-o", second, "--per-second", secondSec, "--config", cfgFile, in); err != nil {
			t.Fatalf("%s: replay from the recorded configuration: %v\n%s", c.name, err, stderr)
		}
		for _, pair := range [][2]string{{first, second}, {firstSec, secondSec}} {
			a, errA := os.ReadFile(pair[0])
			b, errB := os.ReadFile(pair[1])
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s and %s differ: the recorded configuration is not the one that ran", c.name, filepath.Base(pair[0]), filepath.Base(pair[1]))
			}
		}
	}
}

// A cluster file's disaggregation: block replays prefill/decode
// disaggregated from the command line, for each engine: every request
// prefills on the prefill worker, waits for its KV, decodes on a decode
// worker; the configuration it records (the KV figures deploy filled in
// included) replays to the same bytes; and a prefill pool that leaves no
// decode worker is refused at its line, with nothing written.
func TestReplayDisaggregated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 120)
	for _, engine := range []string{"vllm", "sglang"} {
		cluster := filepath.Join(dir, engine+".yaml")
		yaml := "workers: 3\ndisaggregation:\n  prefill_workers: 1\nscheduler:\n  engine: " + engine + "\n"
		if err := os.WriteFile(cluster, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		first := filepath.Join(dir, engine+"1.parquet")
		_, stderr, err := opaltrace(t, "replay", "--config", cluster, "-o", first, in)
		if err != nil {
			t.Fatalf("%s: replay: %v\n%s", engine, err, stderr)
		}
		if !strings.Contains(stderr, "1 prefill, 2 decode: disaggregated") {
			t.Errorf("%s: stderr does not name the pools:\n%s", engine, stderr)
		}
		runs, reqs, err := trace.ReadFile(first)
		if err != nil || len(runs) != 1 || len(reqs) == 0 {
			t.Fatalf("%s: %v, %d runs, %d requests", engine, err, len(runs), len(reqs))
		}
		decoders := map[string]int{}
		for _, r := range reqs {
			if r.Status != trace.StatusOK {
				continue
			}
			decoders[r.Worker]++
			if r.PrefillWorker != "w0" {
				t.Errorf("%s: %s: prefill worker %q, want w0", engine, r.RequestID, r.PrefillWorker)
			}
			if fetch, ok := r.KVFetchSec.Get(); !ok || fetch <= 0 {
				t.Errorf("%s: %s: KV fetch %v (set %v), want the transfer's time", engine, r.RequestID, fetch, ok)
			}
		}
		if len(decoders) != 2 || decoders["w0"] != 0 {
			t.Errorf("%s: completed requests by worker %v, want them all on the decode workers w1 and w2", engine, decoders)
		}
		// stats groups by either: the decode workers, or the prefill
		// worker the router chose.
		for by, want := range map[string]string{"worker": "Workers:                                 2", "prefill_worker": "prefill_worker=w0"} {
			out, stderr, err := opaltrace(t, "stats", "--by", by, first)
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%s: stats --by %s: %v %s\n%s\nwant %q", engine, by, err, stderr, out, want)
			}
		}
		recorded := runs[0].Extra["config"]
		for _, k := range []string{"prefill_workers: 1", "kv_bytes_per_token: 131072", "transfer_gbps:"} {
			if !strings.Contains(recorded, k) {
				t.Errorf("%s: recorded configuration lacks %q:\n%s", engine, k, recorded)
			}
		}
		again := filepath.Join(dir, engine+"again.yaml")
		if err := os.WriteFile(again, []byte(recorded), 0o644); err != nil {
			t.Fatal(err)
		}
		second := filepath.Join(dir, engine+"2.parquet")
		if _, stderr, err := opaltrace(t, "replay", "--config", again, "-o", second, in); err != nil {
			t.Fatalf("%s: replay from the recorded configuration: %v\n%s", engine, err, stderr)
		}
		a, errA := os.ReadFile(first)
		b, errB := os.ReadFile(second)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: the replay from its recorded configuration differs (%v, %v)", engine, errA, errB)
		}
		// The flags say the same as the cluster file.
		third := filepath.Join(dir, engine+"3.parquet")
		if _, stderr, err := opaltrace(t, "replay", "--workers", "3", "--prefill-workers", "1", "--scheduler", engine, "-o", third, in); err != nil {
			t.Fatalf("%s: replay with --prefill-workers: %v\n%s", engine, err, stderr)
		}
		if c, err := os.ReadFile(third); err != nil || !bytes.Equal(a, c) {
			t.Errorf("%s: --workers 3 --prefill-workers 1 differs from its cluster file (%v)", engine, err)
		}
		// The decode worker by load: recorded, and replayed again to
		// the same bytes from what was recorded.
		fourth := filepath.Join(dir, engine+"4.parquet")
		if _, stderr, err := opaltrace(t, "replay", "--config", cluster, "--decode-router", "least_requests", "-o", fourth, in); err != nil {
			t.Fatalf("%s: replay with --decode-router: %v\n%s", engine, err, stderr)
		}
		runs, _, err = trace.ReadFile(fourth)
		if err != nil || !strings.Contains(runs[0].Extra["config"], "decode_router: least_requests") {
			t.Errorf("%s: --decode-router least_requests is not in the recorded configuration (%v)", engine, err)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("workers: 2\ndisaggregation:\n  prefill_workers: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bad.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad}, "bad.yaml:3: disaggregation.prefill_workers: 2 leaves no decode worker of 2 workers"},
		{[]string{"--workers", "2", "--prefill-workers", "2"}, "--prefill-workers: 2 leaves no decode worker of 2 workers"},
		{[]string{"--workers", "3", "--prefill-workers", "1", "--decode-router", "cache_aware"}, `--decode-router: "cache_aware" is not one of round_robin, least_requests, random, power_of_two`},
	} {
		_, stderr, err := opaltrace(t, append(append([]string{"replay"}, c.args...), "-o", out, in)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q; stderr:\n%s", c.args, err, c.want, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: a refused replay left %s (%v)", c.args, out, err)
		}
	}
}

// A replay's records, replayed with router recorded, put every request on
// the worker they name; a trace whose requests name no worker is refused
// with the file and line, and nothing is written.
func TestReplayRecordedRouter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 120)
	write := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	byLoad := write("load.yaml", "workers: 3\nrouter: least_requests\n")
	rec := write("recorded.yaml", "workers: 3\nrouter: recorded\n")
	first := filepath.Join(dir, "first.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--config", byLoad, "-o", first, in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	second := filepath.Join(dir, "second.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--config", rec, "-o", second, first); err != nil {
		t.Fatalf("replay of the records with router recorded: %v\n%s", err, stderr)
	}
	_, a, errA := trace.ReadFile(first)
	_, b, errB := trace.ReadFile(second)
	if errA != nil || errB != nil || len(a) != 120 || len(b) != 120 {
		t.Fatalf("%v, %v: %d and %d requests", errA, errB, len(a), len(b))
	}
	workers := map[string]string{}
	for _, r := range a {
		workers[r.RequestID] = r.Worker
	}
	used := map[string]bool{}
	for _, r := range b {
		if r.Worker != workers[r.RequestID] {
			t.Errorf("%s: served by %s, the records say %s", r.RequestID, r.Worker, workers[r.RequestID])
		}
		used[r.Worker] = true
	}
	if len(used) != 3 {
		t.Errorf("workers %v, want the three the records name", used)
	}
	out := filepath.Join(dir, "bad.parquet")
	_, stderr, err := opaltrace(t, "replay", "--config", rec, "-o", out, in)
	if err == nil || !strings.Contains(err.Error()+stderr, "in.jsonl:1: worker: absent") {
		t.Errorf("replay of a trace without workers: %v\n%s", err, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s written after the error (%v)", out, err)
	}
}

// KV tiers with disaggregation from the command line: a CPU tier of 20
// GiB beside 70,000 tokens of GPU KV, on the prefill pool alone by
// default, so that the per-second file's host capacity is the prefill
// workers' (its usage never above 100 %), both pools' with
// decode_kv_tiers, whose decode workers then write what they receive.
func TestReplayDisaggregatedTiers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 200)
	var offloaded [2]int64
	for k, c := range []struct {
		name   string
		extra  string
		tiered int64
	}{{"prefill", "", 1}, {"both", "  decode_kv_tiers: true\n", 3}} {
		cluster := filepath.Join(dir, c.name+".yaml")
		yaml := "workers: 3\nscheduler:\n  kv_offloading_size: 20\n  kv_cache_tokens: 70000\ndisaggregation:\n  prefill_workers: 1\n" + c.extra
		if err := os.WriteFile(cluster, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		out, sec := filepath.Join(dir, c.name+".parquet"), filepath.Join(dir, c.name+".seconds.parquet")
		if _, stderr, err := opaltrace(t, "replay", "--config", cluster, "-o", out, "--per-second", sec, in); err != nil {
			t.Fatalf("%s: replay: %v\n%s", c.name, err, stderr)
		}
		runs, _, err := trace.ReadSeconds(sec)
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: %v, %d runs", c.name, err, len(runs))
		}
		if want := c.tiered * 20 << 30; runs[0].HostKVCapacity != want {
			t.Errorf("%s: host capacity %d bytes, want %d (%d workers' 20 GiB)", c.name, runs[0].HostKVCapacity, want, c.tiered)
		}
		for _, s := range runs[0].Seconds {
			if s.HostKVBytes > runs[0].HostKVCapacity {
				t.Errorf("%s: second %d holds %d bytes in host tiers, more than their %d", c.name, s.Second, s.HostKVBytes, runs[0].HostKVCapacity)
				break
			}
			offloaded[k] += s.OffloadBytes
		}
	}
	if offloaded[0] == 0 || offloaded[1] <= offloaded[0] {
		t.Errorf("offloaded %d bytes from the prefill pool's tiers, %d with the decode pool's too: want some, and more", offloaded[0], offloaded[1])
	}
}

// A disaggregated replay's output, replayed with router recorded under
// the same pools, sends each request to the prefill worker and the decode
// worker its record names (prefill_worker, worker): the placement a
// disaggregated deployment made, read back from a file.
func TestReplayRecordedDisaggregated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := sampleSlice(t, dir, 200)
	first, second := filepath.Join(dir, "pd.parquet"), filepath.Join(dir, "recorded.parquet")
	if _, stderr, err := opaltrace(t, "replay", "--workers", "5", "--prefill-workers", "2", "--decode-router", "least_requests", "-o", first, in); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	cluster := filepath.Join(dir, "recorded.yaml")
	if err := os.WriteFile(cluster, []byte("workers: 5\nrouter: recorded\ndisaggregation:\n  prefill_workers: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := opaltrace(t, "replay", "--config", cluster, "-o", second, first); err != nil {
		t.Fatalf("replay recorded: %v\n%s", err, stderr)
	}
	_, a, err := trace.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := trace.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string][2]string{}
	for _, r := range a {
		placed[r.RequestID] = [2]string{r.PrefillWorker, r.Worker}
	}
	pools := map[[2]string]bool{}
	for _, r := range b {
		got := [2]string{r.PrefillWorker, r.Worker}
		if want := placed[r.RequestID]; got != want || got[0] == "" {
			t.Errorf("request %s: prefill worker and worker %q, its record %q", r.RequestID, got, want)
		}
		pools[got] = true
	}
	if len(b) != len(a) || len(pools) < 6 {
		t.Errorf("%d records of %d, %d pairs of workers: want all, and most of the 6 pairs", len(b), len(a), len(pools))
	}
}
