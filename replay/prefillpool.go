package replay

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/opaltrace/opaltrace/replay/kvcache"
)

// A prefill pool of its own deployment (Options.Prefill): the prefill
// workers of a disaggregated cluster on other GPUs, or the same GPUs in
// another TP size, than the decode workers, as Dynamo's profiler
// recommends a parallel mapping for each pool and as deployments put the
// compute-bound prefill on one GPU and the memory-bound decode on
// another. The prefill workers' steps are priced by the pool's step model
// and each holds the pool's KV capacity; everything else (the scheduler's
// settings, the hand-over's bytes and link, which package deploy sets
// from the prefill deployment) is the cluster's.

// prefillPool sets the engine up for a prefill pool of its own
// deployment (the first e.prefillSlots workers), and refuses KV tiers on
// both pools of one set (tiers: Offload is one deployment's, here the
// prefill pool's; the decode pool's own are Options.DecodeOffload).
func (e *engine) prefillPool(p *PoolModel, tiers bool) error {
	d := e.cfg.Disaggregation
	switch {
	case !d.on():
		return errors.New("replay: a prefill pool of its own deployment without disaggregation")
	case p.Cost == nil:
		return errors.New("replay: the prefill pool has no step model")
	case p.KVBlocks <= 0 || p.KVBlocks > kvcache.MaxBlocks:
		return fmt.Errorf("replay: %d KV blocks per prefill worker is not a capacity the engine supports", p.KVBlocks)
	case tiers && !d.prefillTiersOnly():
		return errors.New("replay: KV tiers on the decode pool (decode_kv_tiers) with a prefill pool of its own deployment need the decode pool's own (Options.DecodeOffload: Offload is sized by the prefill pool's deployment)")
	}
	pr := newPricing(p.Cost, e.test.noLoneMemo)
	e.prefillPricing, e.prefillKV = &pr, p.KVBlocks
	return nil
}

// decodeOffload checks opts.DecodeOffload, the decode pool's own tiers
// beside the prefill pool's (Offload): a prefill pool of its own with
// decode_kv_tiers under vLLM's scheduler, and tiers of one tier block,
// write policy and remote store (its blocks of one size: a block's
// bytes alike, or no remote store).
func (e *engine) decodeOffload(opts Options) error {
	d, p := opts.DecodeOffload, opts.Offload
	if d == nil {
		return nil
	}
	policy := func(o *Offload) string { return cmp.Or(o.WritePolicy, WriteThrough) }
	switch {
	case opts.Prefill == nil || !e.cfg.Disaggregation.DecodeKVTiers || e.cfg.Scheduler.Engine == EngineSGLang:
		return errors.New("replay: the decode pool's own KV tiers (Options.DecodeOffload) are for a prefill pool of its own deployment with decode_kv_tiers, under vLLM")
	case d.HiCache != nil || d.BlockTokens != p.BlockTokens || policy(d) != policy(p) || d.RemoteBlocks != p.RemoteBlocks:
		return fmt.Errorf("replay: the decode pool's KV tiers (a block of %d tokens, %s, %d remote blocks) are not the prefill pool's (%d, %s, %d): one tier block, write policy and remote store",
			d.BlockTokens, policy(d), d.RemoteBlocks, p.BlockTokens, policy(p), p.RemoteBlocks)
	case d.RemoteBlocks > 0 && d.KVBytesPerToken != p.KVBytesPerToken:
		return fmt.Errorf("replay: a remote store shared by pools of %d and %d KV bytes a token: not modelled yet (one store holds blocks of one size)", p.KVBytesPerToken, d.KVBytesPerToken)
	}
	return d.Validate(e.cfg.Scheduler.BlockSize)
}

// prefillScheduler sets the prefill workers' scheduler settings (the
// first e.prefillSlots workers') when they are not the cluster's: their own batch
// limits (DisaggregationConfig.PrefillScheduler), and with a KV capacity of
// their own (prefillPool) their KV and, under SGLang when
// max_running_requests is not given, the running limit SGLang derives
// from it.
func (e *engine) prefillScheduler(runningGiven bool) {
	d := e.cfg.Disaggregation
	if !d.on() || e.prefillKV == 0 && !d.PrefillScheduler.On() {
		return
	}
	s := d.PrefillScheduler.Apply(e.cfg.Scheduler)
	if e.prefillKV > 0 {
		s.KVCacheTokens = e.prefillKV * s.BlockSize
		if s.Engine == EngineSGLang && !runningGiven && d.PrefillScheduler.MaxRunningRequests == 0 {
			s.MaxRunningRequests = sgMaxRunning(s.KVCacheTokens, s.ContextLength)
		}
	}
	e.prefillSched = &s
}

// prefillSchedulerOf returns the prefill workers' scheduler settings:
// their own, or the cluster's.
func (e *engine) prefillSchedulerOf() SchedulerConfig {
	if e.prefillSched != nil {
		return *e.prefillSched
	}
	return e.cfg.Scheduler
}

// schedulerOf returns the scheduler settings and KV blocks of the worker
// in slot i: its pool's.
func (e *engine) schedulerOf(i int) (SchedulerConfig, int64) {
	if i < e.prefillSlots {
		return e.prefillSchedulerOf(), e.kvBlocksOf(i)
	}
	return e.cfg.Scheduler, e.kvBlocks
}

// kvBlocksOf returns the KV capacity of the worker in slot i: its pool's.
func (e *engine) kvBlocksOf(i int) int64 {
	if e.prefillKV > 0 && i < e.prefillSlots {
		return e.prefillKV
	}
	return e.kvBlocks
}
