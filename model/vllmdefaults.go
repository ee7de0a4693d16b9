package model

import (
	"fmt"
	"strconv"
	"strings"
)

// VLLMBatchDefaults is what vLLM's API server (`vllm serve`, usage
// context OPENAI_API_SERVER) chooses for max_num_seqs and
// max_num_batched_tokens when neither is given, and why.
type VLLMBatchDefaults struct {
	MaxNumSeqs          int64
	MaxNumBatchedTokens int64
	// Why says which rule chose them, for a derivation ("vLLM 0.11's
	// default for an API server on a GPU of 70 GiB or more other than
	// the A100").
	Why string
}

// vllmLargeGPUBytes is the device memory from which vLLM's engine
// arguments default to the larger batch (70 GiB, arg_utils).
const vllmLargeGPUBytes = 70 << 30

// VLLMServeBatchDefaults returns vLLM's default max_num_seqs and
// max_num_batched_tokens for an API server of the given version ("" when
// the run records none) on hw, as vllm/engine/arg_utils.py chooses them
// for the V1 engine (get_batch_defaults, formerly _set_default_args_v1):
//
//   - from 0.9 (PR #17885): 1024 sequences and 8192 tokens on a GPU of
//     70 GiB or more whose name does not contain "a100"; 256 and 2048
//     otherwise;
//   - 0.8.5 to 0.8.x (PR #17073): the same without the A100 exception;
//   - before 0.8.5 vLLM chose by device name (H100 and H200 only, PRs
//     #12369 and #16158) and before 0.8 the V0 engine was the default;
//     neither is modelled: the 0.9 rule is assumed and Why says so, as
//     it does for a run that records no version.
//
// Benchmark files come from `vllm serve`, so the usage context is always
// the API server's (the LLM class's 16384 tokens do not apply). With
// chunked prefill off vLLM raises max_num_batched_tokens to
// max_model_len; that is the caller's to apply.
func VLLMServeBatchDefaults(version string, hw Hardware) VLLMBatchDefaults {
	// rule names whose default it is; assumed, appended at the end, says
	// when that is not the recorded version's own rule.
	rule, assumed := "vLLM "+version+"'s", ""
	excludeA100 := true
	switch {
	case version == "":
		rule, assumed = "vLLM's", "; no version recorded: the rule of 0.9 and later assumed"
	case versionAtLeast(version, 0, 9):
	case versionAtLeastPatch(version, 0, 8, 5):
		excludeA100 = false
	default:
		rule, assumed = "vLLM's", "; "+version+" chose by device name, not modelled: the rule of 0.9 and later assumed"
	}
	large := hw.MemBytes >= vllmLargeGPUBytes
	isA100 := strings.Contains(strings.ToLower(hw.Name), "a100")
	if large && !(excludeA100 && isA100) {
		what := "a GPU of 70 GiB or more"
		if excludeA100 {
			what += " other than the A100"
		}
		return VLLMBatchDefaults{MaxNumSeqs: 1024, MaxNumBatchedTokens: 8192,
			Why: fmt.Sprintf("%s default for an API server on %s: %s has %.2f GiB%s", rule, what, hw.Name, float64(hw.MemBytes)/(1<<30), assumed)}
	}
	why := fmt.Sprintf("%s default for an API server on a GPU of under 70 GiB: %s has %.2f GiB%s", rule, hw.Name, float64(hw.MemBytes)/(1<<30), assumed)
	if large {
		why = fmt.Sprintf("%s default for an API server on an A100 (%.2f GiB; the larger default excludes it)%s", rule, float64(hw.MemBytes)/(1<<30), assumed)
	}
	return VLLMBatchDefaults{MaxNumSeqs: 256, MaxNumBatchedTokens: 2048, Why: why}
}

// versionAtLeastPatch reports whether version is major.minor.patch or
// later; an unknown version is not.
func versionAtLeastPatch(version string, major, minor, patch int) bool {
	if !versionAtLeast(version, major, minor) {
		return false
	}
	if versionAtLeast(version, major, minor+1) || versionAtLeast(version, major+1, 0) {
		return true
	}
	f := strings.FieldsFunc(strings.TrimPrefix(version, "v"), func(r rune) bool { return r == '.' || r == '+' || r == '-' })
	if len(f) < 3 {
		return false
	}
	p, err := strconv.Atoi(f[2])
	return err == nil && p >= patch
}
