package deploy

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// kvCapacity returns one worker's KV capacity in tokens, sized as its
// engine sizes it, and a line saying how:
//
//   - kv_cache_tokens, when the cluster gives it, is the capacity;
//   - num_gpu_blocks_override (vLLM's --num-gpu-blocks-override) is a
//     number of blocks of block_size tokens;
//   - SGLang: the pool is what mem_fraction_static of the memory free
//     when loading begins leaves after the weights (model_runner's
//     profile_max_num_token: free memory after loading, minus free memory
//     before it · (1 − mem_fraction_static)), over the KV bytes one token
//     takes on a rank, in whole pages of page_size (model.Deployment.
//     SGLangMemory, of the cluster's engine_version); mem_fraction_static
//     defaults as server_args of that version chooses it on the GPU (sg,
//     from model.SGLangServeDefaults);
//   - vLLM: gpu_memory_utilization of each GPU's memory, minus the
//     weights, the activations of the profiling run of the scheduler's
//     max_num_batched_tokens and max_num_seqs, the non-torch memory and
//     (from vLLM 0.21) the CUDA graphs, in whole blocks
//     (model.Deployment.VLLMMemory) of the cluster's engine_version ("" when
//     neither the run nor the file gives one).
func kvCapacity(c Cluster, cfg replay.Config, dep *model.Deployment, sg model.SGLangDefaults) (int64, string, error) {
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
		how := "SGLang: mem_fraction_static"
		if frac == 0 {
			frac = sg.MemFractionStatic
			how = "SGLang " + sg.Version + "'s default mem_fraction_static"
		}
		page := max(s.SGLangConfig.PageSize, 1)
		mem, err := dep.SGLangMemory(frac, sg.Version, page)
		if whole := mem.KV / dep.KVBytesPerTokenPerRank(); err != nil && mem.KV > 0 && whole > 0 {
			return 0, "", c.bad("scheduler.page_size", c.given["scheduler.page_size"], strconv.FormatInt(page, 10),
				fmt.Sprintf("a page larger than what %s can use: a worker's KV pool is %d tokens", dep.LLM.Name, whole))
		}
		if err != nil {
			return 0, "", err
		}
		return mem.Tokens, fmt.Sprintf("%d tokens (%s %g; per GPU, in %d-token pages: %s)", mem.Tokens, how, frac, page, mem), nil
	}
	dep.BlockSize = block
	defaults := replay.DefaultConfig().Scheduler
	p := model.VLLMProfile{
		GPUMemoryUtilization: c.GPUMemoryUtilization,
		MaxNumBatchedTokens:  cmp.Or(s.MaxNumBatchedTokens, defaults.MaxNumBatchedTokens),
		MaxNumSeqs:           int64(cmp.Or(s.MaxNumSeqs, defaults.MaxNumSeqs)),
		Version:              c.EngineVersion,
	}
	tokens, mem, err := dep.KVCacheTokensFor(p)
	if err != nil {
		return 0, "", err
	}
	v := "vLLM"
	if c.EngineVersion != "" {
		v += " " + c.EngineVersion
	}
	return tokens, fmt.Sprintf("%d tokens (%s per GPU, gpu_memory_utilization %g of %.2f GiB, profiled at %d tokens and %d sequences: %s)",
		tokens, v, c.GPUMemoryUtilization, float64(dep.Hardware.CUDATotal())/gib, p.MaxNumBatchedTokens, p.MaxNumSeqs, mem), nil
}
