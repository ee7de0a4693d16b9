package opal

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
)

// Opal's micro run (one 20,000-token prompt): its config read whole, its
// stage replayed Opal-compatibly, and its opal_stats.json written again,
// byte for byte (the latency histogram's bug Q7 kept).
func TestMicroStatsFile(t *testing.T) {
	dir := shareddata.Path(t, "formats/opal/micro_one_long")
	c, err := Load(filepath.Join(dir, "sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelFrom != "shipped granite-3.3-8b-instruct" || c.NumWorkers != 1 || len(c.Tiers) != 1 {
		t.Errorf("model from %q, %d workers, tiers %v", c.ModelFrom, c.NumWorkers, c.Tiers)
	}
	s := c.Workload.Stages[0]
	if s.TraceFile != filepath.Join(dir, "one_long.jsonl") {
		t.Errorf("trace file %s: Opal's micro/one_long.jsonl is beside the config", s.TraceFile)
	}
	reqs, err := c.Workload.Requests(s, c.Seed, "micro")
	if err != nil {
		t.Fatal(err)
	}
	out, err := replay.RunOpalCompat(c.Compat(replay.AllOpalQuirks()), reqs, "micro")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteStats(&b, out, true); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "opal_stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("opal_stats.json differs:\n%s\nOpal wrote:\n%s", b.String(), want)
	}
	b.Reset()
	WriteStats(&b, out, false)
	if !strings.Contains(b.String(), `"latencies": [1.0, 0.0,`) {
		t.Errorf("a 0.82 s latency is not in the first bin (up to 1,000 ms):\n%s", b.String())
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", 0.0010002: "0.0010002", 1.9999999999989644e-07: "1.9999999999989644e-07", 1234567: "1234567.0",
		1e16: "1e+16", 1e-5: "1e-05", 0.0001: "0.0001", 81.79003304469144: "81.79003304469144", -2.5: "-2.5",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %s, Python %s", f, got, want)
		}
	}
}

// defaultsWith is Opal's defaults config with old replaced by new.
func defaultsWith(t *testing.T, old, new string) []byte {
	b, err := os.ReadFile(shareddata.Path(t, "formats/opal/defaults/sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, old) {
		t.Fatalf("defaults has no %q", old)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ old, new, want string }{
		{`"num_workers": 1`, `"num_workers": 0`, "cfg.json:5: simulation.num_workers: 0: want a whole number from 1 to 4096"},
		{`"num_workers": 1`, `"num_wokers": 1`, "cfg.json:5: simulation.num_wokers: unknown key in simulation"},
		{`"tflops": 989.5`, `"tflops": "fast"`, `cfg.json:63: worker.hw.tflops: "fast" is not a finite number`},
		{`"policy": "MaxPrefix"`, `"policy": "Sticky"`, `cfg.json:21: router.router_params.policy: "Sticky": want MaxPrefix`},
		{`"CPUMemory"
        ]`, `"Tape"
        ]`, `cfg.json:83: kvc.kvc_tiers[0]: "Tape": want CPUMemory`},
		{`"request_rate": 2.0`, `"request_rate": -2.0`, "cfg.json:31: workload.stages[0].workload_params.request_rate: not a positive finite rate"},
		{`"model": "roofline"`, `"model": "synthetic"`, `cfg.json:75: worker.inference_params.model: "synthetic": only Opal's roofline`},
		{`"name": "granite-3.3-8b-instruct"`, `"name": "no-such-model"`, `cfg.json:11: model.model_params.name: no folder "no-such-model"`},
		{`"trace_file": "traces/hello.jsonl"`, `"trace_file": "nowhere.jsonl"`, `cfg.json:48: workload.stages[1].workload_params.trace_file: "nowhere.jsonl" not found`},
		{`"jitter": 0.0,`, `"jitter": 0.0,,`, "cfg.json:36: invalid character ','"},
	} {
		_, err := Parse("cfg.json", defaultsWith(t, c.old, c.new))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s → %s: error %v, want %q…", c.old, c.new, err, c.want)
		}
	}
}

// The defaults config as a cluster file: Opal's settings under
// opaltrace's keys, readable by deploy.ParseCluster.
func TestClusterYAML(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "traces"), 0o755)
	os.WriteFile(filepath.Join(dir, "traces", "hello.jsonl"), []byte(`{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]}`+"\n"), 0o644)
	cfg := filepath.Join(dir, "sim_config.json")
	os.WriteFile(cfg, defaultsWith(t, `"num_workers": 1`, `"num_workers": 4`), 0o644)
	c, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, notes, err := c.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	if cl.Workers != 4 || cl.Router != replay.RouterMaxPrefix || cl.RouterConfig.ViewIntervalSec != 30 || cl.NumGPUBlocksOverride != 26534 ||
		cl.Scheduler.LMCache == nil || cl.Scheduler.LMCache.MaxLocalCPUSize != 8 || cl.Seed != 42 || len(notes) < 2 {
		y, _ := c.ClusterYAML()
		t.Errorf("cluster:\n%s\nnotes %v", y, notes)
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{"formats/opal/defaults/sim_config.json", "formats/opal/micro_one_long/sim_config.json"} {
		b, err := os.ReadFile(shareddata.Path(f, p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"simulation": {"num_workers": 2.5}}`))
	f.Add([]byte(`[1, 2]`))
	// One directory for every exec: Parse writes nothing beside the
	// config, and a directory made and removed per exec (t.TempDir) cost
	// more than the parse itself.
	cfg := filepath.Join(f.TempDir(), "cfg.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(cfg, data)
		if err != nil {
			if !strings.Contains(err.Error(), "cfg.json:") {
				t.Errorf("error without FILE:LINE: %v", err)
			}
			return
		}
		if c.NumWorkers < 1 || c.Workload == nil || len(c.Workload.Stages) == 0 {
			t.Errorf("accepted a config without workers or stages: %+v", c)
		}
		c.ClusterYAML()
	})
}

// TestLineAtCountsNewlines checks the binary search over newline offsets
// against counting the newlines before every offset of a document.
func TestLineAtCountsNewlines(t *testing.T) {
	data := []byte("{\n\"a\": 1,\n\n  \"b\": [1,\n2]\n}\n")
	d, err := parseDoc("x.json", data)
	if err != nil {
		t.Fatal(err)
	}
	for off := -1; off <= len(data)+1; off++ {
		clamped := min(max(off, 0), len(data))
		want := 1 + bytes.Count(data[:clamped], []byte{'\n'})
		if got := d.lineAt(off); got != want {
			t.Errorf("lineAt(%d) = %d, want %d", off, got, want)
		}
	}
}

// Opal's scaling as a cluster file: the HPA from num_workers up to
// max_workers, a new worker ready scale_latency after it is asked for, a
// file deploy reads and replay accepts. (It wrote weights_gb without a
// storage bandwidth, which the cluster's check refuses.)
func TestClusterYAMLScaling(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "traces"), 0o755)
	os.WriteFile(filepath.Join(dir, "traces", "hello.jsonl"), []byte(`{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]}`+"\n"), 0o644)
	cfg := filepath.Join(dir, "sim_config.json")
	os.WriteFile(cfg, defaultsWith(t, `"enable_scaling": false`, `"enable_scaling": true`), 0o644)
	c, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, _, err := c.Cluster()
	if err != nil {
		y, _ := c.ClusterYAML()
		t.Fatalf("%v\n%s", err, y)
	}
	a := cl.Autoscale
	if a.Metric != replay.MetricQueueDepth || a.MinReplicas == nil || *a.MinReplicas != c.NumWorkers || a.ContainerStartSec != c.ScaleLatency || a.WeightsGB != 0 {
		t.Errorf("autoscale %+v: want queue_depth from %d workers, ready after %v s", a, c.NumWorkers, c.ScaleLatency)
	}
}
