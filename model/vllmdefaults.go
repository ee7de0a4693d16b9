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
//   - 0.8.4 (PR #16158, 66d433b9, merged to main 2025-04-07, after the
//     v0.8.3 release branch was cut): by device name, 1024 and 8192 on
//     a GPU whose name contains "h100" or "h200", 256 and 2048 on any
//     other;
//   - 0.8.0 to 0.8.3 (PR #12369, 0e74d797, 2025-01-24, with V1 the
//     default from PR #13726): 8192 tokens on an H100 or H200, else
//     2048, and 1024 sequences on every GPU;
//   - before 0.8 the V0 engine was the default, which is not modelled:
//     the 0.9 rule is assumed and Why says so, as it does for a run that
//     records no version.
//
// The 0.8.3/0.8.4 split was read from vLLM's history: v0.8.4's release
// notes list PRs merged to main after #16158 (#16168, #16209, #16311,
// #16439, #16488, #16509, #16512, up to 2025-04-12) and #16113, which
// brought Llama 4 to main at 15:06 UTC that day, 3 hours before #16158;
// v0.8.3's notes list Llama 4 as #16104, a PR on its release branch, so
// that branch was cut before #16113 and #16158 reached main.
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
	case versionAtLeast(version, 0, 8):
		return vllmDeviceNameDefaults(rule, versionAtLeastPatch(version, 0, 8, 4), hw)
	default:
		rule, assumed = "vLLM's", "; "+version+" ran the V0 engine by default, not modelled: the rule of 0.9 and later assumed"
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

// vllmDeviceNameDefaults is vLLM 0.8.0 to 0.8.4's choice by device name
// (get_device_name, "NVIDIA H100 80GB HBM3"; hw.Name stands for it):
// 8192 tokens on an H100 or H200, else 2048; 1024 sequences, which from
// 0.8.4 (revert256) only those two keep, the others getting V0's 256.
func vllmDeviceNameDefaults(rule string, revert256 bool, hw Hardware) VLLMBatchDefaults {
	name := strings.ToLower(hw.Name)
	if strings.Contains(name, "h100") || strings.Contains(name, "h200") {
		return VLLMBatchDefaults{MaxNumSeqs: 1024, MaxNumBatchedTokens: 8192,
			Why: fmt.Sprintf("%s default for an API server on an H100 or H200 (by device name: %s)", rule, hw.Name)}
	}
	d := VLLMBatchDefaults{MaxNumSeqs: 1024, MaxNumBatchedTokens: 2048,
		Why: fmt.Sprintf("%s default for an API server on a GPU other than the H100 and H200 (by device name: %s), 1024 sequences on every GPU", rule, hw.Name)}
	if revert256 {
		d.MaxNumSeqs = 256
		d.Why = fmt.Sprintf("%s default for an API server on a GPU other than the H100 and H200 (by device name: %s)", rule, hw.Name)
	}
	return d
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
