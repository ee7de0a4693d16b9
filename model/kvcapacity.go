package model

import "fmt"

// Default batch sizes of vLLM's memory profile when a caller gives none:
// the replay package's scheduler defaults (8,192 tokens and 256
// sequences), so that a replay configured with replay.DefaultConfig is
// sized for the batch it schedules. A replay of a deployment
// (deploy.Resolve) uses vLLM's own defaults for the run's version and GPU
// instead (VLLMServeBatchDefaults), for both.
const (
	DefaultProfileBatchedTokens = 8192
	DefaultProfileSeqs          = 256
)

// KVCacheTokens is the number of tokens the GPU KV cache of the
// deployment holds when vLLM may use gpuMemUtilization of each GPU's
// memory and profiles the default batch (DefaultProfileBatchedTokens,
// DefaultProfileSeqs); see KVCacheTokensFor.
func (d *Deployment) KVCacheTokens(gpuMemUtilization float64) (int64, error) {
	n, _, err := d.KVCacheTokensFor(VLLMProfile{GPUMemoryUtilization: gpuMemUtilization, MaxNumBatchedTokens: DefaultProfileBatchedTokens, MaxNumSeqs: DefaultProfileSeqs})
	return n, err
}

// KVCacheTokensFor is the number of tokens the GPU KV cache of the
// deployment holds as vLLM sizes it under p (VLLMMemory), rounded down
// to whole blocks of BlockSize tokens, and the memory division it comes
// from. Every rank of the TP group holds its share of every token, so
// this is also the capacity of the group. It is an error when the rest
// leaves no room for one block.
func (d *Deployment) KVCacheTokensFor(p VLLMProfile) (int64, VLLMMemory, error) {
	v, err := d.VLLMMemory(p)
	if err != nil {
		return 0, v, err
	}
	perToken := d.KVBytesPerTokenPerRank()
	block := max(d.BlockSize, 1)
	var tokens int64
	if v.KV > 0 {
		tokens = v.KV / perToken / block * block
	}
	if tokens == 0 {
		return 0, v, fmt.Errorf("%s on %d×%s does not fit at gpu memory utilization %v: %s, no room for a %d-token KV block",
			d.LLM.Name, d.TP, d.Hardware.Name, p.GPUMemoryUtilization, v, block)
	}
	return tokens, v, nil
}
