package calibrate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// Options say what cost model the fits are for.
type Options struct {
	// Deployment gives the shapes the regressors are computed from
	// (FLOPs, bytes per token). Its coefficients are not used.
	Deployment *model.Deployment
	// Form is model.FormRoofline (default) or model.FormOpal.
	Form string
	// Source describes the data, for the fits' provenance.
	Source string
	// Fixed holds terms at given values and Priors pull terms toward
	// values, by term name (TermOverhead, TermInvMFU, ...; see
	// TableConstraint for coefficient names). FitTable applies them.
	Fixed  map[string]float64
	Priors map[string]Prior
}

func (o *Options) check() error {
	if o.Deployment == nil {
		return errors.New("calibrate: a deployment (hardware, model, parallelism) is needed to compute the regressors")
	}
	switch o.Form {
	case "":
		o.Form = model.FormRoofline
	case model.FormRoofline, model.FormOpal:
	default:
		return fmt.Errorf("calibrate: unknown form %q (want %s or %s)", o.Form, model.FormRoofline, model.FormOpal)
	}
	return nil
}

// A Result holds the fits of one calibration and the warnings that are
// not about a single fit (a quantity with no data).
type Result struct {
	Form     string
	Fits     []*Fit
	Warnings []string
}

// Fit returns the fit of quantity, or nil.
func (r *Result) Fit(quantity string) *Fit {
	for _, f := range r.Fits {
		if f.Quantity == quantity {
			return f
		}
	}
	return nil
}

// Quantities fitted, and the names of their terms.
const (
	QPrefill = "prefill_s"          // time from the first forward pass to the first token
	QDecode  = "decode_s_per_token" // decode time / (output tokens − 1)
	QStorage = "storage_io_s"       // storage prefetch I/O time (SGLang L3_pf_io)
	QHost    = "host_fetch_s"       // KV fetch time of host-memory hits

	TermOverhead      = "step_overhead_s"
	TermInvMFU        = "inv_mfu"
	TermInvAttnMFU    = "inv_attention_mfu"
	TermInvExpertMFU  = "inv_expert_mfu"
	TermOpalA         = "opal_a"
	TermOpalB         = "opal_b"
	TermDecodeBase    = "decode_step_base_s"
	TermInvBWEff      = "inv_bandwidth_efficiency"
	TermPerSeq        = "decode_per_seq_s"
	TermPrefillStall  = "decode_prefill_stall"
	TermPrefillShared = "prefill_shared"
	TermEagerLayers   = "decode_eager_layer_s"
	TermLatency       = "latency_s"
	TermSecPerByte    = "s_per_byte"
	minObservations   = 5
)

// prefillColumns returns the regressors of prefill time for chunks of u
// new tokens over p cached ones.
func prefillColumns(o *Options, u, p []int64) []column {
	n := len(u)
	ones := make([]float64, n)
	x1, x2 := make([]float64, n), make([]float64, n)
	d := o.Deployment
	// The routed experts get a column of their own only when expert_mfu
	// is constrained (fixed or given a prior): free, it is one more
	// coefficient than a prefill table of a MoE model determines beside
	// mfu, since both scale with the tokens.
	var x3 []float64
	if o.constrains(TermInvExpertMFU) {
		x3 = make([]float64, n)
	}
	for i := range n {
		ones[i] = 1
		if o.Form == model.FormOpal {
			nn, pp := float64(p[i]+u[i]), float64(p[i])
			den := d.Hardware.PeakFLOPS * float64(max(d.TP, 1))
			l, h := float64(d.LLM.NumLayers), float64(d.LLM.HiddenSize)
			x1[i] = l * h * (nn*(nn+1) - pp*(pp+1)) / den
			x2[i] = l * h * h * (nn - pp) / den
			continue
		}
		t := d.Terms(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: u[i], Context: p[i]}}})
		x1[i], x2[i] = t.LinearSec, t.AttentionSec
		if x3 != nil {
			x1[i], x3[i] = t.LinearSec-t.ExpertSec, t.ExpertSec
		}
	}
	if o.Form == model.FormOpal {
		return []column{
			{TermOverhead, "s", true, ones},
			{TermOpalA, "FLOP per (layer·hidden·token pair)", true, x1},
			{TermOpalB, "FLOP per (layer·hidden²·token)", true, x2},
		}
	}
	cols := []column{
		{TermOverhead, "s", true, ones},
		{TermInvMFU, "1/MFU (s per s of matmul FLOPs at peak)", true, x1},
		{TermInvAttnMFU, "1/attention MFU (s per s of attention FLOPs at peak)", true, x2},
	}
	if x3 != nil {
		cols = append(cols, column{TermInvExpertMFU, "1/expert MFU (s per s of routed-expert FLOPs at peak)", true, x3})
	}
	return cols
}

// constrains reports whether o fixes term or puts a prior on it.
func (o *Options) constrains(term string) bool {
	_, fixed := o.Fixed[term]
	_, prior := o.Priors[term]
	return fixed || prior
}

// FitServerSide fits the cost model to the server-side timings of reqs:
// prefill time against uncached prompt tokens and their context, decode
// time per token against the batch's context where the trace lets the
// batch be reconstructed (else the request's own), storage prefetch I/O
// against storage-hit tokens, and host KV fetches against host-hit
// tokens. A quantity without data is left out with a warning.
func FitServerSide(reqs []*trace.Request, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	res := &Result{Form: o.Form}
	add := func(f *Fit, err error, what string) {
		switch {
		case err != nil:
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: not fitted: %v", what, err))
		case f != nil:
			res.Fits = append(res.Fits, f)
		}
	}
	f, err := fitPrefill(reqs, &o, res)
	add(f, err, QPrefill)
	f, err = fitDecode(reqs, &o, res)
	add(f, err, QDecode)
	f, err = fitTransfer(reqs, &o, res, QStorage, "NVMe/storage bandwidth and latency",
		func(r *trace.Request) (float64, int64, bool) {
			s, ok1 := r.StoragePrefetchIOSec.Get()
			h, ok2 := r.StorageHitTokens.Get()
			return s, h, ok1 && ok2 && h > 0
		})
	add(f, err, QStorage)
	f, err = fitTransfer(reqs, &o, res, QHost, "PCIe (host) bandwidth and latency",
		func(r *trace.Request) (float64, int64, bool) {
			s, ok1 := r.KVFetchSec.Get()
			h, ok2 := r.HostHitTokens.Get()
			// Fetches that also read storage or remote tiers are not
			// host fetches alone.
			other := r.StorageHitTokens.Or(0) + r.RemoteHitTokens.Or(0)
			return s, h, ok1 && ok2 && h > 0 && other == 0
		})
	add(f, err, QHost)
	if len(res.Fits) == 0 {
		return res, fmt.Errorf("calibrate: nothing to fit (need prefill_s, decode_s, storage_prefetch_io_s or kv_fetch_s with their token counts): %s", strings.Join(res.Warnings, "; "))
	}
	return res, nil
}

func usable(r *trace.Request) bool {
	return r.Status == "" || r.Status == trace.StatusOK
}

func fitPrefill(reqs []*trace.Request, o *Options, res *Result) (*Fit, error) {
	var u, p []int64
	var y []float64
	var spans []decodeSpan // prefill intervals, for the shared-step regressor
	noCache := 0
	for _, r := range reqs {
		s, ok := r.PrefillSec.Get()
		in, ok2 := r.InputTokens.Get()
		if !ok || !ok2 || !usable(r) || s <= 0 {
			continue
		}
		c, okc := r.CachedTokens.Get()
		if !okc {
			noCache++
		}
		if in-c <= 0 {
			continue
		}
		u, p, y = append(u, in-c), append(p, c), append(y, s)
		sp := decodeSpan{}
		if g, ok := r.GPUStart.Get(); ok {
			if pd, ok := r.PrefillDone.Get(); ok && pd > g {
				t := o.Deployment.Terms(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: in - c, Context: c}}})
				sp = decodeSpan{start: g, end: pd, pstart: g, pend: pd, pcompute: t.LinearSec + t.AttentionSec, hasPrefill: true, worker: r.Worker}
			}
		}
		spans = append(spans, sp)
	}
	if len(y) == 0 {
		res.Warnings = append(res.Warnings, "prefill: no record has prefill_s with input_tokens: MFU and step overhead not fitted")
		return nil, nil
	}
	if len(y) < minObservations {
		return nil, fmt.Errorf("only %d records with prefill_s", len(y))
	}
	cols := prefillColumns(o, u, p)
	what := fmt.Sprintf("%d records with prefill_s", len(y))
	all := true
	for _, sp := range spans {
		all = all && sp.hasPrefill
	}
	if all && o.Form == model.FormRoofline {
		// A chunked prefill shares its steps with the chunks of other
		// prefills running at the same time: their compute is part of
		// this request's prefill time.
		shared := prefillShared(spans)
		cols = append(cols, column{TermPrefillShared, "1/MFU of concurrent prefills (s per s at peak)", true, shared})
		what += ", with the prefills that ran at the same time"
	}
	f, err := fitLinear(QPrefill, "s", source(o, what), cols, y)
	if err == nil && noCache > 0 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s: %d records lack cached_tokens and were taken as fully uncached", QPrefill, noCache))
	}
	return f, err
}

func source(o *Options, what string) string {
	if o.Source == "" {
		return what
	}
	return o.Source + ": " + what
}

// A decodeSpan is one request's decode phase.
type decodeSpan struct {
	start, end trace.Time
	in, out    int64
	perToken   float64
	// The request's own prefill interval and its compute at peak, when
	// the trace has GPU start and prefill-done times.
	pstart, pend trace.Time
	pcompute     float64
	hasPrefill   bool
	// worker is the serving instance: only requests on the same one
	// share steps.
	worker string
}

// decodeSpan returns r's decode interval: prefill done to decode done on
// the server, else first token to last on the client.
func spanOf(r *trace.Request) (trace.Time, trace.Time, bool) {
	if a, ok := r.PrefillDone.Get(); ok {
		if b, ok := r.DecodeDone.Get(); ok && b > a {
			return a, b, true
		}
	}
	arr, ok := r.Arrival.Get()
	ttft, ok2 := r.TTFTSec.Get()
	e2e, ok3 := r.E2ESec.Get()
	if ok && ok2 && ok3 && e2e > ttft {
		return arr + trace.TimeFromSeconds(ttft), arr + trace.TimeFromSeconds(e2e), true
	}
	return 0, 0, false
}

func fitDecode(reqs []*trace.Request, o *Options, res *Result) (*Fit, error) {
	var spans []decodeSpan
	withSpan, withPrefill := 0, 0
	for _, r := range reqs {
		ds, ok := r.DecodeSec.Get()
		out, ok2 := r.OutputTokens.Get()
		in, ok3 := r.InputTokens.Get()
		if !ok || !ok2 || !ok3 || out < 2 || ds <= 0 || !usable(r) {
			continue
		}
		sp := decodeSpan{in: in, out: out, perToken: ds / float64(out-1), worker: r.Worker}
		if a, b, ok := spanOf(r); ok {
			sp.start, sp.end = a, b
			withSpan++
		}
		if g, ok := r.GPUStart.Get(); ok {
			if pd, ok := r.PrefillDone.Get(); ok && pd > g {
				c := r.CachedTokens.Or(0)
				t := o.Deployment.Terms(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: max(in-c, 1), Context: c}}})
				sp.pstart, sp.pend, sp.pcompute, sp.hasPrefill = g, pd, t.LinearSec+t.AttentionSec, true
				withPrefill++
			}
		}
		spans = append(spans, sp)
	}
	if len(spans) == 0 {
		res.Warnings = append(res.Warnings, "decode: no record has decode_s with output_tokens ≥ 2: bandwidth efficiency not fitted")
		return nil, nil
	}
	if len(spans) < minObservations {
		return nil, fmt.Errorf("only %d records with decode_s", len(spans))
	}
	d := o.Deployment
	one := d.Terms(&model.Batch{Decode: []int64{0}})
	kvPerToken := one.KVSec // seconds per token of KV at full bandwidth
	n := len(spans)
	ones, kv, seqs, y := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	batch := withSpan == n
	var stall []float64
	if batch {
		b, k := batchContext(spans)
		for i := range n {
			kv[i], seqs[i] = kvPerToken*(k[i]+b[i]), b[i]
		}
		if withPrefill == n {
			stall = prefillStalls(spans)
		}
	} else {
		for i, s := range spans {
			kv[i], seqs[i] = kvPerToken*(float64(s.in)+float64(s.out)/2+1), 1
		}
	}
	for i, s := range spans {
		ones[i], y[i] = 1, s.perToken
	}
	cols := []column{
		{TermDecodeBase, "s (overhead + weight read)", true, ones},
		{TermInvBWEff, "1/bandwidth efficiency (s per s of KV bytes at peak bandwidth)", true, kv},
	}
	what := fmt.Sprintf("%d records with decode_s, batch reconstructed from their decode intervals", n)
	if batch {
		cols = append(cols, column{TermPerSeq, "s per running request", true, seqs})
		if stall != nil {
			cols = append(cols, column{TermPrefillStall, "1/MFU of batch-mates' prefills (s per s at peak, per output token)", true, stall})
			what += ", with the prefills that shared their steps"
		}
	} else {
		what = fmt.Sprintf("%d records with decode_s, against their own context (%d lack decode timestamps, so the batch is unknown)", n, n-withSpan)
	}
	var eagerWarn string
	if batch {
		var col *column
		col, eagerWarn = eagerColumn(spans, d)
		if col != nil {
			cols = append(cols, *col)
			what += ", with the steps run without a CUDA graph"
		}
	}
	f, err := fitLinear(QDecode, "s/token", source(o, what), cols, y)
	if err == nil && eagerWarn != "" {
		f.Warnings = append(f.Warnings, eagerWarn)
	}
	if err == nil && !batch {
		f.Warnings = append(f.Warnings, QDecode+": batch context unknown: the fit sees only each request's own context, so the bandwidth efficiency absorbs the batch's")
	}
	return f, err
}

// batchContext returns, for each span, the time-averaged number of
// decoding requests (itself included) and the time-averaged sum of their
// contexts over its decode interval. A request's context grows linearly
// from its input length to input + output over its span.
func batchContext(spans []decodeSpan) (b, k []float64) {
	n := len(spans)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return compareTime(spans[x].start, spans[y].start)
	})
	b, k = make([]float64, n), make([]float64, n)
	for _, i := range order {
		si := spans[i]
		dur := float64(si.end - si.start)
		for _, j := range order {
			sj := spans[j]
			if sj.start >= si.end {
				break
			}
			lo, hi := max(si.start, sj.start), min(si.end, sj.end)
			if hi <= lo || sj.worker != si.worker {
				continue
			}
			w := float64(hi-lo) / dur
			mid := (float64(lo) + float64(hi)) / 2
			frac := (mid - float64(sj.start)) / float64(sj.end-sj.start)
			b[i] += w
			k[i] += w * (float64(sj.in) + frac*float64(sj.out))
		}
	}
	return b, k
}

// prefillShared returns, for each prefill interval, the compute (at
// peak) of the other prefills overlapping it, weighted by the share of
// each one's interval inside it.
func prefillShared(spans []decodeSpan) []float64 {
	sh := make([]float64, len(spans))
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return compareTime(spans[x].pstart, spans[y].pstart) })
	for i, si := range spans {
		for _, j := range order {
			sj := spans[j]
			if sj.pstart >= si.pend {
				break
			}
			lo, hi := max(si.pstart, sj.pstart), min(si.pend, sj.pend)
			if j == i || hi <= lo || sj.worker != si.worker {
				continue
			}
			sh[i] += sj.pcompute * float64(hi-lo) / float64(sj.pend-sj.pstart)
		}
	}
	return sh
}

// prefillStalls returns, for each span, the prefill compute (at peak) of
// the requests whose prefill ran during its decode, weighted by the share
// of each prefill interval inside the decode span, per output token: in a
// vLLM step a prefill chunk and the decodes share one forward pass, so a
// decode step that carries a prefill chunk lasts about as long as the
// chunk's compute.
func prefillStalls(spans []decodeSpan) []float64 {
	n := len(spans)
	byStart := make([]int, n)
	for i := range byStart {
		byStart[i] = i
	}
	slices.SortStableFunc(byStart, func(x, y int) int { return compareTime(spans[x].pstart, spans[y].pstart) })
	st := make([]float64, n)
	for i, si := range spans {
		for _, j := range byStart {
			sj := spans[j]
			if sj.pstart >= si.end {
				break
			}
			lo, hi := max(si.start, sj.pstart), min(si.end, sj.pend)
			if j == i || hi <= lo || sj.worker != si.worker {
				continue
			}
			st[i] += sj.pcompute * float64(hi-lo) / float64(sj.pend-sj.pstart)
		}
		st[i] /= float64(si.out - 1)
	}
	return st
}

func compareTime(a, b trace.Time) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fitTransfer fits a tier's I/O time to latency + bytes/bandwidth, the
// bytes being hit tokens times the model's KV bytes per token.
func fitTransfer(reqs []*trace.Request, o *Options, res *Result, q, what string, get func(*trace.Request) (float64, int64, bool)) (*Fit, error) {
	per := float64(o.Deployment.LLM.KVBytesPerToken())
	var ones, bytes, y []float64
	for _, r := range reqs {
		s, hits, ok := get(r)
		if !ok || !usable(r) || s < 0 {
			continue
		}
		ones, bytes, y = append(ones, 1), append(bytes, float64(hits)*per), append(y, s)
	}
	if len(y) == 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: no hits of this tier in the data: %s not identifiable", q, what))
		return nil, nil
	}
	if len(y) < minObservations {
		return nil, fmt.Errorf("only %d records with hits of this tier", len(y))
	}
	return fitLinear(q, "s", source(o, fmt.Sprintf("%d records with hits", len(y))), []column{
		{TermLatency, "s", true, ones},
		{TermSecPerByte, "s/B (1/bandwidth)", true, bytes},
	}, y)
}

// eagerColumn returns the regressor of the eager-launch cost of decode
// steps (Deployment.EagerLayerLaunch): for each span, the layers a step
// launches without a CUDA graph times the share of its decode interval
// during which its worker decoded more requests than CUDAGraphMaxBS. It
// returns nil and why when the data cannot identify the coefficient: the
// engine's graph limit is unknown (0), graphs are off (every step eager:
// the launches are part of the decode base), or every span is on the
// same side of the limit throughout (no contrast to fit on).
func eagerColumn(spans []decodeSpan, d *model.Deployment) (*column, string) {
	const not = CoefEagerLayerLaunch + " not fitted by least squares: "
	switch {
	case d.CUDAGraphMaxBS == 0:
		return nil, ""
	case d.CUDAGraphMaxBS < 0:
		return nil, not + "CUDA graphs are off, so every decode step launches eagerly and the decode base absorbs the launches"
	}
	layers := d.Terms(&model.Batch{Decode: make([]int64, d.CUDAGraphMaxBS+1)}).EagerLayers
	frac := eagerShare(spans, d.CUDAGraphMaxBS)
	lo, hi := 1.0, 0.0
	x := make([]float64, len(spans))
	for i, f := range frac {
		lo, hi = min(lo, f), max(hi, f)
		x[i] = layers * f
	}
	if hi-lo < narrowRange {
		return nil, fmt.Sprintf(not+"the decode batch is on one side of cuda_graph_max_bs %d in every record (%.0f%%–%.0f%% of the time above it), so the launches cannot be told from the decode base (fit it by replay, or calibrate on runs both below and above the limit)",
			d.CUDAGraphMaxBS, 100*lo, 100*hi)
	}
	return &column{TermEagerLayers, "s per layer launched without a CUDA graph (per output token, in the share of steps above cuda_graph_max_bs)", true, x}, ""
}

// eagerShare returns, for each span, the share of its interval during
// which more than maxBS spans of its worker (itself included) were
// decoding.
func eagerShare(spans []decodeSpan, maxBS int) []float64 {
	type edge struct {
		at trace.Time
		d  int
	}
	byWorker := map[string][]edge{}
	for _, s := range spans {
		byWorker[s.worker] = append(byWorker[s.worker], edge{s.start, 1}, edge{s.end, -1})
	}
	// Per worker, the intervals during which the batch exceeded maxBS.
	above := map[string][][2]trace.Time{}
	for w, es := range byWorker {
		slices.SortStableFunc(es, func(a, b edge) int {
			if c := compareTime(a.at, b.at); c != 0 {
				return c
			}
			return a.d - b.d // ends before starts at the same time
		})
		n := 0
		var from trace.Time
		for _, e := range es {
			was := n > maxBS
			n += e.d
			switch {
			case !was && n > maxBS:
				from = e.at
			case was && n <= maxBS:
				above[w] = append(above[w], [2]trace.Time{from, e.at})
			}
		}
	}
	frac := make([]float64, len(spans))
	for i, s := range spans {
		if s.end <= s.start {
			continue
		}
		var in trace.Time
		ivs := above[s.worker] // in time order, disjoint
		k, _ := slices.BinarySearchFunc(ivs, s.start, func(iv [2]trace.Time, t trace.Time) int { return compareTime(iv[1], t+1) })
		for _, iv := range ivs[k:] {
			if iv[0] >= s.end {
				break
			}
			if lo, hi := max(iv[0], s.start), min(iv[1], s.end); hi > lo {
				in += hi - lo
			}
		}
		frac[i] = float64(in) / float64(s.end-s.start)
	}
	return frac
}
