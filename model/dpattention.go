package model

import (
	"fmt"
	"math"
	"time"
)

// DP attention is SGLang's --enable-dp-attention for MLA models, as
// v0.4.x runs it (read at sgl-project/sglang v0.4.0.post1, the version of
// DataCrunch's December 2024 runs; the core is PR #1970):
//
//   - server_args.py: dp_size is set to tp_size, so each of the TP GPUs is
//     a data-parallel attention rank; chunked_prefill_size is halved,
//     cuda_graph_max_bs capped at 96, schedule_conservativeness scaled by
//     0.3, and the overlap scheduler disabled.
//   - data_parallel_controller.py: one scheduler per rank, each with its
//     own requests (dispatched round-robin by default, load_balance_method
//     "round_robin") and its own KV pool, sized from mem_fraction_static of
//     its GPU like any TP1 worker's.
//   - models/deepseek_v2.py: with use_dp the attention projections (q_a,
//     q_b, kv_a, kv_b, o) are ReplicatedLinear, so every rank holds all of
//     them and runs all 128 heads over its own tokens, with no all-reduce
//     after o_proj; the embedding (enable_tp=False) and the LM head
//     (ReplicatedLinear, logits without all-gather) are replicated too.
//     Before every layer's MLP, all_gather collects the hidden states of
//     all ranks (each padded to the largest rank's token count,
//     all_gather_into_tensor on the TP group); the MLP (the dense first
//     layer, the shared experts and the routed experts, TP-sharded over the
//     same GPUs as without DP attention, FusedMoE with tp_size) runs over
//     all ranks' tokens, its output is all-reduced as in TP, and each rank
//     keeps its own slice.
//   - scheduler.py prepare_dp_attn_batch: before each step the ranks
//     all-gather their token counts; a rank with nothing to run while
//     another has work runs an idle batch (ForwardMode.IDLE: no attention,
//     but the all-gathers and the MLP over the others' tokens), so the
//     ranks step together. CUDA graphs replay only when every rank is
//     decoding or idle and the largest rank's batch is at most
//     cuda_graph_max_bs (cuda_graph_runner.py can_run).
//
// So a step of the group, for per-rank batches b_1..b_R, costs the slowest
// rank's own part plus the part every GPU runs over all T = Σ tokens_r:
//
//	own_r   = roofline of rank r's attention projections (all heads) and
//	          LM head over its tokens, its attention FLOPs and KV traffic,
//	          and the replicated weights it reads (0 for an idle rank)
//	shared  = roofline of the MLP over T tokens: dense and shared experts
//	          TP-split, routed experts TP-split (those T tokens touch), the
//	          routers replicated
//	comm    = per layer an all-gather of (R−1)·max_r tokens_r hidden
//	          states and a ring all-reduce of T, over the link
//	step    = max_r own_r + shared + comm + 2·layers·CollectiveLatency
//	          + regime terms + StepOverhead
//
// where a roofline is max(compute, memory) + SerialFraction ·
// min(compute, memory), as Deployment prices a whole step. The all-gather
// before every MLP is a barrier, so no rank's MLP overlaps another's
// attention, and the two parts are priced apart.
//
// MLA's attention is priced in the form v0.4.x runs it
// (models/deepseek_v2.py, DeepseekV2AttentionMLA.forward at v0.4.0.post1:
// forward_normal only for an extend batch whose extend_prefix_lens sum to
// 0, forward_absorb otherwise). A first prefill runs the heads over the
// decompressed keys and values: per (query, key) pair and head
// 2·(qk_nope + qk_rope) + 2·v_head FLOPs. Every other step, decodes
// above all, runs forward_absorb: the query is absorbed into the latent
// (w_kc) and attn_mqa (RadixAttention with one KV head of kv_lora_rank +
// qk_rope_head_dim, v_head_dim kv_lora_rank) attends over the cached
// latent itself, 2·(kv_lora + qk_rope) + 2·kv_lora FLOPs a pair and head,
// 3.4 times the first form's for DeepSeek-V2 (1,088 against 320 dims).
// The absorption matmuls (w_kc, w_vc) have kv_b_proj's weights and are
// priced with it. Elsewhere in this package (no DP attention) MLA is
// priced in the first form throughout.
//
// StepTime(b) prices the group's step with every rank running b (the
// workload of a DP-attention worker replayed one rank per replay worker:
// exact when the ranks receive the same requests at the same times, as a
// round-robin dispatch of identical requests does); DPStepTime prices
// any per-rank batches, idle ranks included.

// dpConsts are the per-step constants of a DP-attention deployment.
type dpConsts struct {
	linearPeak          float64 // PeakFP8FLOPS or PeakFLOPS, as stepConsts
	ownFLOPsPerToken    float64 // 2 · attention matmul weights, all layers (replicated)
	lmHeadFLOPsPerSeq   float64 // 2 · vocab · hidden (replicated LM head)
	pairFLOPs           float64 // attention FLOPs per (query, key) pair, all layers, all heads (forward_normal)
	absorbedPairFLOPs   float64 // the same in forward_absorb's form (MLA; else pairFLOPs)
	ownBytes            float64 // replicated weights a rank with tokens reads: attention, norms, LM head
	kvPerToken          float64 // the MLA latent, all layers
	mlpFLOPsPerToken    float64 // 2 · (dense MLP + shared experts) / TP + 2 · routers
	expertFLOPsPerToken float64 // 2 · k routed experts / TP, MoE layers
	mlpBytes            float64 // dense MLP + shared experts / TP, routers
	expertBytes         float64 // routed experts / TP
	expertPick          float64 // 1 − k/E
	gatherBytesPerToken float64 // all-gather bytes a GPU receives per token of the largest rank, all layers
	reduceBytesPerToken float64 // ring all-reduce bytes a GPU sends per token of the group, all layers
	collectives         float64 // an all-gather and an all-reduce per layer
}

// checkDPAttention checks the layout SGLang allows with DP attention.
func (d *Deployment) checkDPAttention() error {
	m := &d.LLM
	switch {
	case !d.DPAttention:
		return nil
	case !m.IsMLA():
		return fmt.Errorf("dp attention: %q has no multi-head latent attention (SGLang v0.4 enables it for DeepSeek's MLA only)", m.Name)
	case d.pp() > 1 || d.dp() > 1 || d.EP > 1:
		return fmt.Errorf("dp attention: the ranks are the TP GPUs (dp_size = tp_size); PP, DP and EP must be 1")
	case m.numSlidingLayers() > 0:
		return fmt.Errorf("dp attention: %q has sliding-window layers", m.Name)
	case d.tp() > 1 && d.Hardware.LinkBandwidth <= 0:
		return fmt.Errorf("hardware %q: dp attention over %d GPUs needs a link bandwidth", d.Hardware.Name, d.TP)
	}
	return nil
}

// dpWeightSplit is weightSplit under DP attention: the attention, the
// embedding, the LM head and every vector replicated; the MLPs and
// shared experts split TP ways, the routed experts too.
func (d *Deployment) dpWeightSplit() (replicated, split, experts float64) {
	m := &d.LLM
	c := m.layerCounts()
	wb := float64(m.WeightBytes)
	am, _ := m.attnParts()
	attn := m.NumLayers * am
	replicated = float64(attn)*m.linearBytes() + float64(c.small+m.HiddenSize+m.EmbeddingParams())*wb
	if !m.TieWordEmbeddings {
		replicated += float64(m.LMHeadParams()) * wb
	}
	split = float64(c.linear-attn) * m.linearBytes() / float64(d.tp())
	experts = float64(c.experts) * m.expertBytes() / float64(d.tp())
	return replicated, split, experts
}

func (d *Deployment) dpConstants() dpConsts {
	m := &d.LLM
	tp := float64(d.tp())
	c := m.layerCounts()
	wb := float64(m.WeightBytes)
	am, _ := m.attnParts()
	attn := float64(m.NumLayers * am)
	nMoE := m.numMoELayers()
	routers := nMoE * (m.HiddenSize*m.NumExperts + m.RouterBias)
	expertMat, _ := m.denseMLPParts(m.MoEIntermediateSize, false)

	var k dpConsts
	k.linearPeak = d.Hardware.PeakFLOPS
	if m.FP8Compute && d.Hardware.PeakFP8FLOPS > 0 {
		k.linearPeak = d.Hardware.PeakFP8FLOPS
	}
	k.ownFLOPsPerToken = 2 * attn
	k.lmHeadFLOPsPerSeq = 2 * float64(m.LMHeadParams())
	k.pairFLOPs = float64(m.NumLayers) * m.attnFLOPsPerPairLayer()
	k.absorbedPairFLOPs = k.pairFLOPs
	if m.IsMLA() {
		k.absorbedPairFLOPs = float64(m.NumLayers) * 2 * float64(m.NumHeads) * float64(2*m.KVLoraRank+m.QKRopeHeadDim)
	}
	// A tied LM head reads the embedding as the head; an untied one's
	// embedding is gathered row by row (negligible), as in consts.
	k.ownBytes = attn*m.linearBytes() + float64(c.small-routers+m.HiddenSize+m.LMHeadParams())*wb
	k.kvPerToken = float64(m.NumLayers * m.KVBytesPerTokenPerLayer())
	k.mlpFLOPsPerToken = 2*(float64(c.linear)-attn)/tp + 2*float64(nMoE*m.HiddenSize*m.NumExperts)
	k.expertFLOPsPerToken = 2 * float64(nMoE*m.ExpertsPerToken*expertMat) / tp
	k.mlpBytes = (float64(c.linear)-attn)*m.linearBytes()/tp + float64(routers)*wb
	k.expertBytes = float64(c.experts) * m.expertBytes() / tp
	if m.IsMoE() {
		k.expertPick = 1 - float64(m.ExpertsPerToken)/float64(m.NumExperts)
	}
	// Activations stay 16-bit even when the weights are fp8.
	act := float64(m.HiddenSize * max(m.WeightBytes, 2))
	layers := float64(m.NumLayers)
	if d.tp() > 1 {
		k.gatherBytesPerToken = layers * (tp - 1) * act
		k.reduceBytesPerToken = layers * 2 * (tp - 1) / tp * act
		k.collectives = 2 * layers
	}
	return k
}

// dpOwn returns the terms of one rank's own part of a step: its tokens
// and sequences, the sum of the contexts its tokens read, and its
// attention's (query, key) pairs, those priced in forward_normal's form
// and those in forward_absorb's. An idle rank has none.
func (d *Deployment) dpOwn(k *dpConsts, tokens, seqs, ctx, pairs, absorbed float64) StepTerms {
	if tokens == 0 {
		return StepTerms{}
	}
	peak, bw := d.Hardware.PeakFLOPS, d.Hardware.MemBandwidth
	var t StepTerms
	t.LinearSec = k.ownFLOPsPerToken*tokens/k.linearPeak + k.lmHeadFLOPsPerSeq*seqs/peak
	t.AttentionSec = (k.pairFLOPs*pairs + k.absorbedPairFLOPs*absorbed) / peak
	t.WeightSec = k.ownBytes / bw
	t.KVSec = k.kvPerToken * (ctx + tokens) / bw
	return t
}

// dpShared returns the terms of the part every GPU runs over the group's
// total tokens, the largest rank having most.
func (d *Deployment) dpShared(k *dpConsts, total, most float64) StepTerms {
	if total == 0 {
		return StepTerms{}
	}
	var t StepTerms
	t.LinearSec = (k.mlpFLOPsPerToken + k.expertFLOPsPerToken) * total / k.linearPeak
	t.ExpertSec = k.expertFLOPsPerToken * total / k.linearPeak
	wb := k.mlpBytes
	if k.expertBytes > 0 {
		wb += k.expertBytes * (1 - math.Pow(k.expertPick, total))
	}
	t.WeightSec = wb / d.Hardware.MemBandwidth
	if bw := d.Hardware.LinkBandwidth; bw > 0 {
		t.CommSec = (k.gatherBytesPerToken*most + k.reduceBytesPerToken*total) / bw
	}
	t.Collectives = k.collectives
	return t
}

// roofSec is the roofline of step terms in seconds: the greater of their
// compute and memory times at the deployment's efficiencies, plus
// SerialFraction of the lesser.
func (d *Deployment) roofSec(t *StepTerms) float64 {
	compute, memory := d.roofline(t)
	return roofMax(compute, memory, d.SerialFraction)
}

// roofMax is the roofline of its compute and memory sides: the greater,
// plus serial (SerialFraction) of the lesser.
func roofMax(compute, memory, serial float64) float64 {
	sec := max(compute, memory)
	if serial > 0 {
		sec += serial * min(compute, memory)
	}
	return sec
}

// dpTime prices a group step: the slowest rank's own part (ownSec), the
// shared part's roofline, its communication, the regime terms of the
// step (any rank prefilling, the largest decode batch) and the overhead.
func (d *Deployment) dpTime(ownSec float64, shared StepTerms, prefill bool, decodes int) time.Duration {
	d.regimeTerms(&shared, prefill, decodes)
	// shared has no inter-node latency (dpShared sets none): priced adds 0.
	return d.priced(ownSec+d.roofSec(&shared), &shared)
}

// dpSums returns a batch's tokens, sequences, context sum and attention
// pairs (no sliding layers under DP attention), the pairs split into
// forward_normal's and forward_absorb's: a batch of prefills none of
// which has a prefix runs the first, any other batch (a decode, a chunk
// after the first, a prefill with a cached prefix, a mixed batch, whose
// extend_prefix_lens hold its decodes' contexts) the second.
func dpSums(b *Batch) (tokens, seqs, ctx, normal, absorbed float64) {
	s := sumBatch(b, false, 0)
	first := len(b.Decode) == 0
	for i := range b.Prefill {
		first = first && b.Prefill[i].Context == 0
	}
	if first {
		return s.tokens, s.seqs, s.ctxFull, s.pairsFull, 0
	}
	return s.tokens, s.seqs, s.ctxFull, 0, s.pairsFull
}

// DPStepTime prices one step of a DP-attention group whose rank i runs
// ranks[i] (nil or empty: idle); len(ranks) must be the TP size. A group
// with no tokens anywhere does not step: 0.
func (d *Deployment) DPStepTime(ranks []*Batch) (time.Duration, error) {
	if !d.DPAttention {
		return 0, fmt.Errorf("DPStepTime: %s is not a dp-attention deployment", d.LLM.Name)
	}
	if len(ranks) != int(d.tp()) {
		return 0, fmt.Errorf("DPStepTime: %d rank batches for %d ranks", len(ranks), d.tp())
	}
	k := d.dpConsts()
	var own, total, most float64
	prefill, decodes := false, 0
	for _, b := range ranks {
		if b == nil {
			continue
		}
		tokens, seqs, ctx, pairs, absorbed := dpSums(b)
		o := d.dpOwn(k, tokens, seqs, ctx, pairs, absorbed)
		own = max(own, d.roofSec(&o))
		total += tokens
		most = max(most, tokens)
		prefill = prefill || len(b.Prefill) > 0
		decodes = max(decodes, len(b.Decode))
	}
	if total == 0 {
		return 0, nil
	}
	return d.dpTime(own, d.dpShared(k, total, most), prefill, decodes), nil
}

// dpStepTime is StepTime under DP attention: every rank runs b.
func (d *Deployment) dpStepTime(b *Batch) time.Duration {
	k := d.dpConsts()
	tokens, seqs, ctx, pairs, absorbed := dpSums(b)
	o := d.dpOwn(k, tokens, seqs, ctx, pairs, absorbed)
	own := d.roofSec(&o)
	r := float64(d.tp())
	return d.dpTime(own, d.dpShared(k, r*tokens, tokens), len(b.Prefill) > 0, len(b.Decode))
}

// dpDecodeStepTime is DecodeStepTime under DP attention: every rank
// decodes n requests whose contexts sum to ctx.
func (d *Deployment) dpDecodeStepTime(n int, ctx int64) time.Duration {
	k := d.dpConsts()
	tokens := float64(n)
	o := d.dpOwn(k, tokens, tokens, float64(ctx), 0, float64(ctx)+tokens)
	own := d.roofSec(&o)
	return d.dpTime(own, d.dpShared(k, float64(d.tp())*tokens, tokens), false, n)
}

// dpTerms is Terms under DP attention: the terms of the rank's own part
// and of the shared part for every rank running b, added (the routed
// experts, ExpertSec, are all in the shared part). (StepTime takes
// the roofline of each part apart; the sum is what calibration's shares
// and identifiability checks read.)
func (d *Deployment) dpTerms(b *Batch) StepTerms {
	k := d.dpConsts()
	tokens, seqs, ctx, pairs, absorbed := dpSums(b)
	o := d.dpOwn(k, tokens, seqs, ctx, pairs, absorbed)
	s := d.dpShared(k, float64(d.tp())*tokens, tokens)
	s.LinearSec += o.LinearSec
	s.AttentionSec += o.AttentionSec
	s.WeightSec += o.WeightSec
	s.KVSec += o.KVSec
	d.regimeTerms(&s, len(b.Prefill) > 0, len(b.Decode))
	return s
}

// dpConsts returns the deployment's DP-attention constants.
func (d *Deployment) dpConsts() *dpConsts {
	if d.dpk == nil {
		// A Deployment built as a literal rather than by NewDeployment.
		k := d.dpConstants()
		return &k
	}
	return d.dpk
}
