package replay

import (
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
// deployment (the first e.prefillSlots workers), and refuses what it does not
// model yet: KV tiers on both pools (Offload is one deployment's, here the
// prefill pool's, whose workers alone have tiers by default).
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
		return errors.New("replay: KV tiers on the decode pool (decode_kv_tiers) with a prefill pool of its own deployment: not modelled yet (the tiers are sized by one deployment: the prefill pool's)")
	}
	pr := newPricing(p.Cost, e.test.noLoneMemo)
	e.prefillPricing, e.prefillKV = &pr, p.KVBlocks
	return nil
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
