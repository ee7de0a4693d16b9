package deploy

import (
	"cmp"
	"fmt"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// kvCapacity returns one worker's KV capacity in tokens, sized as its
// engine sizes it, and a line saying how:
//
//   - kv_cache_tokens, when the cluster gives it, is the capacity;
//   - num_gpu_blocks_override (vLLM's --num-gpu-blocks-override) is a
//     number of blocks of block_size tokens;
//   - SGLang: the pool is what mem_fraction_static of each GPU's memory
//     leaves after the weights (model_runner's profile_max_num_token:
//     free memory after loading, minus total·(1 − mem_fraction_static)),
//     over the KV bytes one token takes on a rank (model.Deployment.
//     SGLangKVCacheTokens); mem_fraction_static defaults by tensor-parallel
//     size as server_args does (model.SGLangMemFractionStatic);
//   - vLLM: gpu_memory_utilization of each GPU's memory, minus the
//     weights, the activations of the profiling run of the scheduler's
//     max_num_batched_tokens and max_num_seqs, the non-torch memory and
//     (from vLLM 0.21) the CUDA graphs, in whole blocks
//     (model.Deployment.VLLMMemory); version is the vLLM version the run
//     records ("" when none).
func kvCapacity(c Cluster, cfg replay.Config, dep *model.Deployment, version string) (int64, string, error) {
	s := cfg.Scheduler
	block := s.BlockSize
	if block <= 0 {
		block = replay.DefaultConfig().Scheduler.BlockSize
	}
	const gib = 1 << 30
	switch {
	case s.KVCacheTokens > 0:
		return s.KVCacheTokens, fmt.Sprintf("%d tokens (kv_cache_tokens)", s.KVCacheTokens), nil
	case c.NumGPUBlocksOverride > 0:
		n := c.NumGPUBlocksOverride * block
		return n, fmt.Sprintf("%d tokens (num_gpu_blocks_override %d × %d-token blocks)", n, c.NumGPUBlocksOverride, block), nil
	case EngineName(cfg) == replay.EngineSGLang:
		frac := c.MemFractionStatic
		how := "mem_fraction_static"
		if frac == 0 {
			frac = model.SGLangMemFractionStatic(dep.TP * max(dep.PP, 1))
			how = "SGLang's default mem_fraction_static for TP" + fmt.Sprint(dep.TP)
		}
		tokens, err := dep.SGLangKVCacheTokens(frac)
		if err == nil && tokens < block {
			err = fmt.Errorf("%s on %d×%s at mem_fraction_static %v: room for %d KV tokens, less than a %d-token block", dep.LLM.Name, dep.TP, dep.Hardware.Name, frac, tokens, block)
		}
		if err != nil {
			return 0, "", err
		}
		return tokens, fmt.Sprintf("%d tokens (SGLang: %s %g × %.2f GiB − %.2f GiB weights per GPU)", tokens, how, frac, float64(dep.Hardware.MemBytes)/gib, float64(dep.WeightBytesPerRank())/gib), nil
	}
	dep.BlockSize = block
	defaults := replay.DefaultConfig().Scheduler
	p := model.VLLMProfile{
		GPUMemoryUtilization: c.GPUMemoryUtilization,
		MaxNumBatchedTokens:  cmp.Or(s.MaxNumBatchedTokens, defaults.MaxNumBatchedTokens),
		MaxNumSeqs:           int64(cmp.Or(s.MaxNumSeqs, defaults.MaxNumSeqs)),
		Version:              version,
	}
	tokens, mem, err := dep.KVCacheTokensFor(p)
	if err != nil {
		return 0, "", err
	}
	v := "vLLM"
	if version != "" {
		v += " " + version
	}
	return tokens, fmt.Sprintf("%d tokens (%s per GPU, gpu_memory_utilization %g of %.2f GiB, profiled at %d tokens and %d sequences: %s)",
		tokens, v, c.GPUMemoryUtilization, float64(dep.Hardware.MemBytes)/gib, p.MaxNumBatchedTokens, p.MaxNumSeqs, mem), nil
}
