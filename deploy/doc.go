// Package deploy turns a deployment into a ready replay: from a cluster
// file, the recorded deployment of the run to replay, and the caller's
// overrides (command-line flags, a calibration's candidate cost model, a
// plan's choice) to the replay.Config, the step model, the KV capacity
// and the metadata the simulated run records, by one function, Resolve.
// The replay command, calibration by replay in the loop and capacity
// planning build their replays through it, so that all three replay the
// same deployment the same way.
//
// # The cluster file
//
// ParseCluster reads one YAML mapping over DefaultCluster, strictly:
// unknown keys, a second document, values of the wrong type (2.5
// workers), values out of their bounds (see check.go: MaxWorkers and the
// others) and keys given as 0 where 0 would silently mean "default" are
// errors, each "FILE:LINE: KEY: what is wrong". Settings (Cluster.With)
// apply the same checks to values given by flags, and name the flag.
//
// # The run's record
//
// A run's recorded deployment drives its replay (Resolve, applyRecord):
// its model (a Hugging Face id such as meta-llama/Llama-3.3-70B-Instruct
// resolves to the shipped llama-3.3-70b, see ModelName), its hardware
// ("4xH200": the GPU preset and, without recorded parallel sizes, TP4),
// TP, PP, DP, engine, engine version and the engine options kept at
// ingest. The cluster file and the settings override it, and every
// difference is a note. The engine options neither gives take the
// defaults of the engine's version (engine_version) on the GPU, as the
// engine chooses them (model.VLLMServeBatchDefaults,
// model.SGLangServeDefaults; a documented version when none is known),
// and a note says which rule chose them. A
// measured run (Overrides.Measured) whose model or hardware is unknown is
// refused unless Overrides.AssumeDeployment. A run of SGLang with
// enable_dp_attention (the cluster key, or the engine option recorded at
// ingest) is replayed one worker per attention rank (dpAttention), its
// steps priced by model.Deployment.DPAttention. The KV capacity is sized as
// the engine sizes it (kvCapacity: SGLang's mem_fraction_static, vLLM's
// gpu_memory_utilization, num_gpu_blocks_override) and said in
// Setup.KVHow; Setup.Header names the deployment.
//
// # What it does not do
//
// It reads no trace and runs no replay (package replay does); it does
// not parse cost model files (package calibrate does: the caller passes
// one as a CostModel, which keeps calibrate, itself a user of this
// package, out of its imports); it prints nothing.
package deploy
