// Package model holds opaltrace's cost models: the time of one GPU forward
// pass over a mixed batch (a roofline from hardware and LLM presets), and
// the hardware and model shapes it is computed from. The prices are static;
// their sharing among concurrent transfers is replay/kvcache's job, and
// fitting their coefficients to traces is calibrate's.
//
// # Shapes
//
// A Hardware is one GPU kind: dense BF16 peak, HBM bandwidth, the memory
// the driver reports, and the per-direction NVLink (or PCIe) bandwidth.
// HardwareByName resolves the presets (h100, h200, a100-80gb, l40s, b200),
// whose datasheet sources are cited in hardware.go.
//
// An LLM is a decoder-only model's shape, read from a Hugging Face
// config.json by ParseConfig, LoadConfig or LLMByName (which reads
// "<name>/config.json" from an fs.FS such as the embedded samples/models).
// From it come the parameter count, the KV bytes per token and the FLOPs
// per token. Dense GQA models (Llama, Mistral, Qwen2/3) are supported;
// configs with experts, MLA or sliding windows are rejected with a
// ConfigError rather than priced wrong.
//
// # Step time
//
// A Deployment (an LLM on TP GPUs of one Hardware) implements StepModel.
// One step is one forward pass over all prefill chunks and decode tokens
// of the batch, so their work adds up; the time is
// max(compute, memory) + all-reduce + a fixed overhead, per GPU of the
// tensor-parallel group. Deployment's doc comment gives the formulas. The
// efficiency coefficients (MFU, BandwidthEfficiency, LinkEfficiency,
// StepOverhead) are exported for calibration to fit; the shape constants
// are precomputed so that StepTime, called for every simulated step, does
// a few multiply-adds per batch entry and never allocates.
//
// KVCacheTokens sizes the GPU KV cache the way vLLM does from
// gpu_memory_utilization: memory allowed, minus weights and an activation
// reserve, over the KV bytes of a token on one GPU, in whole blocks.
//
// Not yet modelled (the types leave room for them): Opal's
// max-of-parts step form, mixture-of-experts (ActiveParams < Params), MLA
// and sliding-window KV, fp8 weights declared by quantization_config,
// pipeline and expert parallelism, and KV transfer links.
package model
