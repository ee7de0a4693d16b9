package model

import (
	"fmt"
	"math"
	"time"
)

// Step-model forms a cost model file or cluster can select.
const (
	FormRoofline = "roofline" // Deployment: one pass, work adds up (default)
	FormOpal     = "opal"     // OpalStep: Opal's max-of-parts form
)

// Opal's default roofline coefficients (opal-notes.md §1).
const (
	OpalDefaultA = 4
	OpalDefaultB = 24
)

// An OpalStep prices a step the way Opal (IBM opal-sim) does, so that
// Opal configurations reproduce (opal-notes.md §1):
//
//	prefill(n, p) = L · (A·d·(n(n+1) − p(p+1)) + B·d²·(n − p)) / (TFLOPS·TP·10¹²)
//	decode(batch) = (2·P + Σ ctx_i · KV bytes per token) / (TP · Bandwidth)
//	step          = max(max over chunks of prefill, decode)
//
// where n is the tokens processed once the chunk is done, p those before
// it, d the hidden size, L the layers and P Opal's parameter estimate.
// Prefill chunks of different requests overlap (max, not sum) and so do
// prefill and decode; the decode term, with its weight read, is charged
// even when no request decodes (opal-notes §2 Q8). It is a model of
// Opal, not of vLLM: Deployment is the default.
type OpalStep struct {
	Layers, Hidden  int64
	A, B            float64 // FLOP coefficients: attention (n²) and linear (d²) terms
	TFLOPS          float64 // peak, in 10¹² FLOP/s
	Bandwidth       float64 // bytes/s
	TP              int64
	Params          int64 // P, weights read per decode step: 2·P bytes
	KVBytesPerToken int64
	// StepOverhead is added to every step; Opal has none (its 1 ms
	// batch-build waits are scheduler time, not step time). Calibration
	// may fit one.
	StepOverhead time.Duration
}

// OpalParams is Opal's estimate of a model's parameter count from its
// config.json: the layers and the vocabulary tables, without the final
// norm. For granite-3.3-8b it is 8,170,860,544.
func OpalParams(m LLM) int64 { return m.Params() - m.HiddenSize }

// NewOpalStep builds Opal's form for m on tp GPUs of hw with a = 4,
// b = 24.
func NewOpalStep(m LLM, hw Hardware, tp int) (*OpalStep, error) {
	if err := checkShape(hw, m, tp); err != nil {
		return nil, err
	}
	if m.IsMLA() || m.IsMoE() || m.numSlidingLayers() > 0 {
		return nil, fmt.Errorf("model %q: the Opal form prices dense full-attention models only", m.Name)
	}
	return &OpalStep{
		Layers: m.NumLayers, Hidden: m.HiddenSize, A: OpalDefaultA, B: OpalDefaultB,
		TFLOPS: hw.PeakFLOPS / 1e12, Bandwidth: hw.MemBandwidth, TP: int64(tp),
		Params: OpalParams(m), KVBytesPerToken: m.KVBytesPerToken(),
	}, nil
}

// PrefillSec is Opal's prefill time in seconds of the tokens p+1..n.
func (o *OpalStep) PrefillSec(n, p int64) float64 {
	nf, pf, d := float64(n), float64(p), float64(o.Hidden)
	flops := float64(o.Layers) * (o.A*d*(nf*(nf+1)-pf*(pf+1)) + o.B*d*d*(nf-pf))
	return flops / (o.TFLOPS * float64(max(o.TP, 1)) * 1e12)
}

// DecodeSec is Opal's decode time in seconds of one step over requests
// with the given contexts; with none it is the weight term alone.
func (o *OpalStep) DecodeSec(ctx []int64) float64 {
	var sum float64
	for _, c := range ctx {
		sum += float64(c)
	}
	return (2*float64(o.Params) + sum*float64(o.KVBytesPerToken)) / (float64(max(o.TP, 1)) * o.Bandwidth)
}

// StepTime implements StepModel with Opal's max-of-parts form. An empty
// batch costs 0 (Opal charges the decode base only to steps it runs).
func (o *OpalStep) StepTime(b *Batch) time.Duration {
	if b == nil || len(b.Prefill) == 0 && len(b.Decode) == 0 {
		return 0
	}
	sec := o.DecodeSec(b.Decode)
	for _, c := range b.Prefill {
		sec = max(sec, o.PrefillSec(c.Context+c.Tokens, c.Context))
	}
	return time.Duration(math.Round(sec*1e9)) + o.StepOverhead
}

var _ StepModel = (*OpalStep)(nil)
