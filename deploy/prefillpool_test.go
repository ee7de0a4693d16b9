package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/model"
)

// A prefill pool of its own deployment: another TP size or another GPU
// for the prefill workers. Its roofline prices their steps, its KV
// capacity is sized on its own GPUs as the engine sizes it, the KV a
// prompt token sends is its ranks', the link its node's, and its
// autoscaler counts its GPUs; the decode pool keeps the cluster's.
func TestPrefillDeployment(t *testing.T) {
	base := resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 4\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n")
	s := resolveYAML(t, `model: llama-3.1-70b
hardware: h100
tp: 4
workers: 3
disaggregation:
  prefill_workers: 1
  prefill_tp: 2
  prefill_autoscale:
    metric: queue_depth
    target: 2
  decode_autoscale:
    metric: in_flight
    target: 8
`)
	p := s.Prefill
	if p == nil {
		t.Fatal("no prefill pool of its own")
	}
	if p.Deployment.TP != 2 || s.Deployment.TP != 4 || p.Deployment.Hardware.Name != "h100" || p.Step != model.StepModel(p.Deployment) {
		t.Errorf("prefill TP%d on %s, decode TP%d; want TP2 on h100, TP4", p.Deployment.TP, p.Deployment.Hardware.Name, s.Deployment.TP)
	}
	// Two H100s hold the 70B's weights at half the GPUs' memory that
	// four do: less KV a worker (vLLM's gpu_memory_utilization sizing),
	// in whole blocks.
	if s.KVTokens != base.KVTokens || !(p.KVTokens > 0 && p.KVTokens < s.KVTokens/2) || p.KVBlocks != p.KVTokens/16 {
		t.Errorf("KV tokens: prefill %d (%d blocks), decode %d, the cluster's %d; want 0 < prefill < half the decode's, decode the cluster's", p.KVTokens, p.KVBlocks, s.KVTokens, base.KVTokens)
	}
	d := s.Config.Disaggregation
	if d.KVBytesPerToken != p.Deployment.KVBytesPerTokenPerRank()*2 || d.KVBytesPerToken != base.Config.Disaggregation.KVBytesPerToken {
		// The 70B's 8 KV heads split over 2 or 4 ranks: the same bytes.
		t.Errorf("%d KV bytes a token, want the prefill ranks' %d (the cluster's %d)", d.KVBytesPerToken, p.Deployment.KVBytesPerTokenPerRank()*2, base.Config.Disaggregation.KVBytesPerToken)
	}
	if d.PrefillAutoscale.GPUsPerWorker != 2 || d.DecodeAutoscale.GPUsPerWorker != 4 {
		t.Errorf("gpus_per_worker: prefill %d, decode %d; want 2, 4", d.PrefillAutoscale.GPUsPerWorker, d.DecodeAutoscale.GPUsPerWorker)
	}
	if err := s.Config.Validate(); err != nil {
		t.Errorf("the resolved configuration is refused: %v", err)
	}
	if got, want := s.FleetKVBlocks(), p.KVBlocks+2*s.KVBlocks; got != want {
		t.Errorf("fleet KV %d blocks, want %d", got, want)
	}
	if h := s.Header(); h != "llama-3.1-70b on 4×h100 (TP4), vllm, 3 workers (1 prefill on 2×h100 (TP2), 2 decode: disaggregated)" {
		t.Errorf("header %q", h)
	}
	note := strings.Join(s.Notes, "\n")
	if !strings.Contains(note, "prefill pool of its own deployment: llama-3.1-70b on 2×h100 (TP2) a worker, KV ") {
		t.Errorf("notes lack the prefill pool's:\n%s", note)
	}

	// A pool without an autoscaler keeps its GPUs a worker for the
	// fleet's GPU-hours, and the effective cluster reads back.
	s = resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 4\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 2\n  prefill_autoscale:\n    metric: queue_depth\n    target: 2\n")
	if d := s.Config.Disaggregation; d.PrefillAutoscale.GPUsPerWorker != 2 || d.DecodeAutoscale.GPUsPerWorker != 4 || d.DecodeAutoscale.On() {
		t.Errorf("gpus_per_worker: prefill %d, decode %d (autoscaled %v); want 2, 4 (no)", d.PrefillAutoscale.GPUsPerWorker, d.DecodeAutoscale.GPUsPerWorker, d.DecodeAutoscale.On())
	}
	if _, err := ParseCluster("effective.yaml", []byte(s.Cluster.YAML())); err != nil {
		t.Errorf("the effective cluster does not read back: %v", err)
	}

	// Dynamo's planner: its budget counts each pool's GPUs a worker
	// (prefill_engine_num_gpu, decode_engine_num_gpu).
	s = resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 4\nworkers: 3\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 2\n  planner:\n    policy: dynamo_sla\n    max_gpu_budget: 32\n")
	if p := s.Config.Disaggregation.Planner; p.PrefillGPUsPerWorker != 2 || p.GPUsPerWorker != 4 {
		t.Errorf("planner: %d GPUs a prefill worker, %d a decode worker; want 2, 4", p.PrefillGPUsPerWorker, p.GPUsPerWorker)
	}
	if err := s.Config.Validate(); err != nil {
		t.Errorf("planner: the resolved configuration is refused: %v", err)
	}

	// KV tiers, the prefill pool's alone: sized by its deployment (its
	// ranks' PCIe links, its node).
	s = resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 4\nworkers: 3\nscheduler:\n  kv_offloading_size: 8\ndisaggregation:\n  prefill_workers: 1\n  prefill_hardware: h200\n  prefill_tp: 2\n")
	if o := s.Offload; o == nil || o.GPUsPerWorker != 2 || o.Node.Name != "hgx-h200" || o.KVBytesPerToken != s.Prefill.Deployment.KVBytesPerTokenPerRank()*2 {
		t.Errorf("KV tiers %+v; want the prefill pool's: 2 GPUs a worker on an hgx-h200 node", o)
	}

	// Batch limits of its own on the cluster's deployment: vLLM profiles
	// the larger token budget's activations, leaving less KV.
	s = resolveYAML(t, "workers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_scheduler:\n    max_num_batched_tokens: 32768\n")
	if p := s.Prefill; p == nil || p.Deployment.TP != s.Deployment.TP || p.Deployment.Hardware.Name != s.Deployment.Hardware.Name || !(p.KVTokens < s.KVTokens) {
		t.Fatalf("prefill_scheduler: %+v; want the cluster's deployment with less KV than its %d tokens", p, s.KVTokens)
	}
	if note := strings.Join(s.Notes, "\n"); !strings.Contains(note, "; its own max_num_batched_tokens 32768, the scheduler's other settings the cluster's") {
		t.Errorf("notes lack the prefill pool's limits:\n%s", note)
	}

	// Another GPU: its own preset, node and network (the cluster's node
	// is the decode GPUs').
	s = resolveYAML(t, "model: llama-3.1-8b\nhardware: h100\nnode: hgx-h100\nworkers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_hardware: a100-40gb\n")
	if p := s.Prefill; p == nil || p.Deployment.Hardware.Name != "a100-40gb" || s.Deployment.Hardware.Name != "h100" || !(p.KVTokens < s.KVTokens) {
		t.Fatalf("prefill hardware: %+v; want a100-40gb with less KV than the h100's", p)
	}
	a100 := model.NodeFor(s.Prefill.Deployment.Hardware)
	if d := s.Config.Disaggregation; d.TransferGBps != a100.Network.Bandwidth/1e9 || a100.Name == "hgx-h100" {
		t.Errorf("KV sent at %v GB/s, want the %s node's %v", d.TransferGBps, a100.Name, a100.Network.Bandwidth/1e9)
	}
}

// A prefill pool of its own deployment with data parallelism: a prefill
// server of dp ranks, each of prefill_tp GPUs, the experts over all its
// GPUs (EP = TP·DP): Qwen3-30B-A3B on H100s, the cluster's servers of two
// TP1 ranks (EP2), the prefill servers' of two TP2 ranks (EP4, half the
// experts' weights a GPU); the planner's engine is a server of two ranks,
// a prefill rank two GPUs.
func TestPrefillDeploymentDataParallel(t *testing.T) {
	s := resolveYAML(t, "model: qwen3-30b-a3b-instruct-2507\nhardware: h100\nworkers: 3\ndp: 2\nep: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 2\n  planner:\n    policy: dynamo\n    max_gpu_budget: 16\n")
	p, d := s.Prefill, s.Deployment
	if p == nil || p.Deployment.TP != 2 || p.Deployment.DP != 2 || p.Deployment.EP != 4 || d.TP != 1 || d.EP != 2 || !(p.KVTokens > s.KVTokens) {
		t.Fatalf("prefill %+v, cluster TP%d EP%d; want TP2 DP2 EP4 with more KV a rank than the cluster's TP1 EP2", p, d.TP, d.EP)
	}
	if pl := s.Config.Disaggregation.Planner; pl.ReplicaWorkers != 2 || pl.PrefillGPUsPerWorker != 2 || pl.GPUsPerWorker != 1 || s.Config.Disaggregation.PrefillWorkers != 2 {
		t.Errorf("planner %+v, %d prefill workers; want engines of 2 ranks, 2 GPUs a prefill rank and 1 a decode rank, 2 prefill workers", pl, s.Config.Disaggregation.PrefillWorkers)
	}
	if h := s.Header(); !strings.Contains(h, "6 workers (2 prefill on 2×h100 (TP2 DP2 EP4), 4 decode: disaggregated)") {
		t.Errorf("header %q", h)
	}
}

// A prefill pool of its own data-parallel size (prefill_dp), as vLLM's
// wide-EP PD deployments launch the two pools: Qwen3-30B-A3B on H100s,
// decode servers of four TP1 ranks (EP4), the prefill server of two
// (EP2, half the experts' weights a GPU where a decode rank holds a
// quarter: less KV a prefill rank). 1 prefill and 2 decode servers are 2
// and 8 workers; each pool's API server fronts its server's ranks, each
// pool's HPA replica is a server of them, the planner's engines too.
// Under DP attention, whose ranks are its TP, prefill_dp is refused.
func TestPrefillDeploymentOwnDP(t *testing.T) {
	hpa := "    metric: queue_depth\n    target: 2\n    max_replicas: 3\n"
	s := resolveYAML(t, "model: qwen3-30b-a3b-instruct-2507\nhardware: h100\nworkers: 3\ndp: 4\nep: 4\ndisaggregation:\n  prefill_workers: 1\n  prefill_dp: 2\n"+
		"  prefill_autoscale:\n"+hpa+"  decode_autoscale:\n"+hpa)
	c, d, p := s.Config, s.Config.Disaggregation, s.Prefill
	if c.Workers != 10 || d.PrefillWorkers != 2 || c.Client.APIServerRanks != 4 || c.Client.PrefillAPIServerRanks != 2 {
		t.Errorf("%d workers, %d prefill, API servers of %d and %d prefill ranks; want 10, 2, 4, 2", c.Workers, d.PrefillWorkers, c.Client.APIServerRanks, c.Client.PrefillAPIServerRanks)
	}
	if d.PrefillAutoscale.ReplicaWorkers != 2 || d.DecodeAutoscale.ReplicaWorkers != 4 {
		t.Errorf("HPA replicas of %d and %d workers; want 2 (prefill) and 4 (decode)", d.PrefillAutoscale.ReplicaWorkers, d.DecodeAutoscale.ReplicaWorkers)
	}
	if p == nil || p.Deployment.DP != 2 || p.Deployment.EP != 2 || p.Deployment.TP != 1 || s.Deployment.EP != 4 || !(p.KVTokens < s.KVTokens) {
		t.Fatalf("prefill pool %+v beside the cluster's EP%d, %d KV tokens; want TP1 DP2 EP2 with less KV a rank", p, s.Deployment.EP, s.KVTokens)
	}
	notesHold(t, s,
		"dp 4, prefill_dp 2: 1 prefill server(s) × 2 and 2 decode server(s) × 4 data-parallel ranks replayed as 10 workers",
		"one API server per 2 prefill ranks and per 4 decode ranks",
		"1 prefill and 2 decode servers (2 ranks a prefill server, 4 a decode server: 2 prefill and 8 decode workers)",
		"prefill pool of its own deployment: qwen3-30b-a3b-instruct-2507 on 1×h100 (TP1 DP2 EP2) a rank, each a worker, servers of 2, KV ",
	)
	if err := c.Validate(); err != nil {
		t.Errorf("the resolved configuration is refused: %v", err)
	}
	// The prefill servers' API server ranks given by hand: kept (the
	// file counts them in ranks, as the replay does).
	s = resolveYAML(t, "model: qwen3-30b-a3b-instruct-2507\nhardware: h100\nworkers: 3\ndp: 4\nep: 4\nclient:\n  prefill_api_server_ranks: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_dp: 2\n")
	if n := s.Config.Client.PrefillAPIServerRanks; n != 2 {
		t.Errorf("prefill_api_server_ranks given 2: %d", n)
	}
	s = resolveYAML(t, "model: qwen3-30b-a3b-instruct-2507\nhardware: h100\nworkers: 3\ndp: 4\nep: 4\ndisaggregation:\n  prefill_workers: 1\n  prefill_dp: 2\n  planner:\n    policy: dynamo\n    max_gpu_budget: 16\n")
	if pl := s.Config.Disaggregation.Planner; pl.ReplicaWorkers != 4 || pl.PrefillReplicaWorkers != 2 {
		t.Errorf("planner %+v; want decode engines of 4 ranks, prefill engines of 2", pl)
	}
	err := resolveErr("model: deepseek-v2-lite\ntp: 2\nenable_dp_attention: true\nworkers: 3\nscheduler:\n  engine: sglang\ndisaggregation:\n  prefill_workers: 1\n  prefill_dp: 4\n")
	if want := "c.yaml:9: disaggregation.prefill_dp: 4: with enable_dp_attention a server's ranks are its TP: give prefill_tp"; err == nil || err.Error() != want {
		t.Errorf("prefill_dp under DP attention: error %v, want %s", err, want)
	}
}

// A prefill pool of its own TP with SGLang's DP attention (DeepSeek's PD
// deployments: prefill and decode servers of other sizes, each rank a
// replay worker): DeepSeek-V2-Lite with one prefill server of TP4 beside
// two decode servers of TP2 is 4 prefill ranks and 4 decode ranks; a
// prefill server's HPA replica is its 4 ranks, a decode server's its 2,
// each rank one GPU; one API server fronts a prefill server's 4 ranks
// and another each decode server's 2; the prefill deployment is DP
// attention of TP4, a rank's KV its own (more than a TP2 rank's: a
// quarter of the weights a GPU), its CUDA graphs capped at 96 as the
// cluster's. Dynamo's planner sizes prefill engines of 4 ranks and decode
// engines of 2.
func TestPrefillDeploymentDPAttention(t *testing.T) {
	hpa := "    metric: queue_depth\n    target: 2\n    max_replicas: 3\n"
	s := resolveYAML(t, "model: deepseek-v2-lite\nhardware: h100\ntp: 2\nenable_dp_attention: true\nworkers: 3\nscheduler:\n  engine: sglang\n"+
		"disaggregation:\n  prefill_workers: 1\n  prefill_tp: 4\n  prefill_autoscale:\n"+hpa+"  decode_autoscale:\n"+hpa)
	c, d := s.Config, s.Config.Disaggregation
	if c.Workers != 8 || d.PrefillWorkers != 4 || c.Client.APIServerRanks != 2 || c.Client.PrefillAPIServerRanks != 4 {
		t.Errorf("%d workers, %d prefill, API servers of %d and %d prefill ranks; want 8, 4, 2, 4", c.Workers, d.PrefillWorkers, c.Client.APIServerRanks, c.Client.PrefillAPIServerRanks)
	}
	if a, b := d.PrefillAutoscale, d.DecodeAutoscale; a.ReplicaWorkers != 4 || b.ReplicaWorkers != 2 || a.GPUsPerWorker != 1 || b.GPUsPerWorker != 1 {
		t.Errorf("prefill HPA %+v, decode HPA %+v; want replicas of 4 and 2 ranks, a GPU a rank", a, b)
	}
	p := s.Prefill
	if p == nil || !p.Deployment.DPAttention || p.Deployment.TP != 4 || p.Deployment.CUDAGraphMaxBS > 96 || !(p.KVTokens > s.KVTokens) || d.KVBytesPerToken != 31104 {
		t.Fatalf("prefill pool %+v, %d KV bytes a token; want DP attention of TP4, CUDA graphs to 96 at most, more KV a rank than the cluster's %d, a rank's 31104 B", p, d.KVBytesPerToken, s.KVTokens)
	}
	notesHold(t, s,
		"enable_dp_attention: 1 prefill server(s) × 4 and 2 decode server(s) × 2 DP-attention ranks (prefill_tp 4) replayed as 8 workers",
		"one API server (TokenizerManager) per 4 prefill ranks and per 2 decode ranks",
		"1 prefill and 2 decode servers (4 ranks a prefill server, 2 a decode server: 4 prefill and 4 decode workers)",
		"prefill pool of its own deployment: deepseek-v2-lite on 4×h100 (TP4 DP-attention) a server, each of its ranks a worker, KV ",
	)
	if h := s.Header(); !strings.Contains(h, "8 workers (4 prefill on 4×h100 (TP4 DP-attention), 4 decode: disaggregated)") {
		t.Errorf("header %q", h)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the resolved configuration is refused: %v", err)
	}
	s = resolveYAML(t, "model: deepseek-v2-lite\ntp: 2\nenable_dp_attention: true\nworkers: 3\nscheduler:\n  engine: sglang\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 4\n  planner:\n    policy: dynamo\n    max_gpu_budget: 16\n")
	if pl := s.Config.Disaggregation.Planner; pl.ReplicaWorkers != 2 || pl.PrefillReplicaWorkers != 4 || pl.GPUsPerWorker != 1 || pl.PrefillGPUsPerWorker != 1 {
		t.Errorf("planner %+v; want decode engines of 2 ranks, prefill engines of 4, a GPU a rank", pl)
	}
	if err := s.Config.Validate(); err != nil {
		t.Errorf("the resolved configuration with the planner is refused: %v", err)
	}
}

// A prefill worker of its own deployment spans its own nodes
// (prefill_nodes_per_worker, on the cluster's inter_node network): TP16
// over two H100 nodes beside decode workers of TP8 on one; or the
// reverse, the cluster's workers over two nodes and the prefill pool's on
// one. Without the network between its nodes it is refused; a worker of
// more GPUs than its node on one node is noted as priced as one NVLink
// domain.
func TestPrefillDeploymentNodes(t *testing.T) {
	net := "inter_node:\n  transport: rdma\n  bandwidth_gbps: 400\n"
	s := resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 8\nworkers: 2\n"+net+"disaggregation:\n  prefill_workers: 1\n  prefill_tp: 16\n  prefill_nodes_per_worker: 2\n")
	if in := s.Prefill.Deployment.InterNode; in == nil || in.Nodes != 2 || in.Transport != "rdma" || s.Deployment.InterNode != nil {
		t.Errorf("prefill inter-node %+v, cluster's %+v; want the prefill workers over 2 nodes on rdma, the cluster's on one", in, s.Deployment.InterNode)
	}
	if h := s.Header(); !strings.Contains(h, "1 prefill on 16×h100 (TP16 over 2 nodes)") {
		t.Errorf("header %q", h)
	}
	s = resolveYAML(t, "model: llama-3.1-70b\nhardware: h100\ntp: 16\nnodes_per_worker: 2\nworkers: 2\n"+net+"disaggregation:\n  prefill_workers: 1\n  prefill_tp: 8\n")
	if s.Prefill.Deployment.InterNode != nil || s.Deployment.InterNode == nil || s.Deployment.InterNode.Nodes != 2 {
		t.Errorf("prefill inter-node %+v, cluster's %+v; want the prefill workers on one node, the cluster's over 2", s.Prefill.Deployment.InterNode, s.Deployment.InterNode)
	}
	// A worker of more GPUs than its node, on none: a note says it is
	// priced as one NVLink domain.
	domain := func(s *Setup) string {
		for _, n := range s.Notes {
			if strings.Contains(n, "NVLink domain") {
				return n
			}
		}
		return ""
	}
	if n := domain(s); n != "" {
		t.Errorf("the cluster's workers over 2 nodes: %q", n)
	}
	for _, c := range []struct{ yaml, want string }{
		{"model: llama-3.1-70b\nhardware: h100\ntp: 8\nworkers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 16\n",
			"a prefill worker of 16 GPUs (TP16, PP1) on hgx-h100 nodes of 8: priced as one NVLink domain, which no node is (disaggregation.prefill_nodes_per_worker and inter_node price the crossing between nodes)"},
		{"model: llama-3.1-70b\nhardware: h100\ntp: 16\nworkers: 1\n",
			"a worker of 16 GPUs (TP16, PP1) on hgx-h100 nodes of 8: priced as one NVLink domain, which no node is (nodes_per_worker and inter_node price the crossing between nodes)"},
		{"model: llama-3.1-70b\nhardware: h100\ntp: 8\nworkers: 1\n", ""},
	} {
		if n := domain(resolveYAML(t, c.yaml)); n != c.want {
			t.Errorf("%q: note %q, want %q", c.yaml, n, c.want)
		}
	}
	err := resolveErr("model: llama-3.1-70b\nhardware: h100\ntp: 8\nworkers: 2\ndisaggregation:\n  prefill_workers: 1\n  prefill_tp: 16\n  prefill_nodes_per_worker: 2\n")
	if err == nil || !strings.Contains(err.Error(), "c.yaml:8: disaggregation.prefill_nodes_per_worker: 2: a prefill worker spanning nodes needs inter_node") {
		t.Errorf("no inter_node: %v", err)
	}
}

// KV tiers on both pools with a prefill pool of its own deployment
// (decode_kv_tiers): the prefill pool's sized by its deployment (two
// H200s a worker: two PCIe links, the H200 node), the decode pool's by
// the cluster's (one H100), each pool's host tier kv_offloading_size a
// worker; the per-second file's capacity counts each pool's.
func TestPrefillDeploymentDecodeTiers(t *testing.T) {
	s := resolveYAML(t, "model: llama-3.1-8b\nhardware: h100\nnode: hgx-h100\nworkers: 3\nscheduler:\n  kv_offloading_size: 8\ndisaggregation:\n  prefill_workers: 1\n  prefill_hardware: h200\n  prefill_tp: 2\n  decode_kv_tiers: true\n")
	p, d := s.Offload, s.DecodeOffload
	if p == nil || d == nil || p.GPUsPerWorker != 2 || d.GPUsPerWorker != 1 || p.Node.Name != "hgx-h200" || d.Node.Name != "hgx-h100" ||
		p.HostBlocks != d.HostBlocks || p.BlockTokens != d.BlockTokens || p.KVBytesPerToken != d.KVBytesPerToken {
		t.Fatalf("prefill tiers %+v, decode tiers %+v; want 2 GPUs on hgx-h200 and 1 on hgx-h100, one block, 8 GiB each", p, d)
	}
	host, _, _ := s.TierCapacityBytes()
	if want := 3 * p.HostBlocks * p.BlockTokens * p.KVBytesPerToken; host != want {
		t.Errorf("host capacity %d B, want three workers' %d", host, want)
	}
}

// What a prefill pool of its own deployment is refused with.
func TestPrefillDeploymentErrors(t *testing.T) {
	pd := "workers: 2\ndisaggregation:\n  prefill_workers: 1\n"
	for _, c := range []struct{ yaml, want string }{
		{pd + "  prefill_hardware: x100\n", `c.yaml:4: disaggregation.prefill_hardware: "x100": `},
		{pd + "  prefill_tp: 3\n", "c.yaml:4: disaggregation.prefill_tp: the prefill pool's deployment: "},
		{pd + "  prefill_dp: -2\n", "c.yaml:4: disaggregation.prefill_dp: -2 is not a number of data-parallel ranks"},
		{"client:\n  prefill_api_server_ranks: 5\n" + pd + "  prefill_dp: 2\n", "c.yaml:2: client.prefill_api_server_ranks: 5 is not a number of workers in [0, 3]"},
		{"client:\n  prefill_api_server_ranks: 1\nworkers: 2\n", "c.yaml:2: client.prefill_api_server_ranks: 1 without disaggregation (a prefill pool's API servers)"},
		{"model: deepseek-v2-lite\nkv_store_gib: 100\nscheduler:\n  kv_offloading_backend: lmcache\n  lmcache:\n    remote_url: redis://x:6379\n" + pd + "  prefill_tp: 2\n  decode_kv_tiers: true\n",
			"disaggregation.decode_kv_tiers: a remote store shared by a prefill pool of 62208 KV bytes a token and a decode pool of 31104: not modelled yet"},
		{pd + "  prefill_scheduler:\n    chunked_prefill_size: 4096\n", "c.yaml:5: disaggregation.prefill_scheduler.chunked_prefill_size: is not a setting of vllm's scheduler"},
		{"workers: 2\ndisaggregation:\n  prefill_tp: 2\n", "disaggregation.prefill_workers: missing: prefill_hardware, prefill_tp, prefill_dp, prefill_nodes_per_worker and prefill_scheduler are the prefill pool's"},
	} {
		if err := resolveErr(c.yaml); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %s", c.yaml, err, c.want)
		}
	}
}

// A planner section the replay cannot take names its file, line and key:
// an unknown optimization target, an SLA setting under the load-based
// policy, the SLA planner on an aggregated fleet.
func TestPlannerErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"workers: 2\nplanner:\n  policy: dynamo\n  optimization_target: power\n", `c.yaml:4: planner.optimization_target: "power" is not throughput, latency or load`},
		{"workers: 2\ndisaggregation:\n  prefill_workers: 1\n  planner:\n    policy: dynamo\n    itl_s: 0.01\n", "c.yaml:6: disaggregation.planner.itl_s: an SLA planner setting"},
		{"workers: 2\nplanner:\n  policy: dynamo_sla\n", "c.yaml:3: planner.policy: dynamo_sla on an aggregated fleet: not modelled yet"},
	} {
		if err := resolveErr(c.yaml); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %s", c.yaml, err, c.want)
		}
	}
}

// notesHold reports each of wants that no note of s holds.
func notesHold(t *testing.T, s *Setup, wants ...string) {
	t.Helper()
	notes := strings.Join(s.Notes, "\n")
	for _, want := range wants {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
