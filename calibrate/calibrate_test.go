package calibrate

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

func deployment(t testing.TB, name string) *model.Deployment {
	t.Helper()
	llm, err := model.LoadConfig("../samples/models/" + name)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := model.HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.NewDeployment(hw, llm, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// truth is the deployment the synthetic data are made with.
func truth(t testing.TB) *model.Deployment {
	d := deployment(t, "llama-3.1-8b")
	d.MFU, d.AttentionMFU, d.BandwidthEfficiency, d.StepOverhead = 0.45, 0.30, 0.70, 1500*time.Microsecond
	return d
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// A prefill table measured on short prompts (512 to 8,192 tokens, 2 %
// noise) from a truth with an n² attention term extrapolates to 4× the
// longest prompt (32,768 tokens) within 2 %, because the attention term
// is identified. A fit without it (linear in n) misses by far more.
func TestQuadraticTruthExtrapolates(t *testing.T) {
	d := truth(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var pts []Point
	for n := int64(512); n <= 8192; n += 256 {
		sec := d.StepTime(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: n}}}).Seconds()
		pts = append(pts, Point{Tokens: n, Seconds: sec * (1 + 0.02*(2*rng.Float64()-1))})
	}
	o := Options{Deployment: deployment(t, "llama-3.1-8b")}
	res, err := FitTable(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fit(QPrefill)
	for _, term := range f.Terms {
		if term.Name != TermOverhead && !term.Identified {
			t.Errorf("%s not identified: %s", term.Name, term.Why)
		}
	}
	cm := NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	fitted := deployment(t, "llama-3.1-8b")
	cm.Apply(fitted)
	long := &model.Batch{Prefill: []model.PrefillChunk{{Tokens: 32768}}}
	want, got := d.StepTime(long).Seconds(), fitted.StepTime(long).Seconds()
	if !within(got, want, 0.02) {
		t.Errorf("32,768-token prefill: fitted %.4f s, truth %.4f s (%+.2f%%)", got, want, 100*(got/want-1))
	}
	// The same data fitted without the attention term.
	u, p, y := make([]int64, len(pts)), make([]int64, len(pts)), make([]float64, len(pts))
	for i, pt := range pts {
		u[i], y[i] = pt.Tokens, pt.Seconds
	}
	cols := prefillColumns(&o, u, p)[:2]
	lin, err := fitLinear(QPrefill, "s", "", cols, y)
	if err != nil {
		t.Fatal(err)
	}
	tl := o.Deployment.Terms(long)
	linPred := lin.Terms[0].Value + lin.Terms[1].Value*tl.LinearSec
	if within(linPred, want, 0.05) {
		t.Errorf("a linear fit extrapolates within 5%% too (%.4f vs %.4f): the test does not exercise the n² term", linPred, want)
	}
}

// Opal's offline measurements JSON, made with Opal's form (a = 4,
// b = 24, granite-3.3-8b on H100), fits back to a and b.
func TestOpalTableFit(t *testing.T) {
	d := deployment(t, "granite-3.3-8b-instruct")
	o, err := model.NewOpalStep(d.LLM, d.Hardware, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("{\n")
	for n := 128; n <= 16384; n *= 2 {
		if n > 128 {
			b.WriteString(",\n")
		}
		b.WriteString(`  "` + itoa(n) + `": ` + ftoa(o.PrefillSec(int64(n), 0)))
	}
	b.WriteString("\n}\n")
	pts, err := ParseTable("opal.json", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := FitTable(pts, Options{Deployment: d, Form: model.FormOpal})
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fit(QPrefill)
	if a := f.Term(TermOpalA).Value; !within(a, 4, 1e-6) {
		t.Errorf("a = %v, want 4", a)
	}
	if bb := f.Term(TermOpalB).Value; !within(bb, 24, 1e-6) {
		t.Errorf("b = %v, want 24", bb)
	}
	cm := NewCostModel(res, d, "h100", "granite-3.3-8b-instruct")
	sm, err := cm.StepModel(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sm.(*model.OpalStep); !ok {
		t.Errorf("opal cost model gives %T", sm)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// A narrow range of prompt lengths cannot separate the n² term from the
// linear one: it is flagged and left out of the cost model.
func TestNarrowRangeFlagged(t *testing.T) {
	d := truth(t)
	var pts []Point
	for n := int64(2000); n <= 2100; n += 10 {
		pts = append(pts, Point{Tokens: n, Seconds: d.StepTime(&model.Batch{Prefill: []model.PrefillChunk{{Tokens: n}}}).Seconds()})
	}
	o := Options{Deployment: deployment(t, "llama-3.1-8b")}
	res, err := FitTable(pts, o)
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fit(QPrefill)
	bad := 0
	for _, term := range f.Terms {
		if !term.Identified {
			bad++
		}
	}
	if bad == 0 {
		t.Errorf("a 5%% range of prompt lengths identified every term: %+v", f.Terms)
	}
	cm := NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	if _, ok := cm.Coefficients[CoefAttentionMFU]; ok && !f.Term(TermInvAttnMFU).Identified {
		t.Error("unidentified attention MFU written to the cost model")
	}
	if len(cm.Warnings) == 0 || !strings.Contains(strings.Join(cm.Warnings, "\n"), "not identifiable") {
		t.Errorf("no warning: %v", cm.Warnings)
	}
}

// syntheticTrace replays a Poisson workload through the truth deployment
// (so the server-side timings come from a vLLM-like scheduler with
// chunked prefill and mixed batches — a deliberate mismatch with the
// fit's one-request-alone prefill model), adds 2 % noise to the timings
// and gives a third of the requests storage hits whose prefetch I/O
// takes 150 µs + bytes / 6 GB/s (±3 %). No request has host hits.
func syntheticTrace(t testing.TB, d *model.Deployment, n int) []*trace.Request {
	rng := rand.New(rand.NewPCG(7, 11))
	var reqs []*trace.Request
	var at float64
	for i := range n {
		at += rng.ExpFloat64() / 3 // 3 requests/s
		reqs = append(reqs, &trace.Request{
			RequestID:    "r" + strconv.Itoa(i),
			Run:          "synthetic",
			Status:       trace.StatusOK,
			Arrival:      trace.Some(trace.TimeFromSeconds(at)),
			InputTokens:  trace.Some(int64(100 + rng.IntN(6000))),
			OutputTokens: trace.Some(int64(20 + rng.IntN(300))),
		})
	}
	tokens, err := d.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	var out []*trace.Request
	cfg := replay.DefaultConfig()
	if _, err := replay.Run(cfg, d, tokens/16, reqs, func(r *trace.Request) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		r.PrefillSec.V *= 1 + 0.02*rng.NormFloat64()
		r.DecodeSec.V *= 1 + 0.02*rng.NormFloat64()
		if i%3 == 0 {
			hits := int64(64 * (1 + rng.IntN(64)))
			r.StorageHitTokens = trace.Some(hits)
			io := 150e-6 + float64(hits*d.LLM.KVBytesPerToken())/6e9
			r.StoragePrefetchIOSec = trace.Some(io * (1 + 0.03*rng.NormFloat64()))
		}
	}
	return out
}

func TestServerSideRecoversKnownCoefficients(t *testing.T) {
	d := truth(t)
	reqs := syntheticTrace(t, d, 600)
	o := Options{Deployment: deployment(t, "llama-3.1-8b"), Source: "synthetic"}
	res, err := FitServerSide(reqs, o)
	if err != nil {
		t.Fatal(err)
	}
	cm := NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	var sb strings.Builder
	if err := WriteSummary(&sb, cm); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sb.String())
	check := func(name string, want, rel float64) {
		t.Helper()
		c, ok := cm.Coefficients[name]
		if !ok {
			t.Errorf("%s not fitted", name)
			return
		}
		if !within(c.Value, want, rel) {
			t.Errorf("%s = %.4g, truth %.4g (±%.0f%%)", name, c.Value, want, 100*rel)
		}
	}
	check(CoefMFU, 0.45, 0.05)
	check(CoefAttentionMFU, 0.30, 0.10)
	// Derived from the decode base minus the weight read at the fitted
	// efficiency; the mixed prefill steps bias it up (1.79 ms when this
	// was written).
	check(CoefStepOverhead, 1.5e-3, 0.25)
	check(CoefBandwidthEff, 0.70, 0.10)
	// The decode fit prices the prefill compute that shared its steps:
	// another estimate of 1/MFU.
	if st := res.Fit(QDecode).Term(TermPrefillStall); st == nil || !within(st.Value, 1/0.45, 0.05) {
		t.Errorf("decode prefill stall %+v, want ≈ 1/0.45", st)
	}
	// The truth has no per-sequence decode cost: flagged, not written.
	if ps := res.Fit(QDecode).Term(TermPerSeq); ps == nil || ps.Identified {
		t.Errorf("decode_per_seq_s %+v: the truth has none, it must be flagged", ps)
	}
	check(CoefNVMeBandwidth, 6e9, 0.03)
	check(CoefNVMeLatency, 150e-6, 0.25)
	// No host hits: PCIe cannot be identified, and says so.
	if _, ok := cm.Coefficients[CoefPCIeBandwidth]; ok {
		t.Error("PCIe bandwidth fitted without host hits")
	}
	if !strings.Contains(sb.String(), "host_fetch_s: no hits of this tier") {
		t.Error("missing warning about host hits")
	}
}

func TestCostModelRoundTrip(t *testing.T) {
	d := truth(t)
	reqs := syntheticTrace(t, d, 200)
	o := Options{Deployment: deployment(t, "llama-3.1-8b")}
	res, err := FitServerSide(reqs, o)
	if err != nil {
		t.Fatal(err)
	}
	cm := NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	a, err := cm.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCostModel("cm.yaml", a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := back.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("round trip changed the file:\n%s\n---\n%s", a, b)
	}
	if err := back.Check("h100", "llama-3.1-8b", 1); err != nil {
		t.Error(err)
	}
	if err := back.Check("h200", "llama-3.1-8b", 2); err == nil || !strings.Contains(err.Error(), "hardware h100 (cluster: h200)") || strings.Contains(err.Error(), "tp") {
		t.Errorf("mismatch: %v", err)
	}
	for _, bad := range []string{
		"opaltrace_cost_model: 2\n",
		"opaltrace_cost_model: 1\ncoefficients:\n  mfu_typo: {value: 0.5}\n",
		"opaltrace_cost_model: 1\ncoefficients:\n  mfu: {value: -1}\n",
		"opaltrace_cost_model: 1\ncoefficients:\n  mfu: {value: 40}\n",
		"opaltrace_cost_model: 1\nform: magic\n",
		"opaltrace_cost_model: 1\nextra: 1\n",
	} {
		if _, err := ParseCostModel("bad.yaml", []byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// A cost model's eager_layer_launch_s reaches the deployment it prices,
// which charges it only for steps without a CUDA graph.
func TestCostModelAppliesEagerLaunch(t *testing.T) {
	d := deployment(t, "llama-3.1-8b")
	d.CUDAGraphMaxBS = 4
	five, four := &model.Batch{Decode: []int64{1, 1, 1, 1, 1}}, &model.Batch{Decode: []int64{1, 1, 1, 1}}
	gpu5, gpu4 := d.StepTime(five), d.StepTime(four)
	cm := &CostModel{Form: model.FormRoofline, Coefficients: map[string]Coefficient{CoefEagerLayerLaunch: {Value: 1e-3}}}
	cm.Apply(d)
	if d.EagerLayerLaunch != time.Millisecond {
		t.Fatalf("EagerLayerLaunch %v, want 1ms", d.EagerLayerLaunch)
	}
	// 32 layers × 1 ms above 4 decodes, nothing at 4.
	if got := d.StepTime(five); got != gpu5+32*time.Millisecond {
		t.Errorf("5 decodes: %v, want %v + 32ms", got, gpu5)
	}
	if got := d.StepTime(four); got != gpu4 {
		t.Errorf("4 decodes (a graph): %v, want %v", got, gpu4)
	}
}

// Decode steps above cuda_graph_max_bs launch their layers eagerly: from
// server-side timings of a load whose batch crosses the limit (4 here)
// both ways, the least-squares fit recovers the launch cost per layer;
// with graphs off (every step eager) it says it cannot.
func TestServerSideEagerLaunch(t *testing.T) {
	d := truth(t)
	d.CUDAGraphMaxBS, d.EagerLayerLaunch = 4, 200*time.Microsecond
	reqs := syntheticTrace(t, d, 400)
	o := Options{Deployment: deployment(t, "llama-3.1-8b")}
	o.Deployment.CUDAGraphMaxBS = 4
	res, err := FitServerSide(reqs, o)
	if err != nil {
		t.Fatal(err)
	}
	cm := NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	c, ok := cm.Coefficients[CoefEagerLayerLaunch]
	t.Logf("%s = %.4g s (truth 2e-04)", CoefEagerLayerLaunch, c.Value)
	if !ok || !within(c.Value, 200e-6, 0.25) {
		t.Errorf("%s = %+v, truth 200 µs (±25%%); fit %+v", CoefEagerLayerLaunch, c, res.Fit(QDecode).Terms)
	}
	o.Deployment.CUDAGraphMaxBS = -1
	res, err = FitServerSide(reqs, o)
	if err != nil {
		t.Fatal(err)
	}
	cm = NewCostModel(res, o.Deployment, "h100", "llama-3.1-8b")
	if _, ok := cm.Coefficients[CoefEagerLayerLaunch]; ok || !strings.Contains(strings.Join(cm.Warnings, "\n"), "CUDA graphs are off") {
		t.Errorf("graphs off: %s fitted, warnings %q", CoefEagerLayerLaunch, cm.Warnings)
	}
}
