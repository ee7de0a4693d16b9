// Package model holds opaltrace's cost models: the time of one GPU forward
// pass over a mixed batch, the static price of a KV transfer over a link,
// and the hardware and model shapes they are computed from. The prices
// are static; their sharing among concurrent transfers is replay/kvcache's
// job (kvcache.Fabric), and fitting their coefficients to traces is
// calibrate's.
//
// # Shapes
//
// A Hardware is one GPU kind: dense BF16 and FP8 peaks, HBM bandwidth, the
// memory the driver reports, and the per-direction NVLink and PCIe
// bandwidths. HardwareByName resolves the presets (h100, h200, a100-80gb,
// a800-80gb, l40s, b200), whose datasheet sources are cited in
// hardware.go; ResolveHardware applies a HardwareSpec override, or builds
// a "custom" GPU from one.
//
// An LLM is a decoder-only model's shape, read from a Hugging Face
// config.json by ParseConfig, LoadConfig or LLMByName (which reads
// "<name>/config.json" from an fs.FS such as the embedded samples/models).
// It covers dense and mixture-of-experts MLPs (Mixtral, Qwen3-MoE,
// DeepSeek, gpt-oss: total and active parameters, shared experts, dense
// first layers), grouped-query and multi-head latent attention (MLA, whose
// KV cache is the compressed latent plus the rotary key),
// sliding-window and hybrid layers (layer_types, sliding_window,
// max_window_layers), and weight dtypes including quantization_config
// (fp8, mxfp4 experts, 4/8-bit GPTQ/AWQ). KV bytes per token are computed
// per layer group (KVGroups, KVBytesForContext). A config this package
// cannot price exactly is rejected with a ConfigError naming the key.
//
// # Step time
//
// A Deployment (an LLM on TP×PP GPUs, with DP and EP for MoE) implements
// StepModel. One step is one forward pass over all prefill chunks and
// decode tokens of the batch, so their work adds up; the time is
// max(compute, memory) + collectives + a fixed overhead, per GPU (plus
// SerialFraction of the lesser of compute and memory when it is fitted).
// Deployment's doc comment gives the formulas; Terms returns the parts at
// full efficiency, which calibration regresses on. The coefficients (MFU,
// AttentionMFU, ExpertMFU for the routed experts' GEMMs of a MoE model,
// BandwidthEfficiency for weights, KVBandwidthEfficiency for
// the KV cache, LinkEfficiency, StepOverhead, CollectiveLatency,
// EagerLayerLaunch, EagerLayerCPU, UncompiledLayer, and SerialFraction, the share of the
// lesser of compute and memory time a step does not overlap) are
// exported for calibration to fit; the shape constants are precomputed so
// that StepTime, called for every simulated step, does a few multiply-adds
// per batch entry and never allocates.
//
// With DPAttention (SGLang's --enable-dp-attention for MLA models, as
// v0.4.x runs it; dpattention.go cites the code) the TP GPUs are
// data-parallel attention ranks: each holds all of the attention and the
// LM head and runs them over its own requests, and every GPU runs the
// TP-split MLPs and experts over all ranks' tokens, gathered before each
// MLP. The ranks step together: a step costs the slowest rank's own part
// plus the shared part over the group's tokens (DPStepTime); StepTime
// prices the group with every rank running the batch given.
//
// OpalStep is Opal's form (max of the longest prefill chunk and the
// decode, opal-notes.md §1), selectable as FormOpal so that Opal
// configurations reproduce; FormRoofline (Deployment) is the default.
//
// KVCacheTokensFor sizes the GPU KV cache the way vLLM does from
// gpu_memory_utilization: memory allowed, minus what VLLMMemory models
// part by part (weights and rotary cache, the activations of the
// profiling forward pass and sampler run, non-torch memory, CUDA graphs
// where the version subtracts them), over the KV bytes of a token on one
// GPU, in whole blocks. The Note in vllmmemory.go gives each part's
// source.
//
// An engine that replays CUDA graphs only up to a batch size
// (Deployment.CUDAGraphMaxBS, SGLang's cuda_graph_max_bs) launches the
// kernels of larger decode batches and of prefill steps one at a time: such
// a step takes the layers times EagerLayerLaunch longer, a coefficient
// calibration fits (0 by default: no launch term). EagerLayerCPU prices
// the same launches as what they are on the host, a bound rather than an
// addition: the CPU issues them ahead of the GPU, so an eager step takes
// the greater of its GPU time and the layers times EagerLayerCPU (0 by
// default: no bound). An engine that also
// torch-compiles its small decode batches (Deployment.TorchCompileMaxBS,
// SGLang's torch_compile_max_bs under --enable-torch-compile) runs every
// other step uncompiled, the layers times UncompiledLayer longer (0 by
// default). Deployment.Regime says which of the three (compiled graph,
// plain graph, eager) a batch runs in.
//
// # Links
//
// A Link is a latency plus bytes over bandwidth (an NVMe link also bounds
// IOPS). A Node holds a server's paths: PCIe per GPU and direction, host
// DRAM, local NVMe and the network to remote storage shared by its
// workers, with GPUDirect Storage as an option, and its GPU count, host
// memory and NVMe capacity; Path and PathTime price a transfer alone on a
// path. NodeByName resolves the presets (hgx-h100, hgx-h200, sources in
// node.go), NodeFor a GPU's node, and NodeSpec is a cluster file's
// node_override.
//
// Not modelled: pipeline micro-batching (PP prices one batch in flight),
// MLA weight absorption in decode, and the sliding layers' per-request
// window blocks in KV capacity.
package model
