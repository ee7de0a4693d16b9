package opal

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// ClusterYAML returns c as an opaltrace cluster file, to be replayed with
// opaltrace's own semantics, and notes on what of c the file cannot say
// or says differently:
//
//   - the workers run vLLM's scheduler with Opal's vllm_params (a budget
//     of max_model_len × max_num_seqs tokens without chunked prefill, as
//     Opal sets it) on each worker's KV capacity as Opal sizes it (the
//     GPUs' memory less the weights, num_gpu_blocks_override);
//   - the GPU is the preset of worker.hw.gpu, its TFLOPS and memory
//     bandwidth overridden where Opal's differ; steps are priced by
//     opaltrace's roofline, not Opal's a/b one;
//   - MaxPrefix is max_prefix (working as Opal meant) seeing the workers'
//     KV as Opal's 30 s event coalescing does (view_interval_s), Random
//     random, RoundRobin round_robin, LeastLoaded least_requests;
//   - Opal's scaling (a worker added scale_latency after any worker's
//     queue passes max_queue_threshold) is HPA on queue depth;
//   - the KV tiers are LMCache's (chunk_size of kvc), CPUMemory its CPU
//     tier, LocalNVMe its local disk, DistributedFS its remote store,
//     each device's bandwidth and latency as the node's link.
func (c *Config) ClusterYAML() (string, []string) {
	var b strings.Builder
	var notes []string
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# from the Opal config %s", c.File)
	hw := strings.ToLower(c.GPU)
	preset, err := model.ResolveHardware(hw, nil)
	if err != nil {
		notes = append(notes, fmt.Sprintf("worker.hw.gpu %q is no opaltrace preset: h100 with Opal's figures is used", c.GPU))
		hw = "h100"
		preset, _ = model.ResolveHardware(hw, nil)
	}
	w("hardware: %s", hw)
	var over []string
	if tf := preset.PeakFLOPS / 1e12; tf != c.TFLOPS {
		over = append(over, fmt.Sprintf("  peak_bf16_tflops: %g", c.TFLOPS))
	}
	if bw := preset.MemBandwidth / 1e12; bw != c.MemBWTBps {
		over = append(over, fmt.Sprintf("  mem_bandwidth_tbps: %g", c.MemBWTBps))
	}
	if len(over) > 0 {
		w("hardware_override:")
		for _, o := range over {
			w("%s", o)
		}
	}
	modelRef := c.ModelFrom
	if name, ok := strings.CutPrefix(modelRef, "shipped "); ok {
		modelRef = name
	}
	w("model: %s", yamlString(modelRef))
	w("tp: %d", c.TP)
	compat := c.Compat(replay.AllOpalQuirks())
	w("num_gpu_blocks_override: %d", compat.GPUBlocks())
	w("workers: %d", c.NumWorkers)
	switch c.Policy {
	case "MaxPrefix":
		w("router: %s", replay.RouterMaxPrefix)
		w("router_config:")
		w("  view_interval_s: %g", c.KVCEventCoalesceSec)
	case "Random":
		w("router: random")
	case "RoundRobin":
		w("router: round_robin")
	case "LeastLoaded":
		w("router: least_requests")
	}
	if c.EnableScaling {
		w("autoscale:")
		w("  metric: queue_depth")
		w("  target: %g", c.MaxQueueThreshold)
		w("  min_replicas: %d", c.NumWorkers)
		w("  max_replicas: %d", max(c.MaxWorkers, c.NumWorkers))
		w("  sync_period_s: 1")
		w("  container_start_s: %g", c.ScaleLatency)
		notes = append(notes, "Opal's scaling adds a worker scale_latency after any worker's queue passes max_queue_threshold and never removes one; the cluster scales on the mean queue depth with HPA's rules")
	}
	budget := c.MaxNumBatchedTokens
	if !c.ChunkedPrefill {
		budget = c.LLM.MaxPositionEmbeddings * int64(c.MaxNumSeqs)
	}
	w("scheduler:")
	w("  engine: vllm")
	w("  max_num_batched_tokens: %d", budget)
	w("  max_num_seqs: %d", c.MaxNumSeqs)
	w("  block_size: %d", c.BlockSize)
	var node []string
	if len(c.Tiers) > 0 {
		w("  kv_offloading_backend: lmcache")
		w("  lmcache:")
		w("    chunk_size: %d", c.KVChunk)
		for _, t := range c.Tiers {
			switch t.Name {
			case "CPUMemory":
				w("    max_local_cpu_size: %g", t.CapacityGB)
				node = append(node, fmt.Sprintf("  host_mem_gbps: %g", t.BandwidthGBps), fmt.Sprintf("  pcie_gbps: %g", t.BandwidthGBps),
					fmt.Sprintf("  pcie_latency_us: %g", t.LatencyNsec/1000))
			case "LocalNVMe":
				w("    local_disk: file:///opal/LocalNVMe")
				w("    max_local_disk_size: %g", t.CapacityGB)
				node = append(node, fmt.Sprintf("  nvme_gbps: %g", t.BandwidthGBps), fmt.Sprintf("  nvme_latency_us: %g", t.LatencyNsec/1000))
			case "DistributedFS":
				w("    remote_url: opal://DistributedFS")
				node = append(node, fmt.Sprintf("  network_gbps: %g", t.BandwidthGBps), fmt.Sprintf("  network_latency_us: %g", t.LatencyNsec/1000))
			}
		}
		if !slices.ContainsFunc(c.Tiers, func(t replay.OpalTier) bool { return t.Name == "CPUMemory" }) {
			notes = append(notes, "LMCache always has a CPU tier: its default 5 GiB stands in for the CPUMemory tier Opal's config leaves out")
		}
	}
	if len(node) > 0 {
		w("node_override:")
		for _, n := range node {
			w("%s", n)
		}
	}
	for _, t := range c.Tiers {
		if t.Name == "DistributedFS" {
			w("kv_store_gib: %g", t.CapacityGB)
		}
	}
	w("seed: %d", c.Seed)
	notes = append(notes,
		fmt.Sprintf("steps are priced by opaltrace's roofline of %s, not Opal's (a = %g, b = %g, max of prefill and decode); --opal-compat prices them as Opal does", c.LLM.Name, c.A, c.B),
		fmt.Sprintf("Opal's max_kvc_ready_requests (%d) and lookahead_reqs (%d) have no vLLM counterpart", c.MaxKVCReadyRequests, c.LookaheadReqs))
	return b.String(), notes
}

// Cluster returns ClusterYAML parsed as a cluster file.
func (c *Config) Cluster() (deploy.Cluster, []string, error) {
	text, notes := c.ClusterYAML()
	cl, err := deploy.ParseCluster(c.File+" (as a cluster file)", []byte(text))
	return cl, notes, err
}

// Compat returns c as an Opal-compatible replay's settings with quirks q.
func (c *Config) Compat(q replay.OpalQuirks) replay.OpalCompat {
	m := c.LLM
	return replay.OpalCompat{
		Workers: c.NumWorkers, Seed: c.Seed, Router: c.Policy,
		Layers: m.NumLayers, Hidden: m.HiddenSize, Params: model.OpalParams(m),
		KVBytesPerToken: m.KVBytesPerToken(), MaxModelLen: m.MaxPositionEmbeddings,
		MemoryGB: c.MemoryGB, TFLOPS: c.TFLOPS, MemBWTBps: c.MemBWTBps, TP: int64(c.TP), A: c.A, B: c.B,
		BlockSize: c.BlockSize, MaxNumSeqs: c.MaxNumSeqs, MaxNumBatchedTokens: c.MaxNumBatchedTokens,
		ChunkedPrefill: c.ChunkedPrefill, MaxKVCReadyRequests: c.MaxKVCReadyRequests, LookaheadReqs: c.LookaheadReqs,
		KVChunk: c.KVChunk, Tiers: c.Tiers, Quirks: q,
	}
}

// yamlString quotes s for YAML when it is not a plain word.
func yamlString(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r)) {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}
