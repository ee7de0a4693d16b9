package deploy

import (
	"go.yaml.in/yaml/v3"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// A Cluster is the file form of `replay --config`: the deployment (GPU,
// model, parallelism, memory) and the replay settings (workers, router,
// scheduler, workload), in one YAML document. ParseCluster reads it over
// DefaultCluster and remembers which keys the file gave, and on which
// line, so that Resolve can tell a chosen value from a default and errors
// can point at the line.
type Cluster struct {
	// Hardware is a GPU preset name (model.HardwareNames).
	Hardware string `yaml:"hardware"`
	// Model is a model name shipped in samples/models (llama-3.1-8b,
	// llama-3.1-70b, ...), a Hugging Face id of one of them
	// (meta-llama/Llama-3.3-70B-Instruct), or a path to a Hugging Face
	// config.json or its folder.
	Model string `yaml:"model"`
	// TP is the tensor-parallel degree of each worker.
	TP int `yaml:"tp"`
	// GPUMemoryUtilization is vLLM's --gpu-memory-utilization.
	GPUMemoryUtilization float64 `yaml:"gpu_memory_utilization"`
	// HardwareOverride changes the preset's figures; with hardware
	// "custom" it describes the GPU (see model.HardwareSpec).
	HardwareOverride *model.HardwareSpec `yaml:"hardware_override,omitempty"`
	// PP, DP and EP are the pipeline, data and expert parallel sizes of
	// each worker (0: 1). EP is 1 or TP·DP.
	PP int `yaml:"pp,omitempty"`
	DP int `yaml:"dp,omitempty"`
	EP int `yaml:"ep,omitempty"`
	// KVCacheDType is vLLM's --kv-cache-dtype (auto, fp8, ...).
	KVCacheDType string `yaml:"kv_cache_dtype,omitempty"`
	// CostModel is a costmodel.yaml written by `opaltrace calibrate`
	// whose coefficients (and form) price the steps. Resolve does not
	// read it (package calibrate does): the caller passes it parsed, as
	// Overrides.CostModel.
	CostModel string `yaml:"cost_model,omitempty"`
	// NumGPUBlocksOverride is vLLM's --num-gpu-blocks-override: each
	// worker's KV capacity in blocks of scheduler.block_size tokens,
	// instead of the capacity derived from memory (0: derived).
	NumGPUBlocksOverride int64 `yaml:"num_gpu_blocks_override,omitempty"`
	// MemFractionStatic is SGLang's --mem-fraction-static: the fraction
	// of each GPU's memory for weights and KV pool (0: SGLang's default
	// for the GPU, the parallel sizes and engine_version).
	MemFractionStatic float64 `yaml:"mem_fraction_static,omitempty"`
	// EnableDPAttention is SGLang's --enable-dp-attention (v0.4.x, MLA
	// models): each server's TP GPUs are data-parallel attention ranks,
	// replayed as one worker each (see dpAttention); workers counts the
	// servers.
	EnableDPAttention bool `yaml:"enable_dp_attention,omitempty"`
	// EngineVersion is the version of the engine the workers run
	// ("0.11.0", "0.5.2"), from which the defaults of the engine options
	// the file and the run leave out follow, as that version chose them
	// (model.VLLMServeBatchDefaults, model.SGLangServeDefaults): the
	// run's recorded version, or "" for the documented default.
	EngineVersion string `yaml:"engine_version,omitempty"`
	// Node is the server the workers run on, a preset of model.NodeNames
	// (default: the GPU's node, hgx-h100 for h100), whose links, host
	// memory and NVMe the KV tiers use; NodeOverride changes its figures
	// (model.NodeSpec).
	Node         string          `yaml:"node,omitempty"`
	NodeOverride *model.NodeSpec `yaml:"node_override,omitempty"`
	// NodesPerWorker is the number of nodes each worker's GPUs span (TP
	// or PP across nodes; 0 or 1: one node). InterNode is the network
	// between them, which a worker spanning nodes needs: its stage sends
	// and collectives that cross nodes are priced on it, not on NVLink
	// (model.InterNode).
	NodesPerWorker int            `yaml:"nodes_per_worker,omitempty"`
	InterNode      *InterNodeSpec `yaml:"inter_node,omitempty"`
	// KVStoreGiB is the capacity of the remote KV store all workers
	// share (LMCache's remote_url, a Mooncake store's pool), in GiB.
	KVStoreGiB float64 `yaml:"kv_store_gib,omitempty"`

	replay.Config `yaml:",inline"`

	// given maps each key set by the file or an override (dotted path,
	// "scheduler.max_num_seqs") to where: "FILE:LINE" or the flag.
	given map[string]string
	// links, when set, gives the node the links a cost model fitted
	// (Resolve sets it from Overrides.CostModel).
	links LinkCostModel
}

// DefaultCluster returns the cluster every absent key defaults to: one
// H100 serving Llama-3.1-8B at TP1, vLLM's 0.9 memory utilization, and
// replay.DefaultConfig.
func DefaultCluster() Cluster {
	return Cluster{Hardware: "h100", Model: "llama-3.1-8b", TP: 1, GPUMemoryUtilization: 0.9, Config: replay.DefaultConfig()}
}

// YAML returns c as a cluster file, for the outputs' metadata.
func (c Cluster) YAML() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return ""
	}
	return string(b)
}

// Given reports whether key (a dotted path such as
// "scheduler.max_num_seqs") was set by the cluster file or an override
// rather than left at its default, and where: "FILE:LINE" or the flag.
func (c Cluster) Given(key string) (from string, ok bool) {
	from, ok = c.given[key]
	return from, ok
}

func (c *Cluster) mark(key, from string) {
	if c.given == nil {
		c.given = map[string]string{}
	}
	c.given[key] = from
}

// An InterNodeSpec is the cluster file's inter_node: the network between
// the nodes of a worker that spans several.
type InterNodeSpec struct {
	// Transport is tcp, rdma (staged through host memory) or
	// gpudirect-rdma (GPU memory to the NIC).
	Transport string `yaml:"transport"`
	// BandwidthGbps is one link's line rate each way, in Gb/s (400 for a
	// ConnectX-7 port).
	BandwidthGbps float64 `yaml:"bandwidth_gbps"`
	// LinkPerGPU: every GPU has a link of its own (rail-optimised); else
	// the node's GPUs share one.
	LinkPerGPU bool `yaml:"link_per_gpu,omitempty"`
	// LatencyUs is paid by each collective or send that crosses nodes,
	// besides the cost model's collective latency (default 0).
	LatencyUs float64 `yaml:"latency_us,omitempty"`
}
