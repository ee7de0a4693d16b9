package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A run an SGLang server served is replayed through SGLang's scheduler
// unless the cluster names one; the simulated run says which.
func TestSchedulerFor(t *testing.T) {
	pick := func(cfg replay.Config, run trace.Run) replay.Config {
		t.Helper()
		c, err := schedulerFor(cfg, run)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sg := trace.Run{Engine: "sglang"}
	if c := pick(replay.Config{}, sg); c.Scheduler.Engine != replay.EngineSGLang || engineName(c) != "sglang" {
		t.Errorf("sglang run: engine %q", c.Scheduler.Engine)
	}
	if c := pick(replay.Config{}, trace.Run{Engine: "vllm"}); engineName(c) != "vllm" {
		t.Errorf("vllm run: engine %q", engineName(c))
	}
	var cfg replay.Config
	cfg.Scheduler.Engine = replay.EngineVLLM
	if c := pick(cfg, sg); c.Scheduler.Engine != replay.EngineVLLM {
		t.Errorf("the cluster's choice was overridden: %q", c.Scheduler.Engine)
	}
	// Server options recorded at ingest fill the defaults, not what the
	// cluster set.
	opts := trace.Run{Name: "r", Engine: "sglang", Extra: map[string]string{
		"engine_opt.disable_radix_cache": "true", "engine_opt.chunked_prefill_size": "4096",
		"engine_opt.max_prefill_tokens": "2048", "engine_opt.schedule_policy": "fcfs", "engine_opt.tp": "2",
	}}
	cfg = replay.Config{}
	cfg.Scheduler.MaxPrefillTokens = 1000
	c := pick(cfg, opts).Scheduler
	if !c.DisableRadixCache || c.ChunkedPrefillSize != 4096 || c.MaxPrefillTokens != 1000 || c.SchedulePolicy != "fcfs" {
		t.Errorf("options not applied: %+v", c)
	}
	opts.Extra["engine_opt.chunked_prefill_size"] = "many"
	opts.Extra["engine_opt.schedule_policy"] = "lof"
	if _, err := schedulerFor(replay.Config{}, opts); err == nil ||
		!strings.Contains(err.Error(), `run r: engine_opt.chunked_prefill_size: "many"`) {
		t.Errorf("bad option: %v", err)
	}
	delete(opts.Extra, "engine_opt.chunked_prefill_size")
	if _, err := schedulerFor(replay.Config{}, opts); err == nil || !strings.Contains(err.Error(), "schedule_policy") {
		t.Errorf("bad policy: %v", err)
	}
}

// The SGLang PD benchmark (its runs say sglang) replays through the SGLang
// scheduler without being told; --scheduler sglang replays a Mooncake
// slice, twice, into byte-identical files.
func TestReplaySGLang(t *testing.T) {
	dir := t.TempDir()
	pd := shareddata.Path(t, "formats/sglang_bench_serving/TonyLi15_sglang-benchmark_pd_1p2d_n100_in512_out128_c64.jsonl")
	out := filepath.Join(dir, "pd.parquet")
	if _, stderr, err := opaltrace(t, "replay", "-o", out, pd); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil || len(runs) != 1 || runs[0].Engine != "sglang" || len(reqs) != 100 {
		t.Fatalf("%v: runs %+v, %d requests", err, runs, len(reqs))
	}

	in := sampleSlice(t, dir, 300)
	if a, b := replayTwice(t, dir, "sg", "--scheduler", "sglang", "--workers", "2", in); !bytes.Equal(a, b) {
		t.Error("two SGLang replays with the same inputs wrote different files")
	}
	runs, reqs, err = trace.ReadFile(filepath.Join(dir, "sga.parquet"))
	if err != nil || runs[0].Engine != "sglang" || len(reqs) != 300 {
		t.Fatalf("%v: runs %+v, %d requests", err, runs, len(reqs))
	}
	if _, _, err := opaltrace(t, "replay", "--scheduler", "trt", "-o", filepath.Join(dir, "x.parquet"), in); err == nil {
		t.Error("an unknown scheduler was accepted")
	}
}
