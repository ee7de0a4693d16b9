package model

import (
	"fmt"
)

// SGLangMemFractionStatic is SGLang's default --mem-fraction-static for a
// server of tp GPUs by the rule of v0.4.0 to v0.4.5.post2 (server_args.py: 0.88
// at TP1, 0.87 at 2, 0.85 at 4, 0.81 at 8, 0.79 at 16 or more), the
// DataCrunch runs' (v0.4.0.post1). SGLangServeDefaults gives each
// version's rule, by GPU memory too.
func SGLangMemFractionStatic(tp int) float64 {
	return sglangTPFraction(tp)
}

// SGLangKVCacheTokens is the number of tokens SGLang's KV pool holds at
// mem_fraction_static frac (model_runner's profile_max_num_token: the
// memory free after the weights are loaded, less the share 1 − frac of
// the memory free before, over the KV bytes one token takes on a rank).
// The memory free before loading is taken as the device's whole memory:
// the CUDA context and NCCL buffers SGLang finds already allocated are not
// modelled, which overstates the pool by about frac times their size. It
// is an error when the weights leave no room for a token.
func (d *Deployment) SGLangKVCacheTokens(frac float64) (int64, error) {
	const gib = 1 << 30
	weights := d.WeightBytesPerRank()
	pool := int64(float64(d.Hardware.MemBytes)*frac) - weights
	if pool <= 0 || pool/d.KVBytesPerTokenPerRank() == 0 {
		return 0, fmt.Errorf("%s on %d×%s does not fit at mem_fraction_static %v: %.2f GiB of weights per GPU of %.2f GiB allowed",
			d.LLM.Name, d.TP, d.Hardware.Name, frac, float64(weights)/gib, float64(d.Hardware.MemBytes)*frac/gib)
	}
	return pool / d.KVBytesPerTokenPerRank(), nil
}
