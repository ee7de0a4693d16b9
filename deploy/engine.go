package deploy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// engineOptPrefix prefixes the Run.Extra keys of the server options
// recorded at ingest (ingest.EngineOptPrefix; a test keeps them equal).
const engineOptPrefix = "engine_opt."

// sglangOptions are the SGLang server options a replay reads from a
// run's record (engineOptions, sglangCUDAGraphMaxBS,
// sglangTorchCompileMaxBS); engineOption refuses to read any other.
var sglangOptions = []string{
	"disable_overlap_schedule", "disable_radix_cache", "enable_mixed_chunk", "chunked_prefill_size",
	"max_prefill_tokens", "context_length", "schedule_policy", "max_running_requests",
	"disable_cuda_graph", "cuda_graph_max_bs", "enable_torch_compile", "torch_compile_max_bs", "max_torch_compile_bs",
}

// readOptions is EngineOptions' list: vLLM's options, vLLM's
// enable_expert_parallel (read apart: applyRecord) and SGLang's, sorted.
var readOptions = func() []string {
	var out []string
	for _, v := range vllmOptions {
		out = append(out, v.opt)
	}
	out = append(out, "enable_expert_parallel")
	out = append(out, sglangOptions...)
	slices.Sort(out)
	return slices.Compact(out)
}()

// EngineOptions returns the server options, under the engines' own
// names, that a replay reads from a run's record (ingest --engine-opt):
// vLLM's and SGLang's, sorted. Others are kept in the record and read by
// nothing.
func EngineOptions() []string { return slices.Clone(readOptions) }

// engineOption returns run's recorded server option key; key must be one
// of EngineOptions' (a key read and not listed would be one a user is
// told nothing reads).
func engineOption(run trace.Run, key string) (string, bool) {
	if _, ok := slices.BinarySearch(readOptions, key); !ok {
		panic("deploy: engine option " + key + " is read but not listed in EngineOptions")
	}
	v, ok := run.Extra[engineOptPrefix+key]
	return v, ok
}

// engineOptions returns cfg with the scheduler of the engine that served
// run when the cluster names none: a trace of an SGLang server is
// replayed through SGLang's scheduler, any other through vLLM's. An
// SGLang run's server options recorded at ingest (Run.Extra
// "engine_opt.KEY") fill the SGLang settings the cluster leaves at their
// defaults; version is the cluster's engine_version (the run's recorded
// one unless the cluster file gives another), which decides whether the
// run ran the overlap scheduler as the other version defaults do.
func engineOptions(cfg replay.Config, run trace.Run, version string) (replay.Config, error) {
	s := &cfg.Scheduler
	if s.Engine == "" && strings.EqualFold(run.Engine, replay.EngineSGLang) {
		s.Engine = replay.EngineSGLang
	}
	if s.Engine != replay.EngineSGLang {
		return cfg, nil
	}
	var errs []error
	opt := func(key string, set func(v string) error) {
		v, ok := engineOption(run, key)
		if !ok {
			return
		}
		if err := set(v); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %s%s: %q: %v", run.Name, engineOptPrefix, key, v, err))
		}
	}
	flag := func(dst *bool) func(string) error {
		return func(v string) error {
			b, err := strconv.ParseBool(v)
			*dst = *dst || b
			return err
		}
	}
	count := func(dst *int64) func(string) error {
		return func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && *dst == 0 {
				*dst = n
			}
			return err
		}
	}
	// A recorded SGLang run ran the overlap scheduler unless its version
	// predates v0.4, where it became the default, or it was disabled.
	// (A replay of no recorded run leaves it as the cluster says.)
	if strings.EqualFold(run.Engine, replay.EngineSGLang) && model.SGLangOverlapByDefault(version) {
		s.OverlapSchedule = true
	}
	var noOverlap bool
	opt("disable_overlap_schedule", flag(&noOverlap))
	if noOverlap {
		s.OverlapSchedule = false
	}
	// SGLang's bench_serving sends every request with ignore_eos (unless
	// --disable-ignore-eos, which its results do not record), which
	// changes how the server admits them (replay.SGLangConfig.IgnoreEOS).
	if run.Source == "sglang-bench" {
		s.IgnoreEOS = true
	}
	opt("disable_radix_cache", flag(&s.DisableRadixCache))
	opt("enable_mixed_chunk", flag(&s.EnableMixedChunk))
	opt("chunked_prefill_size", count(&s.ChunkedPrefillSize))
	opt("max_prefill_tokens", count(&s.MaxPrefillTokens))
	opt("context_length", count(&s.ContextLength))
	opt("schedule_policy", func(v string) error {
		if s.SchedulePolicy == "" {
			s.SchedulePolicy = v
		}
		return nil
	})
	opt("max_running_requests", func(v string) error {
		n, err := strconv.Atoi(v)
		if err == nil && s.MaxRunningRequests == 0 {
			s.MaxRunningRequests = n
		}
		return err
	})
	if len(errs) == 0 {
		// The run's options set no API server's ranks, which the
		// cluster's check bounded (check) or its sizing will.
		if err := unsized(cfg).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("run %s: engine options: %v", run.Name, err))
		}
	}
	return cfg, errors.Join(errs...)
}

// sglangCUDAGraphMaxBS returns the decode batch size up to which an
// SGLang worker replays CUDA graphs: the run's recorded
// cuda_graph_max_bs, -1 when it recorded disable_cuda_graph, else d's,
// the default of the run's recorded SGLang version (or of
// model.SGLangDefaultVersion when it records none) on its GPU and TP
// (model.SGLangServeDefaults: 160 on an H200 at v0.4.0.post1, 8 below TP4
// and 80 from TP4 on a GPU under 25,000 MiB; larger from v0.4.5.post3).
func sglangCUDAGraphMaxBS(run trace.Run, d model.SGLangDefaults) int {
	if v, _ := engineOption(run, "disable_cuda_graph"); parseTrue(v) {
		return -1
	}
	v, _ := engineOption(run, "cuda_graph_max_bs")
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return d.CUDAGraphMaxBS
}

// sglangTorchCompileMaxBS returns the decode batch size up to which an
// SGLang worker replays torch-compiled CUDA graphs: 0 unless the run
// recorded enable_torch_compile, else its recorded torch_compile_max_bs
// (max_torch_compile_bs in v0.3.2–v0.3.4) or the version's default, sg's
// (model.Deployment.Regime says what it changes).
func sglangTorchCompileMaxBS(run trace.Run, sg model.SGLangDefaults) int {
	if v, _ := engineOption(run, "enable_torch_compile"); !parseTrue(v) {
		return 0
	}
	for _, key := range []string{"torch_compile_max_bs", "max_torch_compile_bs"} {
		v, _ := engineOption(run, key)
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return sg.TorchCompileMaxBS
}

// regimeNote is the printed line saying how an SGLang worker runs its
// steps (model.Deployment.Regime): which decode batches replay
// torch-compiled or plain CUDA graphs, and which run eagerly.
func regimeNote(dep *model.Deployment) string {
	g, c := dep.CUDAGraphMaxBS, dep.TorchCompileMaxBS
	switch {
	case g < 0:
		return "steps: every step eager (disable_cuda_graph)"
	case c > 0:
		return fmt.Sprintf("steps: decode batches up to %d torch-compiled CUDA graphs, up to %d plain CUDA graphs, larger ones and prefill eager (enable_torch_compile, torch_compile_max_bs %d, cuda_graph_max_bs %d)",
			min(c, g), g, c, g)
	}
	return fmt.Sprintf("steps: decode batches up to %d CUDA graphs, larger ones and prefill eager (cuda_graph_max_bs %d; torch compile off)", g, g)
}

// parseTrue reports whether v is a boolean option's true.
func parseTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}
