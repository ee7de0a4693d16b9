package analyze

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

func at(sec float64) trace.Opt[trace.Time] { return trace.Some(trace.TimeFromSeconds(sec)) }
func f(v float64) trace.Opt[float64]       { return trace.Some(v) }
func i64(v int64) trace.Opt[int64]         { return trace.Some(v) }

// peakRequests: A [0, 1.2) with tokens at 0.5, 0.8, 1.2; B [0.9, 1.2)
// with tokens at 1.1, 1.15; C [1.2, 1.3) starting as A and B end.
func peakRequests() []*trace.Request {
	return []*trace.Request{
		{RequestID: "A", Status: trace.StatusOK, Arrival: at(0), TTFTSec: f(0.5), ITLSec: []float64{0.3, 0.4}, E2ESec: f(1.2), OutputTokens: i64(3)},
		{RequestID: "B", Status: trace.StatusOK, Arrival: at(0.9), TTFTSec: f(0.2), ITLSec: []float64{0.05}, E2ESec: f(0.3), OutputTokens: i64(2)},
		{RequestID: "C", Status: trace.StatusOK, Arrival: at(1.2), TTFTSec: f(0.1), E2ESec: f(0.1), OutputTokens: i64(1)},
		{RequestID: "D", Status: trace.StatusFailed, Arrival: at(0.1)},
	}
}

func TestPeakMetrics(t *testing.T) {
	p, why := PeakMetrics(peakRequests())
	if p == nil {
		t.Fatal(why)
	}
	// Bins from t=0: [0,1) holds 0.5, 0.8; [1,2) holds 1.1, 1.15, 1.2, 1.3.
	if p.OutputTokensPerSec != 4 {
		t.Errorf("peak output tokens/s = %v, want 4", p.OutputTokensPerSec)
	}
	// A and B overlap; C starts exactly when they end (half-open).
	if p.ConcurrentRequests != 2 {
		t.Errorf("peak concurrency = %d, want 2", p.ConcurrentRequests)
	}
	noArr := peakRequests()
	noArr[0].Arrival = trace.Opt[trace.Time]{}
	if p, why := PeakMetrics(noArr); p != nil || !strings.Contains(why, "arrival") {
		t.Errorf("without arrivals: %v, %q", p, why)
	}
}

// The peak token bin is the same counted in an array or by sorting, with
// times before the first bin, past the last one and on bin edges.
func TestPeakBinDenseIsSparse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		nbins := 1 + rng.IntN(50)
		xs := make([]float64, rng.IntN(300))
		for i := range xs {
			switch rng.IntN(4) {
			case 0:
				xs[i] = float64(rng.IntN(nbins+2) - 1) // on an edge, some outside
			case 1:
				xs[i] = -rng.Float64() // in (-1, 0]: bin 0
			default:
				xs[i] = rng.Float64() * float64(nbins+1)
			}
		}
		each := func(f func(float64)) {
			for _, x := range xs {
				f(x)
			}
		}
		spans := make([]tokenSpan, len(xs)) // one token each, at x
		for i, x := range xs {
			spans[i].start = x
		}
		if d, s := peakBinDense(spans, 0, nbins), peakBinSparse(each, float64(nbins), len(xs)); d != s {
			t.Fatalf("trial %d: dense %d, sparse %d", trial, d, s)
		}
	}
}

func TestGoodputFollowsVLLM(t *testing.T) {
	reqs := peakRequests()
	// TPOT: A (1.2−0.5)/2 = 0.35, B (0.3−0.2)/1 = 0.1, C one token → 0.
	cases := []struct {
		slo  string
		good int
	}{
		{"ttft:200", 2},            // B (equal to the SLO counts as good) and C
		{"tpot:100", 2},            // B at its SLO, C counts 0
		{"tpot:99.9", 1},           // only C
		{"e2el:300 ttft:500", 2},   // B, C
		{"ttft:1000,tpot:1000", 3}, // all completed; D failed
	}
	for _, c := range cases {
		slo, err := ParseSLO([]string{c.slo})
		if err != nil {
			t.Fatal(err)
		}
		g := ComputeGoodput(reqs, slo, 2)
		if g.Missing != "" || g.Good != c.good || g.Throughput != float64(c.good)/2 {
			t.Errorf("%s: good %d (%v req/s, %q), want %d", c.slo, g.Good, g.Throughput, g.Missing, c.good)
		}
	}
	noE2E := peakRequests()
	noE2E[0].E2ESec = trace.Opt[float64]{}
	slo, _ := ParseSLO([]string{"e2el:1000"})
	if g := ComputeGoodput(noE2E, slo, 2); g.Missing == "" || g.Good != 0 {
		t.Errorf("missing E2E: %+v", g)
	}
	for _, bad := range []string{"ttft", "ttft:-1", "foo:3", "tpot:x"} {
		if _, err := ParseSLO([]string{bad}); err == nil {
			t.Errorf("ParseSLO(%q) succeeded", bad)
		}
	}
}

func TestSummaryStatusSemanticsAndChunks(t *testing.T) {
	reqs := peakRequests()
	for _, r := range reqs {
		r.ITLUnit, r.E2EBasis, r.TTFTBasis = trace.ITLChunk, trace.E2ELastToken, trace.TTFTFirstChunk
	}
	reqs = append(reqs, &trace.Request{Status: trace.StatusTimeout}, &trace.Request{Status: trace.StatusFailed})
	s := Summarize(trace.Run{Name: "r"}, reqs)
	want := []StatusCount{{trace.StatusOK, 3}, {trace.StatusFailed, 2}, {trace.StatusTimeout, 1}}
	if len(s.ByStatus) != len(want) {
		t.Fatalf("by status %v, want %v", s.ByStatus, want)
	}
	for i := range want {
		if s.ByStatus[i] != want[i] {
			t.Errorf("by status %v, want %v", s.ByStatus, want)
		}
	}
	// Chunks: A 3, B 2, C 1 (no ITL: nil, so not counted); tokens 3+2.
	if s.TokensPerChunk != 1 {
		t.Errorf("tokens per chunk %v, want 1", s.TokensPerChunk)
	}
	if s.Semantics.ITLUnit != "chunk" || s.Semantics.Mixed {
		t.Errorf("semantics %+v", s.Semantics)
	}
	reqs[1].ITLUnit = trace.ITLToken
	s = Summarize(trace.Run{}, reqs)
	if !s.Semantics.Mixed || s.Semantics.ITLUnit != "chunk, token" || len(s.Warnings) == 0 {
		t.Errorf("mixed semantics not reported: %+v %v", s.Semantics, s.Warnings)
	}
	if s.Peak == nil || s.Peak.ConcurrentRequests != 2 {
		t.Errorf("summary peak %+v (%s)", s.Peak, s.PeakMissing)
	}
}

func TestTrim(t *testing.T) {
	var reqs []*trace.Request
	for i := range 100 {
		reqs = append(reqs, &trace.Request{Status: trace.StatusOK, Arrival: at(float64(i)), E2ESec: f(0.5), TTFTSec: f(0.1), OutputTokens: i64(1)})
	}
	kept, w, err := Trim(reqs, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	// Window [10, 99.5−20 = 79.5]: arrivals 10..79 (79 ends at 79.5).
	if len(kept) != 70 || w.Start != 10 || w.End != 79.5 || w.Dropped != 30 {
		t.Errorf("kept %d, window %+v", len(kept), w)
	}
	s := SummarizeWith(trace.Run{}, reqs, Options{TrimWarmupSec: 10, TrimCooldownSec: 20})
	if s.Completed != 70 || s.DurationSec != 69.5 || s.Trim == nil {
		t.Errorf("trimmed summary: %d completed over %v s", s.Completed, s.DurationSec)
	}
	if _, _, err := Trim(reqs, 60, 60); err == nil {
		t.Error("an empty window was accepted")
	}
}

// TestDetectSteady builds a run that ramps up for 30 s, holds 20 running
// requests for 200 s and drains for 30 s; MSER-5 must put the warmup and
// cooldown near the ramps, and never inside the plateau.
func TestDetectSteady(t *testing.T) {
	var reqs []*trace.Request
	add := func(start, dur float64) {
		reqs = append(reqs, &trace.Request{Status: trace.StatusOK, Arrival: at(start), E2ESec: f(dur)})
	}
	for k := range 20 {
		// Request k starts at 1.5k s and, replaced back to back, keeps one
		// slot busy until 230 + 1.5k s.
		for s := 1.5 * float64(k); s < 230+1.5*float64(k)-1e-9; s += 10 {
			add(s, min(10, 230+1.5*float64(k)-s))
		}
	}
	st, ok := DetectSteady(reqs)
	if !ok {
		t.Fatal("no steady state found")
	}
	// MSER stops where the remaining ramp costs less than the batches it
	// would drop: within the second half of a linear ramp.
	if st.WarmupSec < 15 || st.WarmupSec > 35 || st.CooldownSec < 15 || st.CooldownSec > 35 {
		t.Errorf("steady state %+v, want warmup and cooldown in the second half of the 30-s ramps", st)
	}
}

func TestPerSecond(t *testing.T) {
	s, ok := PerSecond(peakRequests())
	if !ok {
		t.Fatal("no series")
	}
	if got := s.Arrivals; len(got) != 2 || got[0] != 3 || got[1] != 1 {
		t.Errorf("arrivals %v, want [3 1]", got)
	}
	if got := s.Completions; got[0] != 0 || got[1] != 3 {
		t.Errorf("completions %v, want [0 3]", got)
	}
	if got := s.OutputTokens; got[0] != 2 || got[1] != 4 {
		t.Errorf("output tokens %v, want [2 4]", got)
	}
	if got := s.Running; got[0] != 2 || got[1] != 3 {
		t.Errorf("running %v, want [2 3]", got)
	}
}

func TestDecompose(t *testing.T) {
	var reqs []*trace.Request
	for i := range 100 {
		r := &trace.Request{Status: trace.StatusOK, TTFTSec: f(float64(i+1) / 100), PrefillSec: f(0.005), QueueSec: f(0)}
		if i >= 90 { // the slowest tenth waits in the queue
			r.QueueSec = f(r.TTFTSec.V - 0.01)
		}
		reqs = append(reqs, r)
	}
	d := Decompose(reqs, DefaultBands)
	if d == nil || len(d.Bands) != 4 {
		t.Fatalf("decomposition %+v", d)
	}
	if d.Bands[0].N != 50 || d.Bands[1].N != 40 || d.Bands[2].N != 9 || d.Bands[3].N != 1 {
		t.Errorf("band sizes %d %d %d %d", d.Bands[0].N, d.Bands[1].N, d.Bands[2].N, d.Bands[3].N)
	}
	if d.Bands[0].Dominant != "other" || d.Bands[2].Dominant != "queue" || d.Bands[3].Dominant != "queue" {
		t.Errorf("dominant parts %s %s %s %s", d.Bands[0].Dominant, d.Bands[1].Dominant, d.Bands[2].Dominant, d.Bands[3].Dominant)
	}
	sum := 0.0
	for _, s := range d.Bands[2].Share {
		sum += s
	}
	if sum < 1-1e-12 || sum > 1+1e-12 {
		t.Errorf("shares of a band sum to %v", sum)
	}
	if Decompose([]*trace.Request{{Status: trace.StatusOK, TTFTSec: f(1)}}, DefaultBands) != nil {
		t.Error("decomposition without server timings")
	}
}

func TestKVCacheUsage(t *testing.T) {
	reqs := []*trace.Request{
		{Status: trace.StatusOK, InputTokens: i64(1000), CachedTokens: i64(600), DeviceHitTokens: i64(400), HostHitTokens: i64(200)},
		{Status: trace.StatusOK, InputTokens: i64(1000), CachedTokens: i64(0), DeviceHitTokens: i64(0)},
		{Status: trace.StatusFailed, InputTokens: i64(1000), CachedTokens: i64(1000)},
	}
	u := KVCacheUsage(reqs)
	if u.CachedShare != 0.3 || u.TierTokens[0] != 400 || u.TierTokens[1] != 200 || u.TierShare[0] != 0.2 || u.TierOfCached[1] != 200.0/600 {
		t.Errorf("kv usage %+v", u)
	}
	if KVCacheUsage([]*trace.Request{{Status: trace.StatusOK}}) != nil {
		t.Error("kv usage without cache data")
	}
}

func TestGroupBy(t *testing.T) {
	reqs := []*trace.Request{
		{Run: "r1", Worker: "w2", Stage: "s"}, {Run: "r1", Worker: "w1"}, {Run: "r2", Worker: "w2"},
	}
	g, err := GroupBy("worker", nil, reqs)
	if err != nil || len(g) != 2 || g[1].Run.Name != "worker=w2" || len(g[1].Requests) != 2 || g[0].Run.Name != "worker=w1" {
		t.Errorf("by worker: %v %+v", err, g)
	}
	// Workers in their names' natural order, whatever completed first.
	var many []*trace.Request
	for _, w := range []string{"w10", "w2", "", "w1", "w02x", "w2x", "p-w3"} {
		many = append(many, &trace.Request{Run: "r", Worker: w})
	}
	g, _ = GroupBy("worker", nil, many)
	var names []string
	for _, x := range g {
		names = append(names, x.Run.Name)
	}
	if want := []string{"worker=(none)", "worker=p-w3", "worker=w1", "worker=w2", "worker=w02x", "worker=w2x", "worker=w10"}; !slices.Equal(names, want) {
		t.Errorf("by worker: %q, want %q", names, want)
	}
	g, _ = GroupBy("stage", []trace.Run{{Name: "r1", Source: "x"}}, reqs)
	if len(g) != 3 || g[0].Run.Stage != "s" || g[0].Run.Source != "x" {
		t.Errorf("by stage: %+v", g)
	}
	if _, err := GroupBy("color", nil, reqs); err == nil {
		t.Error("unknown key accepted")
	}
	g = GroupByRun([]trace.Run{{Name: "r0"}, {Name: "r1"}}, reqs)
	if len(g) != 3 || g[0].Run.Name != "r0" || len(g[0].Requests) != 0 || g[2].Run.Name != "r2" {
		t.Errorf("by run: %+v", g)
	}
}

// TestDecomposeQueueSplitAndPrefillBasis: SGLang's split of the queue
// wait, the KV fetch part, and a dispatched-basis prefill that contains
// the queue wait.
func TestDecomposeQueueSplitAndPrefillBasis(t *testing.T) {
	reqs := []*trace.Request{
		{Status: trace.StatusOK, TTFTSec: f(1), QueueSec: f(0.4), IdleInQueueSec: f(0.1), BudgetWaitSec: f(0.3), PrefillSec: f(0.3), KVFetchSec: f(0.2)},
		{Status: trace.StatusOK, TTFTSec: f(2), QueueSec: f(0.6), IdleInQueueSec: f(0.6), BudgetWaitSec: f(0), PrefillSec: f(1.2), PrefillBasis: trace.PrefillDispatched},
		{Status: trace.StatusOK, TTFTSec: f(3), PrefillSec: f(2.5), PrefillBasis: trace.PrefillDispatched,
			RouterArrival: trace.Some(trace.Time(10 * time.Second)), WorkerArrival: trace.Some(trace.Time(10500 * time.Millisecond))},
	}
	d := Decompose(reqs, []float64{0, 100})
	if d.QueueSplit == nil || d.QueueSplit.IdleShare != 0.7 || d.QueueSplit.BudgetWaitShare != 0.3 {
		t.Errorf("queue split %+v, want idle 0.7, budget 0.3", d.QueueSplit)
	}
	if d.PrefillIncludesQueue != 1 {
		t.Errorf("%d requests with queueing inside prefill, want 1", d.PrefillIncludesQueue)
	}
	b := d.Bands[0]
	// Means over 3 requests: queue (0.4+0.6+0)/3, prefill (0.3+0.6+2.5)/3,
	// kv_fetch 0.2/3, routing (the third's 0.5 s from router to worker)
	// 0.5/3, other (0.1+0.8+0)/3.
	want := []float64{1.0 / 3, 3.4 / 3, 0.2 / 3, 0.5 / 3, 0.9 / 3}
	for i, w := range want {
		if d := b.Mean[i] - w; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s mean %v, want %v", DecompParts[i], b.Mean[i], w)
		}
	}
}
