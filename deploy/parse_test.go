package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/replay"
)

// Every bad cluster file is an error naming the key and its line, with
// the bound or the reason; each message is pinned exactly.
func TestParseClusterErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"empty", "", "c.yaml:1: the cluster file is empty: want a YAML mapping of settings, such as \"workers: 4\""},
		{"comments only", "# nothing\n", "c.yaml:1: the cluster file is empty: want a YAML mapping of settings, such as \"workers: 4\""},
		{"zero workers", "model: llama-3.1-8b\nworkers: 0\n", "c.yaml:2: workers: 0: want a number of workers from 1 to 4096"},
		{"fractional workers", "workers: 2.5\n", "c.yaml:1: workers: 2.5 is not a whole number"},
		{"text workers", "workers: many\n", "c.yaml:1: workers: \"many\" is not a whole number"},
		{"too many workers", "workers: 5000000\n", "c.yaml:1: workers: 5000000: want a number of workers from 1 to 4096"},
		{"second document", "workers: 2\n---\nworkers: 3\n", "c.yaml:3: a second YAML document: a cluster file holds one"},
		{"unknown key", "workers: 2\nwrokers: 3\n", "c.yaml:2: wrokers: unknown key (known here: autoscale, client, cost_model, disaggregation, dp, enable_dp_attention, engine_version, ep, gpu_memory_utilization, hardware, hardware_override, inter_node, kv_cache_dtype, kv_store_gib, mem_fraction_static, model, node, node_override, nodes_per_worker, num_gpu_blocks_override, planner, pp, router, router_config, scheduler, seed, tp, workers, workload)"},
		{"unknown nested key", "scheduler:\n  max_num_seq: 3\n", "c.yaml:2: scheduler.max_num_seq: unknown key (known here: block_size, chunked_prefill_size, context_length, disable_radix_cache, enable_hierarchical_cache, enable_mixed_chunk, enable_prefix_caching, engine, hicache_ratio, hicache_size, hicache_storage_backend, hicache_storage_backend_extra_config, hicache_storage_prefetch_policy, hicache_storage_query_s, hicache_write_policy, ignore_eos, kv_cache_tokens, kv_offloading_backend, kv_offloading_size, lmcache, max_num_batched_tokens, max_num_seqs, max_prefill_tokens, max_running_requests, overlap_schedule, page_size, schedule_conservativeness, schedule_policy, stream_interval)"},
		// A replay setting the deploy package derives (yaml "-": an
		// HPA replica's workers) is no key of the file.
		{"derived setting", "autoscale:\n  \"-\": 2\n", "c.yaml:2: autoscale.-: unknown key (known here: activation_target, container_start_s, cooldown_s, gateway_timeout_s, gpus_per_worker, idle_replicas, max_replicas, metric, metrics, min_replicas, polling_interval_s, scale_down_policies, scale_down_select_policy, scale_down_stabilization_s, scale_down_tolerance, scale_up_policies, scale_up_select_policy, scale_up_stabilization_s, scale_up_tolerance, slo_itl_s, slo_ttft_s, storage_gbps, sync_period_s, target, tolerance, weights_gb)"},
		{"zero max_num_seqs", "scheduler:\n  max_num_seqs: 0\n", "c.yaml:2: scheduler.max_num_seqs: 0: want a number of running sequences from 1 to 1048576"},
		{"negative max_num_seqs", "scheduler:\n  max_num_seqs: -4\n", "c.yaml:2: scheduler.max_num_seqs: -4: want a number of running sequences from 1 to 1048576"},
		{"zero block_size", "scheduler:\n  block_size: 0\n", "c.yaml:2: scheduler.block_size: 0: want a number of tokens per KV block from 1 to 1024"},
		{"huge block_size", "scheduler:\n  block_size: 1e9\n", "c.yaml:2: scheduler.block_size: 1000000000: want a number of tokens per KV block from 1 to 1024"},
		{"zero max_num_batched_tokens", "scheduler: {max_num_batched_tokens: 0}\n", "c.yaml:1: scheduler.max_num_batched_tokens: 0: want a token budget per step from 1 to 16777216"},
		{"negative max_num_batched_tokens", "scheduler:\n\n  max_num_batched_tokens: -1\n", "c.yaml:3: scheduler.max_num_batched_tokens: -1: want a token budget per step from 1 to 16777216"},
		{"zero tp", "tp: 0\n", "c.yaml:1: tp: 0: want a tensor-parallel degree from 1 to 1024"},
		{"negative tp", "tp: -2\n", "c.yaml:1: tp: -2: want a tensor-parallel degree from 1 to 1024"},
		{"zero pp", "pp: 0\n", "c.yaml:1: pp: 0: want a number of pipeline stages from 1 to 1024"},
		{"time scale", "workload:\n  time_scale: 1e12\n", "c.yaml:2: workload.time_scale: 1e+12: want an arrival time multiplier from 1e-06 to 10000"},
		{"zero time scale", "workload:\n  time_scale: 0\n", "c.yaml:2: workload.time_scale: 0: want an arrival time multiplier from 1e-06 to 10000"},
		{"nan", "gpu_memory_utilization: .nan\n", "c.yaml:1: gpu_memory_utilization: \".nan\" is not a finite number"},
		{"memory utilization", "gpu_memory_utilization: 1.5\n", "c.yaml:1: gpu_memory_utilization: 1.5: want a fraction of GPU memory above 0 to 1"},
		{"negative kv tokens", "scheduler:\n  kv_cache_tokens: -1\n", "c.yaml:2: scheduler.kv_cache_tokens: -1: want a KV capacity in tokens (0: derived from the model) from 1 to 1099511627776"},
		{"bool", "scheduler:\n  enable_prefix_caching: yes please\n", "c.yaml:2: scheduler.enable_prefix_caching: \"yes please\" is not true or false"},
		{"null", "workers:\n", "c.yaml:1: workers: no value (leave the key out for the default)"},
		{"list", "workers: [1, 2]\n", "c.yaml:1: workers: want a single value, not a list"},
		{"mapping for a value", "workers: {n: 2}\n", "c.yaml:1: workers: want a single value, not a mapping"},
		{"policies not a list", "autoscale:\n  metric: queue_depth\n  target: 1\n  scale_up_policies: {type: pods}\n", "c.yaml:4: autoscale.scale_up_policies: want a list, not a mapping"},
		{"policy value", "autoscale:\n  metric: queue_depth\n  target: 1\n  scale_up_policies:\n    - {type: pods, value: 4, period_s: 15}\n    - {type: percent, value: 2.5, period_s: 15}\n", "c.yaml:6: autoscale.scale_up_policies[2].value: 2.5 is not a whole number"},
		{"policy key", "autoscale:\n  metric: queue_depth\n  target: 1\n  scale_down_policies:\n    - {type: pods, value: 4, periodSeconds: 15}\n", "c.yaml:5: autoscale.scale_down_policies[1].periodSeconds: unknown key (known here: period_s, type, value)"},
		{"policy type", "autoscale:\n  metric: queue_depth\n  target: 1\n  scale_down_policies: [{type: pod, value: 1, period_s: 60}]\n", "c.yaml:4: autoscale.scale_down_policies: policy 1: unknown type \"pod\" (want pods or percent)"},
		{"no policy", "autoscale:\n  metric: queue_depth\n  target: 1\n  scale_up_policies: []\n", "c.yaml:4: autoscale.scale_up_policies: must hold at least one policy, as an HPA's"},
		{"scale to zero on kv_usage", "autoscale:\n  metric: kv_usage\n  target: 0.5\n  min_replicas: 0\n", "c.yaml:2: autoscale.metric: kv_usage comes from the workers alone, so a fleet at zero would never wake: scale to zero needs queue_depth, in_flight or request_rate"},
		{"cooldown without scale to zero", "autoscale:\n  metric: queue_depth\n  target: 1\n  cooldown_s: 60\n", "c.yaml:4: autoscale.cooldown_s: applies to scale to zero alone (min_replicas: 0 or idle_replicas: 0)"},
		{"idle replicas", "autoscale:\n  metric: queue_depth\n  target: 1\n  min_replicas: 2\n  idle_replicas: 1\n", "c.yaml:5: autoscale.idle_replicas: 1: KEDA takes 0 alone (the HPA cannot hold fewer replicas than its minimum otherwise)"},
		{"metrics not a list", "autoscale:\n  metrics: {metric: queue_depth, target: 1}\n", "c.yaml:2: autoscale.metrics: want a list, not a mapping"},
		{"metrics key", "autoscale:\n  metrics:\n    - {metric: queue_depth, target: 1}\n    - {metric: kv_usage, targets: 1}\n", "c.yaml:4: autoscale.metrics[2].targets: unknown key (known here: activation_target, metric, target)"},
		{"metrics and metric", "autoscale:\n  metric: queue_depth\n  target: 1\n  metrics: [{metric: kv_usage, target: 0.5}]\n", "c.yaml:4: autoscale.metrics: give metric and target, or metrics, not both"},
		{"not a mapping", "- workers\n", "c.yaml:1: want a mapping of settings (key: value), not a list"},
		{"twice", "workers: 2\nworkers: 3\n", "c.yaml:2: workers: given twice"},
		{"syntax", "workers: 2\n  tp: [\n", "c.yaml:2: mapping values are not allowed in this context"},
		{"negative seed", "seed: -1\n", "c.yaml:1: seed: -1 is not a non-negative whole number"},
		{"unknown router", "workers: 2\nrouter: best\n", "c.yaml:2: router: unknown router \"best\" (want round_robin, random, least_requests, least_tokens, power_of_two, session_affinity, sglang_cache_aware, llm_d, dynamo_kv, max_prefix, vllm_dp or recorded)"},
		{"two errors", "workers: 0\ntp: 0\n", "c.yaml:1: workers: 0: want a number of workers from 1 to 4096\nc.yaml:2: tp: 0: want a tensor-parallel degree from 1 to 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCluster("c.yaml", []byte(c.file))
			if err == nil || err.Error() != c.want {
				t.Errorf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
}

// A good file is read over the defaults, and the keys it gave are known
// with their lines.
func TestParseCluster(t *testing.T) {
	c, err := ParseCluster("c.yaml", []byte(`# a comment
hardware: h200
model: llama-3.3-70b
tp: 4
workers: 2
seed: 18446744073709551615
scheduler:
  max_num_seqs: 128
  block_size: 1e1
  enable_prefix_caching: false
workload:
  time_scale: 0.5
hardware_override:
  mem_mib: 140000
`))
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultCluster()
	if c.Hardware != "h200" || c.Model != "llama-3.3-70b" || c.TP != 4 || c.Workers != 2 || c.Seed != 1<<64-1 ||
		c.Scheduler.MaxNumSeqs != 128 || c.Scheduler.BlockSize != 10 || *c.Scheduler.EnablePrefixCaching ||
		c.Workload.TimeScale != 0.5 || c.HardwareOverride.MemMiB != 140000 ||
		c.Scheduler.MaxNumBatchedTokens != d.Scheduler.MaxNumBatchedTokens || c.GPUMemoryUtilization != 0.9 {
		t.Errorf("parsed %+v", c)
	}
	if from, ok := c.Given("scheduler.max_num_seqs"); !ok || from != "c.yaml:8" {
		t.Errorf("max_num_seqs given at %q, %v", from, ok)
	}
	if _, ok := c.Given("scheduler.max_num_batched_tokens"); ok {
		t.Error("a default counted as given")
	}
	if !strings.Contains(c.YAML(), "max_num_seqs: 128") {
		t.Errorf("YAML:\n%s", c.YAML())
	}
	// The defaults parse back to themselves.
	back, err := ParseCluster("d.yaml", []byte(DefaultCluster().YAML()))
	if err != nil || back.YAML() != DefaultCluster().YAML() {
		t.Errorf("defaults round trip: %v\n%s", err, back.YAML())
	}
}

// Settings are checked as the file's values are, and errors name the
// flag with its bound.
func TestWithSettings(t *testing.T) {
	base := DefaultCluster()
	for _, c := range []struct {
		set  Setting
		want string
	}{
		{Setting{"workers", 0, "--workers"}, "--workers 0: want a number of workers from 1 to 4096"},
		{Setting{"workers", 5000000, "--workers"}, "--workers 5000000: want a number of workers from 1 to 4096"},
		{Setting{"tp", -1, "--tp"}, "--tp -1: want a tensor-parallel degree from 1 to 1024"},
		{Setting{"scheduler.block_size", int64(0), "--block-size"}, "--block-size 0: want a number of tokens per KV block from 1 to 1024"},
		{Setting{"workload.time_scale", 1e9, "--time-scale"}, "--time-scale 1e+09: want an arrival time multiplier from 1e-06 to 10000"},
		{Setting{"scheduler.engine", "trt", "--scheduler"}, "--scheduler: unknown engine \"trt\" (want vllm or sglang)"},
		{Setting{"workers", "two", "--workers"}, "--workers: cluster key workers: a string is not a int"},
		{Setting{"wrokers", 2, "--workers"}, "--workers: unknown cluster key \"wrokers\""},
		{Setting{"workers", 2.5, "x"}, "x: cluster key workers: a float64 is not a int"},
	} {
		if _, err := base.With(c.set); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %s", c.set, err, c.want)
		}
	}
	c, err := base.With(Setting{"workers", 8, "--workers"}, Setting{"scheduler.enable_prefix_caching", false, "--no-cache"},
		Setting{"scheduler.max_num_batched_tokens", 2048, "--max-num-batched-tokens"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 8 || *c.Scheduler.EnablePrefixCaching || c.Scheduler.MaxNumBatchedTokens != 2048 {
		t.Errorf("settings not applied: %+v", c)
	}
	if from, _ := c.Given("workers"); from != "--workers" {
		t.Errorf("workers given by %q", from)
	}
	// With copies: the base is unchanged.
	if base.Workers != 1 || !*base.Scheduler.EnablePrefixCaching {
		t.Errorf("With changed its receiver: %+v", base)
	}
	if _, ok := base.Given("workers"); ok {
		t.Error("With marked its receiver")
	}
}

// FuzzParseCluster: no panic, and a file that parses passes the checks
// again and marshals to a file that parses to the same YAML.
func FuzzParseCluster(f *testing.F) {
	for _, s := range []string{"workers: 2\n", "scheduler:\n  max_num_seqs: 4\n", "hardware_override: {mem_mib: 4}\n", DefaultCluster().YAML(), "workers: 1e3\n", "---\n", "a: &x 1\nb: *x\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  transfer_gbps: 25\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  decode_router: least_requests\n",
		"workers: 3\nscheduler:\n  kv_offloading_size: 10\ndisaggregation:\n  prefill_workers: 1\n  decode_kv_tiers: true\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  prefill_autoscale:\n    metric: queue_depth\n    target: 2\n    max_replicas: 4\n  decode_autoscale:\n    metrics: [{metric: kv_usage, target: 0.5}]\n",
		"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    itl_s: 0.02\n    max_gpu_budget: 16\n    no_correction: true\n",
		"autoscale:\n  metric: request_rate\n  target: 2\n  min_replicas: 0\n  polling_interval_s: 5\n  cooldown_s: 0\n  gateway_timeout_s: 1.5\n",
		"autoscale:\n  metrics:\n    - {metric: in_flight, target: 4, activation_target: 1}\n    - {metric: kv_usage, target: 0.8}\n  min_replicas: 0\n",
		"autoscale:\n  metric: queue_depth\n  target: 2\n  scale_up_policies:\n    - {type: pods, value: 2, period_s: 60}\n  scale_down_policies: [{type: percent, value: 50, period_s: 30}]\n  scale_down_select_policy: min\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCluster("f.yaml", data)
		if err != nil {
			return
		}
		if err := c.check(); err != nil {
			t.Fatalf("parsed but fails its checks: %v", err)
		}
		back, err := ParseCluster("back.yaml", []byte(c.YAML()))
		if err != nil || back.YAML() != c.YAML() {
			t.Fatalf("round trip: %v\n%s\n%s", err, c.YAML(), back.YAML())
		}
	})
}

// A list of settings (autoscale's scaling policies) is read element by
// element, in either YAML style.
func TestParseClusterPolicies(t *testing.T) {
	c, err := ParseCluster("c.yaml", []byte(`autoscale:
  metric: queue_depth
  target: 2
  scale_up_policies:
    - type: pods
      value: 2
      period_s: 60
    - {type: percent, value: 50, period_s: 30}
  scale_down_policies: [{type: pods, value: 1, period_s: 600}]
  scale_down_select_policy: min
`))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Autoscale
	want := []replay.ScalingPolicy{{Type: "pods", Value: 2, PeriodSec: 60}, {Type: "percent", Value: 50, PeriodSec: 30}}
	if !slices.Equal(a.ScaleUpPolicies, want) {
		t.Errorf("scale-up policies %+v, want %+v", a.ScaleUpPolicies, want)
	}
	if want := []replay.ScalingPolicy{{Type: "pods", Value: 1, PeriodSec: 600}}; !slices.Equal(a.ScaleDownPolicies, want) || a.ScaleDownSelectPolicy != "min" {
		t.Errorf("scale-down policies %+v selected by %q, want %+v by min", a.ScaleDownPolicies, a.ScaleDownSelectPolicy, want)
	}
}

// Scale to zero's settings: min_replicas 0 is a fleet of none, where a
// min_replicas left out is the default (1, filled by replay's defaults).
func TestParseClusterScaleToZero(t *testing.T) {
	c, err := ParseCluster("c.yaml", []byte("autoscale:\n  metric: in_flight\n  target: 4\n  min_replicas: 0\n  activation_target: 2\n  cooldown_s: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Autoscale
	if a.MinReplicas == nil || *a.MinReplicas != 0 || a.ActivationTarget != 2 || a.CooldownSec == nil || *a.CooldownSec != 0 {
		t.Errorf("autoscale %+v: want min_replicas 0, activation 2, cooldown 0", a)
	}
	back, err := ParseCluster("back.yaml", []byte(c.YAML()))
	if err != nil || back.YAML() != c.YAML() {
		t.Fatalf("round trip: %v\n%s", err, c.YAML())
	}
	c, err = ParseCluster("c.yaml", []byte("autoscale:\n  metric: in_flight\n  target: 4\n"))
	if err != nil || c.Autoscale.MinReplicas != nil {
		t.Errorf("without min_replicas: %v, min %v; want none given", err, c.Autoscale.MinReplicas)
	}
}

// Several autoscaling metrics are a list of mappings, in either YAML style.
func TestParseClusterMetrics(t *testing.T) {
	c, err := ParseCluster("c.yaml", []byte("autoscale:\n  metrics:\n    - metric: in_flight\n      target: 4\n      activation_target: 1\n    - {metric: kv_usage, target: 0.8}\n  min_replicas: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []replay.AutoscaleMetric{{Metric: "in_flight", Target: 4, ActivationTarget: 1}, {Metric: "kv_usage", Target: 0.8}}
	if !slices.Equal(c.Autoscale.Metrics, want) {
		t.Errorf("metrics %+v, want %+v", c.Autoscale.Metrics, want)
	}
	back, err := ParseCluster("back.yaml", []byte(c.YAML()))
	if err != nil || back.YAML() != c.YAML() {
		t.Fatalf("round trip: %v\n%s", err, c.YAML())
	}
}
