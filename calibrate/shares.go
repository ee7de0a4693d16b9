package calibrate

import (
	"fmt"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// minRegimeShare is the least share of a training run's decoded tokens
// that must come from steps of a regime (model.StepRegime) for
// defaultFree to fit what that regime alone pays: the ITL quantiles the
// runs are fitted on are quantiles over tokens, and a regime that
// produced under a fifth of every run's tokens moves none of them by
// more than the other regimes' coefficients do.
const minRegimeShare = 0.2

// shares are what the training runs' replays at the default
// coefficients say about which coefficients they can determine: the
// largest share, over the runs, of KV bytes in the bytes the steps moved
// (weights and KV, at full bandwidth), of decoded tokens from
// torch-compiled and from plain-graph steps, and of decoded tokens from
// memory-bound and from compute-bound steps; compiles is whether any
// run's engine compiles some steps.
type shares struct {
	kv                        float64
	compiled, graph           float64
	memoryBound, computeBound float64
	compiles                  bool
}

// serialWarning says why serial_fraction is not fitted on runs of these
// shares ("" when it is): what it adds to a memory-bound step is a share
// of its compute, a cost per token as the KV and link efficiencies' are,
// and to a compute-bound step a share of its weight and KV reads, so
// only runs that decode on both sides of the roofline tell it from
// those efficiencies.
func (sh shares) serialWarning() string {
	if sh.memoryBound >= minRegimeShare && sh.computeBound >= minRegimeShare {
		return ""
	}
	return fmt.Sprintf("%s not fitted: the training runs decode at most %.1f %% of their tokens in memory-bound steps and at most %.1f %% in compute-bound ones (each needs %.0f %% in some run), so the share of the lesser time a step does not overlap cannot be told from the bandwidth and compute efficiencies (train on a light run and an offline or loaded one, or --fit it)",
		CoefSerialFraction, 100*sh.memoryBound, 100*sh.computeBound, 100*minRegimeShare)
}

// uncompiledWarning says why uncompiled_layer_s is not fitted on runs
// of these shares ("" when no run's engine compiles anything): it is
// what a plain-graph or eager step pays over a compiled one, beside the
// eager steps' launches, so only runs decoding in both compiled and
// plain graphs can determine it, and even then it is left to --fit: on
// the only measured runs that compiled (DataCrunch's SGLang sweeps, see
// the README's fidelity section) it was either not determined or, where
// determined, predicted the held-out loads no better.
func (sh shares) uncompiledWarning() string {
	if !sh.compiles {
		return ""
	}
	const not = CoefUncompiledLayer + " not fitted"
	if sh.compiled < minRegimeShare || sh.graph < minRegimeShare {
		return fmt.Sprintf(not+": the training runs decode at most %.1f %% of their tokens in torch-compiled CUDA graphs and at most %.1f %% in plain ones (each needs %.0f %% in some run), so an uncompiled step's cost cannot be told from the eager steps' launches and the step overhead (train on a run whose decode batches are mostly between torch_compile_max_bs and cuda_graph_max_bs, or --fit it)",
			100*sh.compiled, 100*sh.graph, 100*minRegimeShare)
	}
	return fmt.Sprintf(not+" by default: the training runs decode up to %.1f %% of their tokens in torch-compiled CUDA graphs and %.1f %% in plain ones, enough to fit it, but a fit of it has not yet been shown to predict held-out loads better (--fit it)",
		100*sh.compiled, 100*sh.graph)
}

// trainShares replays each training run (parallel at a time) at its
// deployment's coefficients and returns the largest of each share over
// the runs.
func trainShares(train []*ReplayRun, parallel int) (shares, error) {
	per := make([]shares, len(train))
	err := inParallel(len(train), parallel, func(i int) (err error) {
		per[i], err = runShares(train[i])
		return err
	})
	var sh shares
	for _, s := range per {
		sh.kv = max(sh.kv, s.kv)
		sh.compiled = max(sh.compiled, s.compiled)
		sh.graph = max(sh.graph, s.graph)
		sh.memoryBound = max(sh.memoryBound, s.memoryBound)
		sh.computeBound = max(sh.computeBound, s.computeBound)
		sh.compiles = sh.compiles || s.compiles
	}
	return sh, err
}

// runShares is the shares of one run's steps.
func runShares(run *ReplayRun) (shares, error) {
	d := *run.Deployment
	opt := replay.Options{Transient: true, Offload: run.Offload, DecodeOffload: run.DecodeOffload}
	var pd model.Deployment // the prefill pool's, if its own
	if run.Prefill != nil {
		pd = *run.Prefill
		opt.Prefill = &replay.PoolModel{Cost: &pd, KVBlocks: run.PrefillKVBlocks}
	}
	var weights, kv, tokens float64
	var byRegime [model.RegimeEager + 1]float64
	var memoryBound, computeBound float64
	opt.Observe = func(s *replay.Step) error {
		dep := &d // the step's worker's deployment
		if s.Cost == model.StepModel(&pd) {
			dep = &pd
		}
		t := dep.Terms(s.Batch)
		weights += t.WeightSec
		kv += t.KVSec
		n := float64(len(s.Batch.Decode))
		tokens += n
		byRegime[dep.Regime(len(s.Batch.Prefill) > 0, len(s.Batch.Decode))] += n
		if compute, memory := dep.Roofline(t); memory >= compute {
			memoryBound += n
		} else {
			computeBound += n
		}
		return nil
	}
	_, err := replay.RunInputs(run.Config, &d, run.KVBlocks, run.Inputs, func(*trace.Request) error { return nil }, opt)
	if err != nil {
		return shares{}, fmt.Errorf("run %s: %w", run.Run.Name, err)
	}
	sh := shares{compiles: d.TorchCompileMaxBS > 0 && d.CUDAGraphMaxBS > 0}
	if weights+kv > 0 {
		sh.kv = kv / (weights + kv)
	}
	if tokens > 0 {
		sh.compiled = byRegime[model.RegimeCompiled] / tokens
		sh.graph = byRegime[model.RegimeGraph] / tokens
		sh.memoryBound = memoryBound / tokens
		sh.computeBound = computeBound / tokens
	}
	return sh, nil
}
