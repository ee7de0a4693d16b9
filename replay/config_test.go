package replay

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig("testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Scheduler
	if c.Workers != 16 || c.Router != RouterRoundRobin || c.Seed != 7 ||
		s.MaxNumBatchedTokens != 4096 || *s.EnablePrefixCaching ||
		s.MaxNumSeqs != 256 || s.BlockSize != 16 || s.KVCacheTokens != 0 ||
		c.Workload.Mode != ModeOpen || c.Workload.TimeScale != 0.5 || c.Workload.Clients != 1 {
		t.Errorf("config %+v scheduler %+v", c, s)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.Workers != d.Workers || c.Scheduler.MaxNumBatchedTokens != 8192 || !*c.Scheduler.EnablePrefixCaching ||
		c.Workload.Mode != ModeOpen || c.Workload.TimeScale != 1 {
		t.Errorf("defaults %+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"workers: 2\nrouter: fastest\n", "c.yaml:2: router: unknown router \"fastest\""},
		{"scheduler:\n  block_size: -16\n", "c.yaml:2: scheduler.block_size: negative (-16)"},
		{"router: llm_d\nrouter_config:\n  max_prefix_blocks: -3\n", "c.yaml:3: router_config.max_prefix_blocks: negative (-3)"},
		{"router: llm_d\nrouter_config:\n  prefix_block_tokens: -16\n", "c.yaml:3: router_config.prefix_block_tokens: negative (-16)"},
		{"router: llm_d\nrouter_config:\n  prefix_scorer: exact\n", "c.yaml:3: router_config.prefix_scorer: \"exact\" is not approximate or precise"},
		{"router: llm_d\nrouter_config:\n  prefix_scorer: precise\n  pod_cache_size: -1\n", "c.yaml:4: router_config.pod_cache_size: negative (-1)"},
		{"workers: 70000\nrouter: llm_d\nrouter_config:\n  prefix_scorer: precise\n", "c.yaml:1: workers: 70000: llm_d's precise scorer lists at most 65535 workers"},
		{"router: dynamo_kv\nrouter_config:\n  router_temperature: -0.5\n", "c.yaml:3: router_config.router_temperature: -0.5 is not a non-negative number"},
		{"workload:\n  mode: open\n  time_scale: -1\n", "c.yaml:3: workload.time_scale: -1 is not a non-negative number"},
		{"workload:\n  mode: burst\n", "c.yaml:2: workload.mode: unknown mode"},
		// A 0 given is not a 0 absent: no default is taken for it.
		{"scheduler:\n  max_num_seqs: 0\n", "c.yaml:2: scheduler.max_num_seqs: 0 is not a valid value (leave the key out for the default)"},
		{"workers: 2\nscheduler:\n  block_size: 16\n  max_num_batched_tokens: 0\n", "c.yaml:4: scheduler.max_num_batched_tokens: 0 is not a valid value"},
		{"scheduler:\n  engine: sglang\n  chunked_prefill_size: 0\n", "c.yaml:3: scheduler.chunked_prefill_size: 0 is not a valid value"},
		{"workload:\n  time_scale: 0\n", "c.yaml:2: workload.time_scale: 0 is not a valid value"},
		{"scheduler:\n  engine: trtllm\n", "c.yaml:2: scheduler.engine: unknown engine \"trtllm\" (want vllm or sglang)"},
		{"schedular:\n  block_size: 16\n", "c.yaml: yaml: unmarshal errors:\n  line 1: field schedular not found"},
		{"workers: [1\n", "c.yaml: yaml: line 1"},
	} {
		_, err := ParseConfig("c.yaml", []byte(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want prefix %q", c.in, err, c.want)
		}
	}
}

// FuzzParseConfig: no input panics, and whatever parses is valid and has
// every default filled.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "workers: 4\n", "scheduler:\n  max_num_seqs: 8\n  enable_prefix_caching: false\n",
		"workload:\n  mode: closed\n  clients: 64\n", "router: random\nseed: 9\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 131072\n  transfer_gbps: 25\n  transfer_latency_s: 0.0004\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 131072\n  transfer_gbps: 25\n  decode_router: least_requests\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 131072\n  transfer_gbps: 25\n  decode_kv_tiers: true\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 131072\n  transfer_gbps: 25\n  prefill_autoscale: {metric: queue_depth, target: 2, max_replicas: 4}\n  decode_autoscale: {metric: in_flight, target: 8}\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 131072\n  transfer_gbps: 25\n  planner: {policy: dynamo_sla, adjustment_interval_s: 60, max_gpu_budget: 12}\n",
	} {
		f.Add([]byte(s))
	}
	if data, err := os.ReadFile("testdata/cluster.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config invalid: %v", err)
		}
		if c.Workers <= 0 || c.Scheduler.BlockSize <= 0 || c.Scheduler.MaxNumBatchedTokens <= 0 ||
			c.Scheduler.MaxNumSeqs <= 0 || c.Scheduler.EnablePrefixCaching == nil || c.Workload.TimeScale <= 0 {
			t.Fatalf("defaults not filled: %+v", c)
		}
	})
}

// The effective configuration is a fixed point, names the engine and its
// own settings, and replays exactly as the configuration it came from,
// for every engine of the schedulers table.
func TestEffectiveConfig(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(31, 200, 40)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	for _, spec := range schedulers {
		cfg := Config{Workers: 2, Scheduler: SchedulerConfig{Engine: spec.name, MaxNumSeqs: 16}}
		blocks := int64(300)
		switch spec.name {
		case EngineVLLM:
			cfg.Scheduler.Engine = "" // the default engine, unnamed
		case EngineSGLang:
			cfg.Scheduler.BlockSize, blocks = 1, 300*16 // token-granular (the validator counts blocks)
		}
		eff := cfg.Effective(blocks)
		if again := eff.Effective(7); !reflect.DeepEqual(again, eff) {
			t.Errorf("%s: Effective is not a fixed point:\n%+v\n%+v", spec.name, eff, again)
		}
		s := eff.Scheduler
		if s.Engine != spec.name || s.KVCacheTokens != blocks*s.BlockSize || s.MaxNumSeqs != 16 {
			t.Errorf("%s: effective scheduler %+v", spec.name, s)
		}
		if spec.name == EngineSGLang && (s.ChunkedPrefillSize == 0 || s.MaxPrefillTokens == 0 || s.MaxRunningRequests == 0 ||
			s.SchedulePolicy == "" || s.ScheduleConservativeness == 0) {
			t.Errorf("sglang: defaults left unset: %+v", s.SGLangConfig)
		}
		if err := eff.Validate(); err != nil {
			t.Errorf("%s: effective configuration invalid: %v", spec.name, err)
		}
		_, a, sa := replay(t, cfg, cost, blocks, reqs)
		_, b, sb := replay(t, eff, cost, 1, reqs) // kv_cache_tokens overrides the model's capacity
		if dump(a) != dump(b) || !reflect.DeepEqual(sa, sb) {
			t.Errorf("%s: replaying the effective configuration differs", spec.name)
		}
	}
	// A kv_cache_tokens that is not a whole number of blocks is recorded
	// as what ran.
	c := Config{Scheduler: SchedulerConfig{KVCacheTokens: 1000, BlockSize: 16}}.Effective(5)
	if c.Scheduler.KVCacheTokens != 992 {
		t.Errorf("kv_cache_tokens 1000 in 16-token blocks: effective %d, want 992", c.Scheduler.KVCacheTokens)
	}
}
