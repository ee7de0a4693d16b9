package model

import "time"

// A DecodePricer prices steps of n decodes and no prefill by the sum of
// their contexts: DecodeStepTime(n, sum), bit for bit, with the step
// terms that depend on n alone (sizeTerms) worked out once. A replay's
// steady batch keeps its size step after step while its sum grows, and
// a step it has not met before is priced here.
//
// Note: DecodeStepTime summed the batch, built all its terms, and priced
// them through four calls, some 450 instructions a step (110 M of the
// 1,045 M of BenchmarkReplayMooncakeRouters/round_robin went to the step
// model); the pricer computes the attention and KV terms, the regime's
// and the price. The coefficients are read at each step, as they may
// change at any time; the terms it keeps depend on the shape alone.
type DecodePricer struct {
	d       *Deployment
	k       *stepConsts
	n       int
	nDecode float64   // n
	tokens  float64   // n, summed as DecodeStepTime sums it
	size    StepTerms // sizeTerms of n decodes
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
	return &DecodePricer{d: d, k: k, n: n, nDecode: nDecode, tokens: tokens, size: d.sizeTerms(k, tokens, seqs)}, true
}

// Price returns the time of a step of the pricer's n decodes whose
// contexts sum to ctx: DecodeStepTime(n, ctx).
func (p *DecodePricer) Price(ctx int64) time.Duration {
	var ctxFull, pairsFull float64
	ctxFull += float64(ctx)
	pairsFull += float64(ctx) + p.nDecode
	t := p.size
	t.AttentionSec, t.KVSec = p.d.contextTerms(p.k, p.tokens, ctxFull, 0, pairsFull, 0)
	p.d.regimeTerms(&t, false, p.n)
	return p.d.priced(p.d.roofSec(&t), &t) // timeOf, a call less
}
