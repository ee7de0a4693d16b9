package model

import (
	"math"
	"time"
)

// A DecodePricer prices steps of n decodes and no prefill by the sum of
// their contexts: DecodeStepTime(n, sum), bit for bit, with the step
// terms that depend on n alone (sizeTerms) worked out once. A replay's
// steady batch keeps its size step after step while its sum grows, and
// a step it has not met before is priced here.
//
// Note: DecodeStepTime summed the batch, built all its terms, and priced
// them through four calls, some 450 instructions a step (110 M of the
// 1,045 M of BenchmarkReplayMooncakeRouters/round_robin went to the step
// model); the pricer computes the attention and KV terms and the price,
// with what depends on n and the coefficients alone worked out when it
// is made (decodePlan). It prices with the coefficients the deployment
// had then, as a replay keeps the prices it asked for the whole run: a
// pricer made before a coefficient changed prices as before the change.
type DecodePricer struct {
	d       *Deployment
	k       *stepConsts
	nDecode float64 // n
	tokens  float64 // n, summed as DecodeStepTime sums it
	plan    decodePlan
}

// DecodePricer returns the pricer of steps of n decodes, or false where
// DecodeStepTime declines (sliding-window layers, n ≤ 0) or prices the
// ranks of DP attention (dpDecodeStepTime).
func (d *Deployment) DecodePricer(n int) (*DecodePricer, bool) {
	k := d.constants()
	if k.slidingPairFLOPs > 0 || n <= 0 || d.DPAttention {
		return nil, false
	}
	// The sums of DecodeStepTime, in its order.
	nDecode := float64(n)
	var tokens float64
	tokens += nDecode
	seqs := 0 + nDecode
	plan := d.decodePlan(d.sizeTerms(k, tokens, seqs), n)
	return &DecodePricer{d: d, k: k, nDecode: nDecode, tokens: tokens, plan: plan}, true
}

// Price returns the time of a step of the pricer's n decodes whose
// contexts sum to ctx: DecodeStepTime(n, ctx) with the coefficients the
// deployment had when the pricer was made.
//
// Note: it prices as timeOf prices the step's terms, with what depends on
// n and the coefficients alone (the regime's layers, the compute side's
// linear part, the weights' time, the terms priced adds) taken from the
// plan, through the helpers roofline, roofSec and priced use: the same
// operations on the same values, in the same order, 84 instructions a
// step (callgrind, BenchmarkDecodePrice). Where it set the regime's
// terms and priced them through roofSec and priced at each step, reading
// the coefficients there, a step cost 169 (the 423,000 prices the
// autoscaled BenchmarkReplayMooncakeRouters replay asks were 71 million
// of the 662 million instructions of its project code), and 143 when it
// compared the coefficients with those of its plan at each step to plan
// again.
func (p *DecodePricer) Price(ctx int64) time.Duration {
	pl := &p.plan
	var ctxFull, pairsFull float64
	ctxFull += float64(ctx)
	pairsFull += float64(ctx) + p.nDecode
	attention, kv := p.d.contextTerms(p.k, p.tokens, ctxFull, 0, pairsFull, 0)
	compute := pl.linear + attention/pl.attentionMFU
	memory := memoryTime(pl.weight, kv, pl.kvEff, pl.kvApart)
	sec := roofMax(compute, memory, pl.serial)
	// priced, its terms from the plan.
	if pl.comm {
		sec += pl.commSec
	}
	if pl.collective {
		sec += pl.collectives * pl.collectiveSec
	}
	sec += pl.interNodeSec
	if pl.launch {
		sec += pl.eagerLayers * pl.launchSec
	}
	if pl.uncompiled {
		sec += pl.uncompiledLayers * pl.uncompiledSec
	}
	if pl.cpuBound {
		sec = max(sec, pl.cpuSec)
	}
	return time.Duration(math.Round(sec*1e9)) + pl.overhead
}

// A decodePlan is what a DecodePricer's price takes from its size terms,
// regime and coefficients, as roofline, roofSec and priced take it.
type decodePlan struct {
	linear       float64 // linearSide
	attentionMFU float64
	weight       float64 // memorySide's
	kvEff        float64
	kvApart      bool
	serial       float64 // SerialFraction

	// priced's terms, each as it computes it, and which apply.
	comm                            bool // CommSec > 0: commSec is CommSec/LinkEfficiency
	commSec                         float64
	collective                      bool
	collectives, collectiveSec      float64
	interNodeSec                    float64
	launch                          bool
	eagerLayers, launchSec          float64
	uncompiled                      bool
	uncompiledLayers, uncompiledSec float64
	cpuBound                        bool
	cpuSec                          float64 // EagerLayers · EagerLayerCPU
	overhead                        time.Duration
}

// decodePlan returns the plan of steps of n decodes whose size terms are
// size, with d's coefficients now.
//
// Note: priced's terms are worked out here as priced works them out at
// each step (it stays as it is: a plan built at every step of StepTime
// cost it 130 instructions a step, callgrind on BenchmarkStepTime); a
// term priced gains must be added to both, which
// TestDecodePricerEqualsDecodeStepTime checks for every coefficient it
// sets.
func (d *Deployment) decodePlan(size StepTerms, n int) decodePlan {
	t := size
	d.regimeTerms(&t, false, n)
	pl := decodePlan{linear: d.linearSide(&t), attentionMFU: d.attentionMFU(), serial: d.SerialFraction,
		interNodeSec: t.InterNodeLatencySec, overhead: d.StepOverhead}
	pl.weight, pl.kvEff, pl.kvApart = d.memorySide(t.WeightSec)
	if t.CommSec > 0 {
		pl.comm, pl.commSec = true, t.CommSec/d.LinkEfficiency
	}
	if d.CollectiveLatency > 0 {
		pl.collective, pl.collectives, pl.collectiveSec = true, t.Collectives, d.CollectiveLatency.Seconds()
	}
	if t.EagerLayers > 0 && d.EagerLayerLaunch > 0 {
		pl.launch, pl.eagerLayers, pl.launchSec = true, t.EagerLayers, d.EagerLayerLaunch.Seconds()
	}
	if t.UncompiledLayers > 0 && d.UncompiledLayer > 0 {
		pl.uncompiled, pl.uncompiledLayers, pl.uncompiledSec = true, t.UncompiledLayers, d.UncompiledLayer.Seconds()
	}
	if t.EagerLayers > 0 && d.EagerLayerCPU > 0 {
		pl.cpuBound, pl.cpuSec = true, t.EagerLayers*d.EagerLayerCPU.Seconds()
	}
	return pl
}
