package deploy

import (
	"strings"
	"testing"
)

// prefill_workers counts servers, as workers does: with data parallelism
// (each rank a replay worker) the prefill pool is the first servers'
// ranks; the KV a prompt token sends is a worker's (a TP group's, or one
// DP-attention rank's); given figures are kept; a pool that leaves no
// decode server is refused at its line.
func TestDisaggregationPools(t *testing.T) {
	for _, c := range []struct {
		name, yaml       string
		workers, prefill int
		kv               int64 // KV bytes a prompt token
		gbps             float64
		note             string
	}{
		// Llama-3.1-8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes = 131,072 B a token.
		{"plain", "workers: 3\ndisaggregation:\n  prefill_workers: 1\n", 3, 1, 131072, 40,
			"1 prefill and 2 decode servers; 131072 KV bytes a prompt token (the model's, 1 rank)"},
		{"tp", "tp: 2\nworkers: 3\ndisaggregation:\n  prefill_workers: 2\n  transfer_gbps: 25\n", 3, 2, 131072, 25,
			"2 prefill and 1 decode servers; 131072 KV bytes a prompt token (the model's, 2 ranks), sent at 25 GB/s"},
		{"dp", "dp: 2\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  kv_bytes_per_token: 1000\n", 6, 2, 1000, 40,
			"1 prefill and 2 decode servers (2 ranks each: 2 prefill and 4 decode workers); 1000 KV bytes a prompt token (given, 1 rank)"},
		// DeepSeek-V2-Lite: 27 layers × a 576-wide latent × 2 bytes = 31,104 B a token, whole on each DP-attention rank.
		{"dp attention", "model: deepseek-v2-lite\ntp: 2\nenable_dp_attention: true\nworkers: 2\nscheduler:\n  engine: sglang\ndisaggregation:\n  prefill_workers: 1\n", 4, 2, 31104, 40,
			"1 prefill and 1 decode servers (2 ranks each: 2 prefill and 2 decode workers); 31104 KV bytes a prompt token (the model's, 1 rank)"},
		{"decode router", "workers: 3\ndisaggregation:\n  prefill_workers: 1\n  decode_router: least_requests\n", 3, 1, 131072, 40,
			"; each request's decode worker the one with the fewest outstanding requests (decode_router least_requests)"},
		{"Dynamo's decode router", "workers: 3\nrouter: dynamo_kv\ndisaggregation:\n  prefill_workers: 1\n", 3, 1, 131072, 40,
			"; each request's decode worker the one whose outstanding requests hold the fewest prompt blocks (decode_router dynamo_kv, Dynamo's decode router)"},
	} {
		s := resolveYAML(t, c.yaml)
		d := s.Config.Disaggregation
		if s.Config.Workers != c.workers || d.PrefillWorkers != c.prefill || d.KVBytesPerToken != c.kv || d.TransferGBps != c.gbps {
			t.Errorf("%s: %d workers, %d prefill, %d KV bytes a token, %g GB/s; want %d, %d, %d, %g",
				c.name, s.Config.Workers, d.PrefillWorkers, d.KVBytesPerToken, d.TransferGBps, c.workers, c.prefill, c.kv, c.gbps)
		}
		var note string
		for _, n := range s.Notes {
			if strings.HasPrefix(n, "prefill/decode") {
				note = n
			}
		}
		if !strings.Contains(note, c.note) {
			t.Errorf("%s: note %q\nwant it to hold %q", c.name, note, c.note)
		}
		if err := s.Config.Validate(); err != nil {
			t.Errorf("%s: the resolved configuration is refused: %v", c.name, err)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"workers: 2\ndisaggregation:\n  prefill_workers: 2\n", "c.yaml:3: disaggregation.prefill_workers: 2 leaves no decode worker of 2 workers"},
		{"dp: 2\nworkers: 2\ndisaggregation:\n  prefill_workers: 2\n", "c.yaml:4: disaggregation.prefill_workers: 2 leaves no decode worker of 2 workers"},
		{"workers: 2\ndisaggregation:\n  prefill_workers: 1\n  decode_router: cache_aware\n", `c.yaml:4: disaggregation.decode_router: "cache_aware" is not one of round_robin, least_requests, random, power_of_two, dynamo_kv`},
		{"workers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    predictor: kalman\n    kalman_r: -1\n",
			"c.yaml:7: disaggregation.planner.kalman_r: -1 is not a positive number"},
		{"workers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    predictor: arima\n",
			`c.yaml:6: disaggregation.planner.predictor: "arima" is not modelled (constant and kalman are; Dynamo's arima and prophet are not)`},
		{"workers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_autoscale:\n    metric: queue_depth\n    target: 0\n",
			"c.yaml:6: disaggregation.prefill_autoscale.target: 0 is not a positive number"},
	} {
		if err := resolveErr(c.yaml); err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %s", c.yaml, err, c.want)
		}
	}
}

// The SLA planner's budget counts GPUs: a worker of tp 2 takes two, unless
// the file says otherwise.
func TestDisaggregationPlannerGPUs(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want int
	}{
		{"tp: 2\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    max_gpu_budget: 16\n", 2},
		{"tp: 2\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    max_gpu_budget: 16\n    gpus_per_worker: 1\n", 1},
		{"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n", 1},
	} {
		s := resolveYAML(t, c.yaml)
		if got := s.Config.Disaggregation.Planner.GPUsPerWorker; got != c.want {
			t.Errorf("%q: %d GPUs a worker, want %d", c.yaml, got, c.want)
		}
		if err := s.Config.Validate(); err != nil {
			t.Errorf("%q: the resolved configuration is refused: %v", c.yaml, err)
		}
	}
}

// KV tiers with disaggregation: the prefill pool's by default, both
// pools' with decode_kv_tiers (vLLM); SGLang's HiCache on its prefill
// servers; decode_kv_tiers refused without tiers and under SGLang.
func TestDisaggregationTiers(t *testing.T) {
	for _, c := range []struct{ yaml, note string }{
		{"workers: 3\nscheduler:\n  kv_offloading_size: 10\ndisaggregation:\n  prefill_workers: 1\n",
			"KV tiers on the prefill pool: its workers load their prompts' hits and write what they compute, the decode pool has none"},
		{"workers: 3\nscheduler:\n  kv_offloading_size: 10\ndisaggregation:\n  prefill_workers: 1\n  decode_kv_tiers: true\n",
			"KV tiers on both pools: a decode worker writes the prompts it receives to its own tiers"},
		{"workers: 3\nscheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\ndisaggregation:\n  prefill_workers: 1\n",
			"HiCache on the prefill servers: they prefetch, load and write as an aggregated server does; the decode servers have none"},
	} {
		s := resolveYAML(t, c.yaml)
		if s.Offload == nil || s.Offload.HostBlocks == 0 {
			t.Errorf("%q: no host tier", c.yaml)
		}
		found := false
		for _, n := range s.Notes {
			found = found || strings.HasPrefix(n, c.note)
		}
		if !found {
			t.Errorf("%q: notes %q\nwant one to start %q", c.yaml, s.Notes, c.note)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"workers: 3\ndisaggregation:\n  prefill_workers: 1\n  decode_kv_tiers: true\n",
			"c.yaml:4: disaggregation.decode_kv_tiers: no KV tiers to give the decode pool (scheduler.kv_offloading_size, kv_offloading_backend)"},
		{"workers: 3\nscheduler:\n  engine: sglang\n  enable_hierarchical_cache: true\ndisaggregation:\n  prefill_workers: 1\n  decode_kv_tiers: true\n",
			"c.yaml:7: disaggregation.decode_kv_tiers: an SGLang decode server's HiCache is not modelled yet (the prefill servers' is)"},
	} {
		if err := resolveErr(c.yaml); err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %s", c.yaml, err, c.want)
		}
	}
}

// TestAutoscaleDataParallel checks that the fleet's autoscaler, with data
// parallelism (vLLM's dp, SGLang's DP attention), sizes servers: a
// replica is a server's ranks, and the replicas count servers.
func TestAutoscaleDataParallel(t *testing.T) {
	for _, c := range []struct {
		yaml             string
		workers, replica int
	}{
		{"dp: 2\nworkers: 2\nautoscale:\n  metric: queue_depth\n  target: 2\n  max_replicas: 3\n", 4, 2},
		{"dp: 4\nworkers: 2\nautoscale:\n  metric: queue_depth\n  target: 2\n  max_replicas: 3\n", 8, 4},
		{"model: deepseek-v2-lite\ntp: 2\nenable_dp_attention: true\nworkers: 2\nscheduler:\n  engine: sglang\nautoscale:\n  metric: queue_depth\n  target: 2\n  max_replicas: 3\n", 4, 2},
		{"workers: 2\nautoscale:\n  metric: queue_depth\n  target: 2\n  max_replicas: 3\n", 2, 0},
	} {
		s := resolveYAML(t, c.yaml)
		if a := s.Config.Autoscale; s.Config.Workers != c.workers || a.ReplicaWorkers != c.replica || a.MaxReplicas != 3 {
			t.Errorf("%q: %d workers, replicas of %d, at most %d; want %d, %d, 3", c.yaml, s.Config.Workers, a.ReplicaWorkers, a.MaxReplicas, c.workers, c.replica)
		}
		if err := s.Config.Validate(); err != nil {
			t.Errorf("%q: the resolved configuration is refused: %v", c.yaml, err)
		}
	}
	// A pool's HPA too: prefill_workers and the replicas count servers.
	s := resolveYAML(t, "dp: 2\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  decode_autoscale:\n    metric: in_flight\n    target: 4\n    max_replicas: 4\n")
	d := s.Config.Disaggregation
	if s.Config.Workers != 6 || d.PrefillWorkers != 2 || d.DecodeAutoscale.ReplicaWorkers != 2 || d.DecodeAutoscale.MaxReplicas != 4 {
		t.Errorf("pools: %d workers, %d prefill, decode replicas of %d, at most %d; want 6, 2, 2, 4", s.Config.Workers, d.PrefillWorkers, d.DecodeAutoscale.ReplicaWorkers, d.DecodeAutoscale.MaxReplicas)
	}
	if err := s.Config.Validate(); err != nil {
		t.Errorf("pools: the resolved configuration is refused: %v", err)
	}
	// Dynamo's planner: engines are servers of dp ranks, each rank's
	// GPUs tp's.
	s = resolveYAML(t, "tp: 2\ndp: 2\nworkers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo_sla\n    max_gpu_budget: 16\n")
	d = s.Config.Disaggregation
	if s.Config.Workers != 4 || d.PrefillWorkers != 2 || d.Planner.ReplicaWorkers != 2 || d.Planner.GPUsPerWorker != 2 {
		t.Errorf("planner: %d workers, %d prefill, engines of %d, %d GPUs a worker; want 4, 2, 2, 2", s.Config.Workers, d.PrefillWorkers, d.Planner.ReplicaWorkers, d.Planner.GPUsPerWorker)
	}
	if err := s.Config.Validate(); err != nil {
		t.Errorf("planner: the resolved configuration is refused: %v", err)
	}
}

// An autoscaler's GPU-hours count a worker's GPUs: gpus_per_worker, when
// not given, is the deployment's TP·PP (a DP-attention rank's PP), for
// the fleet's HPA and each pool's, as for the planner's budget.
func TestAutoscaleGPUsPerWorker(t *testing.T) {
	hpa := "  metric: queue_depth\n  target: 2\n"
	for _, c := range []struct {
		yaml string
		gpus int
	}{
		{"workers: 2\nautoscale:\n" + hpa, 1},
		{"tp: 2\nworkers: 2\nautoscale:\n" + hpa, 2},
		{"tp: 2\nworkers: 2\nautoscale:\n" + hpa + "  gpus_per_worker: 1\n", 1},
		{"tp: 2\ndp: 2\nworkers: 2\nautoscale:\n" + hpa, 2},
		{"model: deepseek-v2-lite\ntp: 2\nenable_dp_attention: true\nworkers: 2\nscheduler:\n  engine: sglang\nautoscale:\n" + hpa, 1},
	} {
		s := resolveYAML(t, c.yaml)
		if got := s.Config.Autoscale.GPUsPerWorker; got != c.gpus {
			t.Errorf("%q: gpus_per_worker %d, want %d", c.yaml, got, c.gpus)
		}
	}
	s := resolveYAML(t, `tp: 2
workers: 3
disaggregation:
  prefill_workers: 1
  prefill_autoscale:
    metric: queue_depth
    target: 2
  decode_autoscale:
    metric: in_flight
    target: 8
`)
	if d := s.Config.Disaggregation; d.PrefillAutoscale.GPUsPerWorker != 2 || d.DecodeAutoscale.GPUsPerWorker != 2 {
		t.Errorf("pools: gpus_per_worker %d and %d, want 2 and 2", d.PrefillAutoscale.GPUsPerWorker, d.DecodeAutoscale.GPUsPerWorker)
	}
}
