package model

import "fmt"

// KVCacheTokens is the number of tokens the GPU KV cache of the
// deployment holds when the engine may use gpuMemUtilization of each
// GPU's memory, computed as vLLM sizes it: per GPU,
//
//	MemBytes·util − weights per rank − ActivationReserve
//
// divided by the KV bytes one token takes on a rank, rounded down to whole
// blocks of BlockSize tokens. Every rank of the TP group holds its share of
// every token, so this is also the capacity of the group. It is an error
// when the weights and the reserve do not leave room for one block.
func (d *Deployment) KVCacheTokens(gpuMemUtilization float64) (int64, error) {
	if !(gpuMemUtilization > 0 && gpuMemUtilization <= 1) {
		return 0, fmt.Errorf("gpu memory utilization %v: must be in (0, 1]", gpuMemUtilization)
	}
	if err := checkShape(d.Hardware, d.LLM, d.TP); err != nil {
		return 0, err
	}
	budget := int64(float64(d.Hardware.MemBytes) * gpuMemUtilization)
	weights := d.WeightBytesPerRank()
	free := budget - weights - d.ActivationReserve
	perToken := d.KVBytesPerTokenPerRank()
	block := max(d.BlockSize, 1)
	var tokens int64
	if free > 0 {
		tokens = free / perToken / block * block
	}
	if tokens == 0 {
		const gib = 1 << 30
		return 0, fmt.Errorf("%s on %d×%s does not fit at gpu memory utilization %v: %.2f GiB per GPU for weights and %.2f GiB reserve, of %.2f GiB allowed, leave no room for a %d-token KV block",
			d.LLM.Name, d.TP, d.Hardware.Name, gpuMemUtilization,
			float64(weights)/gib, float64(d.ActivationReserve)/gib, float64(budget)/gib, block)
	}
	return tokens, nil
}
