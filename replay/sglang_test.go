package replay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// sgConfig is an SGLang worker with 1-token pages (SGLang's default page
// size, so that the validator's whole-block check holds for token-granular
// prefix hits) and the given KV capacity in tokens (without the overlap
// scheduler, the replay's default: its one-step delay is
// TestSGLangOverlap's).
func sgConfig(tokens int64) Config {
	return Config{Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: tokens}}
}

// sgReplay is replay with the radix cache's accounting checked at every
// step as well.
func sgReplay(t *testing.T, cfg Config, cost linearCost, reqs []*trace.Request) (map[string]*trace.Request, []*trace.Request, Stats, []string) {
	t.Helper()
	var all []*trace.Request
	var steps []string
	byID := map[string]*trace.Request{}
	v := newValidator(t, cfg, reqs)
	st, err := RunObserved(cfg, cost, 1, reqs, func(r *trace.Request) error {
		all = append(all, r)
		byID[r.RequestID] = r
		return v.output(r)
	}, func(s *Step) error {
		if err := v.step(s); err != nil {
			return err
		}
		if err := checkRadix(s); err != nil {
			return err
		}
		steps = append(steps, stepString(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v.finish(all)
	return byID, all, st, steps
}

func checkRadix(s *Step) error {
	if s.Radix == nil {
		return fmt.Errorf("SGLang step without its radix cache")
	}
	if err := s.Radix.Check(); err != nil {
		return err
	}
	if r := s.Radix; r.Free()+r.TreeTokens()+r.Private() != r.Capacity() || r.Free() < 0 {
		return fmt.Errorf("KV tokens not conserved: free %d + tree %d + private %d != %d", r.Free(), r.TreeTokens(), r.Private(), r.Capacity())
	}
	return nil
}

func stepString(s *Step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v-%v r%d w%d p%d", time.Duration(s.Start), time.Duration(s.End), s.Running, s.Waiting, s.Preempted)
	for _, c := range s.Batch.Prefill {
		fmt.Fprintf(&b, " P%d+%d", c.Context, c.Tokens)
	}
	for _, c := range s.Batch.Decode {
		fmt.Fprintf(&b, " D%d", c)
	}
	return b.String()
}

// Prefill first: a request arriving while another decodes gets a prefill
// step of its own, and the decoding request's gap between tokens is that
// prefill step plus the next decode step. With enable_mixed_chunk the
// decode rides in the prefill step instead.
func TestSGLangPrefillFirst(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 100, 5), req("b", 2500*time.Microsecond, 200, 2)}
	got, _, st, steps := sgReplay(t, sgConfig(10000), cost, reqs)
	// Step 1 [0, 2 ms]: prefill a (100). Step 2 [2, 3.01]: decode a.
	// Step 3 [3.01, 6.01]: prefill b (200), a waits. Step 4 [6.01,
	// 7.03]: decode a and b (b done). Steps 5, 6: decode a.
	want := []string{
		"0s-2ms r1 w0 p0 P0+100",
		"2ms-3.01ms r1 w0 p0 D100",
		"3.01ms-6.01ms r2 w0 p0 P0+200",
		"6.01ms-7.03ms r2 w0 p0 D101 D200",
		"7.03ms-8.04ms r1 w0 p0 D102",
		"8.04ms-9.05ms r1 w0 p0 D103",
	}
	if strings.Join(steps, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps\n%s\nwant\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	a, b := got["a"], got["b"]
	near(t, "a ttft", a.TTFTSec.V, 0.002)
	nearAll(t, "a itl", a.ITLSec, []float64{0.00101, 0.003 + 0.00102, 0.00101, 0.00101})
	near(t, "b ttft", b.TTFTSec.V, 0.00601-0.0025)
	nearAll(t, "b itl", b.ITLSec, []float64{0.00102})
	if st.Steps != 6 || st.Preemptions != 0 {
		t.Errorf("stats %+v", st)
	}

	// Mixed chunk: step 3 prefills b and decodes a together (201 tokens).
	cfg := sgConfig(10000)
	cfg.Scheduler.EnableMixedChunk = true
	got, _, _, steps = sgReplay(t, cfg, cost, reqs)
	if steps[2] != "3.01ms-6.02ms r2 w0 p0 P0+200 D101" {
		t.Errorf("mixed step 3: %s", steps[2])
	}
	nearAll(t, "mixed a itl", got["a"].ITLSec[:2], []float64{0.00101, 0.00301})
}

// The overlap scheduler builds a step when the step before begins: b,
// arriving at 2.5 ms while step 2 [2, 3.01 ms] runs, misses step 3 (built
// at 2 ms), which decodes a alone; step 4 prefills b. A request reaching
// an idle worker is built into a step at once. b finishes as step 5 ends,
// which step 6, built when step 5 began, does not know: step 6 decodes b
// once more (D201: priced, its token dropped; sgDone).
func TestSGLangOverlap(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 100, 5), req("b", 2500*time.Microsecond, 200, 2)}
	cfg := sgConfig(10000)
	cfg.Scheduler.OverlapSchedule = true
	got, _, _, steps := sgReplay(t, cfg, cost, reqs)
	want := []string{
		"0s-2ms r1 w0 p0 P0+100",
		"2ms-3.01ms r1 w0 p0 D100",
		"3.01ms-4.02ms r1 w1 p0 D101",
		"4.02ms-7.02ms r2 w0 p0 P0+200",
		"7.02ms-8.04ms r2 w0 p0 D102 D200",
		"8.04ms-9.06ms r1 w0 p0 D103 D201",
	}
	if strings.Join(steps, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps\n%s\nwant\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	near(t, "a ttft", got["a"].TTFTSec.V, 0.002)
	near(t, "b ttft", got["b"].TTFTSec.V, 0.00702-0.0025)
}

// Token-granular prefix sharing: a request with the same hash_ids as a
// finished one hits every prompt token but the last (not a block
// multiple); one without hash_ids, or with the radix cache disabled, hits
// nothing.
func TestSGLangRadixSharing(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{
		withHashes(req("a", 0, 1000, 2), 512, 1, 2),
		withHashes(req("b", 100*ms, 1000, 2), 512, 1, 2),
		withHashes(req("c", 200*ms, 700, 2), 512, 1, 3), // shares block 1 only
		req("d", 300*ms, 1000, 2),
	}
	got, _, st, _ := sgReplay(t, sgConfig(100000), cost, reqs)
	for id, want := range map[string]int64{"a": 0, "b": 999, "c": 512, "d": 0} {
		if c := got[id].CachedTokens.V; c != want {
			t.Errorf("%s: %d cached tokens, want %d", id, c, want)
		}
	}
	// b computes one token: TTFT = 1 ms + 1 µs.
	near(t, "b ttft", got["b"].TTFTSec.V, 0.001001)
	if st.CachedTokens != 999+512 {
		t.Errorf("cached %d", st.CachedTokens)
	}

	cfg := sgConfig(100000)
	cfg.Scheduler.DisableRadixCache = true
	got, _, st, _ = sgReplay(t, cfg, cost, reqs)
	if st.CachedTokens != 0 || got["b"].CachedTokens.V != 0 {
		t.Errorf("radix cache disabled but %d tokens cached", st.CachedTokens)
	}
}

// The lpm policy admits the waiting request with the longest cached
// prefix first; FCFS admits in arrival order. max_prefill_tokens lets one
// of the two in per step.
func TestSGLangLPM(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{
		withHashes(req("warm", 0, 1024, 1), 512, 5, 6),
		req("block", 100*ms, 4000, 1),
		withHashes(req("x", 101*ms, 1024, 1), 512, 7, 8),
		withHashes(req("y", 102*ms, 1024, 1), 512, 5, 6),
	}
	for _, policy := range []string{PolicyLPM, PolicyFCFS} {
		cfg := sgConfig(100000)
		cfg.Scheduler.SchedulePolicy = policy
		cfg.Scheduler.MaxPrefillTokens = 1000
		got, _, _, steps := sgReplay(t, cfg, cost, reqs)
		x, y := got["x"].PrefillDone.V, got["y"].PrefillDone.V
		if policy == PolicyLPM && !(y < x) || policy == PolicyFCFS && !(x < y) {
			t.Errorf("%s: x first token at %v, y at %v\n%s", policy, x, y, strings.Join(steps, "\n"))
		}
		if got["y"].CachedTokens.V != 1023 {
			t.Errorf("%s: y cached %d", policy, got["y"].CachedTokens.V)
		}
	}
}

// Retraction: two requests whose decodes outgrow a 60-token pool. b,
// admitted later under the optimistic new_token_ratio, has fewer output
// tokens when memory runs out and is retracted; it keeps its generated
// tokens, recomputes them with its prompt when readmitted, and completes.
func TestSGLangRetraction(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 10, 45), req("b", 4500*time.Microsecond, 5, 30)}
	cfg := sgConfig(60)
	cfg.Scheduler.ScheduleConservativeness = 0.01
	got, all, st, steps := sgReplay(t, cfg, cost, reqs)
	a, b := got["a"], got["b"]
	if st.Preemptions != 1 || a.Preemptions.V != 0 || b.Preemptions.V != 1 {
		t.Fatalf("preemptions: total %d, a %d, b %d\n%s", st.Preemptions, a.Preemptions.V, b.Preemptions.V, strings.Join(steps, "\n"))
	}
	if st.Completed != 2 || a.OutputTokens.V != 45 || b.OutputTokens.V != 30 {
		t.Errorf("stats %+v", st)
	}
	// Step 1 prefills a (10 tokens, 1.010 ms), steps 2-5 decode it
	// (1.001 ms each); b arrives at 4.5 ms and step 6 prefills it alone
	// [5.014, 6.019 ms]: a holds 14 tokens, b 5. Each joint decode step
	// (1.002 ms) takes 2 more; after 20 of them 59 are used and the
	// 21st, at 26.059 ms, cannot get 2: b (21 outputs to a's 25) is
	// retracted and a decodes alone.
	var retracted []string
	for i, s := range steps {
		if strings.Contains(s, " p1") {
			retracted = append(retracted, fmt.Sprint(i+1, ": ", s))
		}
	}
	if want := "27: 26.059ms-27.06ms r1 w1 p1 D34"; len(retracted) != 1 || retracted[0] != want {
		t.Errorf("retraction steps %q, want %q\n%s", retracted, want, strings.Join(steps, "\n"))
	}
	if all[0].RequestID != "a" {
		t.Errorf("a should finish first")
	}
}

// The Mooncake head under the SGLang scheduler, with the validator and
// the radix accounting checked at every step, once with room and once
// with a KV pool small enough to evict and retract; each run twice, with
// identical output.
func TestSGLangMooncake(t *testing.T) {
	t.Parallel()
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:300]
	cost, blocks := llama8BOnH100(t)
	for _, tokens := range []int64{blocks * 16, 150000} {
		cfg := Config{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: tokens}}
		run := func() (string, Stats) {
			var all []*trace.Request
			v := newValidator(t, cfg, reqs)
			st, err := RunObserved(cfg, cost, 1, reqs, func(r *trace.Request) error {
				all = append(all, r)
				return v.output(r)
			}, func(s *Step) error {
				if err := v.step(s); err != nil {
					return err
				}
				return checkRadix(s)
			})
			if err != nil {
				t.Fatal(err)
			}
			v.finish(all)
			return dump(all), st
		}
		a, st := run()
		b, _ := run()
		if a != b {
			t.Errorf("%d tokens: two replays differ", tokens)
		}
		if st.Completed+st.Rejected != len(reqs) || st.CachedTokens == 0 {
			t.Errorf("%d tokens: stats %+v", tokens, st)
		}
		t.Logf("%d KV tokens: completed %d rejected %d preemptions %d steps %d hit rate %.3f",
			tokens, st.Completed, st.Rejected, st.Preemptions, st.Steps, float64(st.CachedTokens)/float64(st.PromptTokens))
	}
	// For comparison: vLLM's scheduler and 16-token prefix cache on the
	// same slice and cluster.
	st, err := Run(Config{Workers: 2}, cost, blocks, reqs, func(*trace.Request) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vLLM: preemptions %d steps %d hit rate %.3f", st.Preemptions, st.Steps, float64(st.CachedTokens)/float64(st.PromptTokens))
}

// Fast-forward (inline steps within a window) gives the same results for
// SGLang workers as stepping one event at a time.
func TestSGLangFastForwardSameResults(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(7, 300, 150)
	cfg := Config{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1500, SGLangConfig: SGLangConfig{ScheduleConservativeness: 0.05}}}
	cost := linearCost{Base: ms, PerToken: time.Microsecond, PerContext: time.Nanosecond}
	a, sa, la := runWith(t, cfg, cost, 1, reqs, true)
	b, sb, lb := runWith(t, cfg, cost, 1, reqs, false)
	if a != b {
		t.Error("fast-forward changes the SGLang results")
	}
	if fmt.Sprint(la) != fmt.Sprint(lb) || sa.Steps != sb.Steps || sa.Preemptions != sb.Preemptions {
		t.Errorf("steps differ: %d vs %d, preemptions %d vs %d", sa.Steps, sb.Steps, sa.Preemptions, sb.Preemptions)
	}
	if sa.Preemptions == 0 || sa.CachedTokens == 0 || sa.Evictions == 0 {
		t.Errorf("the trace should retract, share and evict: %+v", sa)
	}
	var kv float64
	for _, s := range sa.Seconds {
		kv = max(kv, s.KVBlocksUsed)
	}
	if kv <= 0 || kv > 2*1500 {
		t.Errorf("per-second KV use peaks at %g tokens of 2 × 1500", kv)
	}
}

func TestSGLangConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig("c.yaml", []byte("scheduler:\n  engine: sglang\n  schedule_policy: fcfs\n  enable_mixed_chunk: true\n"))
	if err != nil || c.Scheduler.Engine != EngineSGLang || c.Scheduler.SchedulePolicy != PolicyFCFS || !c.Scheduler.EnableMixedChunk {
		t.Fatalf("%+v %v", c.Scheduler, err)
	}
	_, err = ParseConfig("c.yaml", []byte("scheduler:\n  engine: trt\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2: scheduler.engine") {
		t.Errorf("error %v", err)
	}
}

// BenchmarkReplayMooncakeSGLang replays the whole Mooncake conversation
// trace (12,031 requests) on 16 workers of Llama-3.1-8B on H100 under
// SGLang's scheduler (compare BenchmarkReplayMooncake, vLLM's).
func BenchmarkReplayMooncakeSGLang(b *testing.B) {
	reqs := readMooncake(b, shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(b)
	cfg := Config{Workers: 16, Scheduler: SchedulerConfig{Engine: EngineSGLang}}
	var st Stats
	b.ResetTimer()
	for b.Loop() {
		var err error
		st, err = Run(cfg, cost, blocks, reqs, func(*trace.Request) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.Steps), "steps/op")
	b.ReportMetric(float64(st.Events), "events/op")
	b.ReportMetric(float64(st.Preemptions), "retractions/op")
	b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "hit-rate")
}

// Client timeouts abort SGLang requests waiting, running between steps and
// in a step; the radix accounting stays exact and every request is
// accounted for.
func TestSGLangTimeouts(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(11, 200, 150)
	cfg := Config{Workers: 1, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 3000}}
	cfg.Client.TimeoutSec = 0.3
	cost := linearCost{Base: ms, PerToken: 25 * time.Microsecond}
	_, _, st, _ := sgReplay(t, cfg, cost, reqs)
	if st.TimedOut == 0 || st.Completed == 0 || st.TimedOut+st.Completed+st.Rejected != len(reqs) {
		t.Errorf("stats %+v", st)
	}
}

// Chunked prefill: a 20,000-token prompt runs in chunks of 8192, 8192 and
// 3616 (chunked_prefill_size); a request arriving meanwhile waits while
// the chunk takes the whole budget and joins the last chunk's step.
func TestSGLangChunkedPrefill(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{req("long", 0, 20000, 2), req("short", 5*ms, 10, 1)}
	got, _, _, steps := sgReplay(t, sgConfig(100000), cost, reqs)
	want := []string{
		"0s-9.192ms r1 w0 p0 P0+8192",
		"9.192ms-18.384ms r1 w1 p0 P8192+8192",
		"18.384ms-23.01ms r2 w0 p0 P16384+3616 P0+10",
		"23.01ms-24.011ms r1 w0 p0 D20000",
	}
	if strings.Join(steps, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps\n%s\nwant\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	near(t, "short ttft", got["short"].TTFTSec.V, 0.02301-0.005)
}

// In-batch prefix caching: of two waiting requests sharing a prefix no one
// has cached, the second is put behind the others, so that when the
// prefill budget (two requests here) leaves it for the next step the
// first has cached the prefix for it. FCFS admits the two together and
// the second hits nothing (a step's requests do not share).
func TestSGLangInBatchPrefix(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{
		req("block", 0, 4000, 1),
		withHashes(req("x1", 1*ms, 1024, 1), 512, 7, 8),
		withHashes(req("x2", 2*ms, 1024, 1), 512, 7, 8),
		withHashes(req("z", 3*ms, 1024, 1), 512, 9, 10),
	}
	cfg := sgConfig(100000)
	cfg.Scheduler.MaxPrefillTokens = 2048 // two requests per step
	got, _, _, steps := sgReplay(t, cfg, cost, reqs)
	x1, x2, z := got["x1"].PrefillDone.V, got["x2"].PrefillDone.V, got["z"].PrefillDone.V
	if !(x1 == z && z < x2) || got["x2"].CachedTokens.V != 1023 {
		t.Errorf("first tokens x1 %v z %v x2 %v, x2 cached %d\n%s", x1, z, x2, got["x2"].CachedTokens.V, strings.Join(steps, "\n"))
	}
	// FCFS has no such reordering.
	cfg.Scheduler.SchedulePolicy = PolicyFCFS
	got, _, _, _ = sgReplay(t, cfg, cost, reqs)
	if !(got["x2"].PrefillDone.V < got["z"].PrefillDone.V) || got["x2"].CachedTokens.V != 0 {
		t.Errorf("fcfs: x2 should run with x1, before z, and hit nothing (cached %d)", got["x2"].CachedTokens.V)
	}
}

// batch_is_full: a request refused for want of tokens (NO_TOKEN) blocks
// prefill until the running batch shrinks, and a batch that shrinks in a
// decode step is noticed by the next decode step (update_running_batch),
// so b's prefill waits one decode step after c leaves even though it would
// fit (300 tokens: 287 free or evictable minus 196 × 0.69699 reserved for
// a leaves 150.39 for b's 50 + 100).
func TestSGLangBatchFull(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 10, 200), req("c", 0, 5, 3), req("b", 500*time.Microsecond, 50, 100)}
	_, _, _, steps := sgReplay(t, sgConfig(300), cost, reqs)
	want := []string{
		"0s-1.015ms r2 w0 p0 P0+10 P0+5",
		"1.015ms-2.017ms r2 w1 p0 D10 D5", // b: 150 ≥ 285 − 199·0.7 − 2·0.7: NO_TOKEN
		"2.017ms-3.019ms r2 w1 p0 D11 D6", // c's last token
		"3.019ms-4.02ms r1 w1 p0 D12",     // still full: this decode clears it
		"4.02ms-5.07ms r2 w0 p0 P0+50",
	}
	if got := strings.Join(steps[:len(want)], "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("steps\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// With ignore_eos and the radix cache off, admission checks that every
// request can run to its end (add_one_req_ignore_eos) instead of
// new_token_ratio's estimate. a (10 + 100 tokens) runs in a 200-token
// pool when b (the same) arrives: the estimate (0.7 of a's 100 left)
// lets b in at once, and b is retracted when the pool runs out; the exact
// check (both must reach 100 more tokens: 2 × 100 > 190 free) keeps b
// waiting until a finishes, and nothing is retracted.
func TestSGLangIgnoreEOSAdmission(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 10, 100), req("b", 2500*time.Microsecond, 10, 100)}
	cfg := sgConfig(200)
	cfg.Scheduler.DisableRadixCache = true
	got, _, st, _ := sgReplay(t, cfg, cost, reqs)
	if st.Preemptions == 0 || got["b"].TTFTSec.V > 0.01 {
		t.Errorf("new_token_ratio admission: %d preemptions, b's TTFT %.4f s; want b in at once, then retracted", st.Preemptions, got["b"].TTFTSec.V)
	}
	cfg.Scheduler.IgnoreEOS = true
	got, _, st, _ = sgReplay(t, cfg, cost, reqs)
	a, b := got["a"], got["b"]
	aEnd := a.Arrival.V.Seconds() + a.E2ESec.V
	if st.Preemptions != 0 || b.Arrival.V.Seconds()+b.TTFTSec.V < aEnd {
		t.Errorf("ignore_eos admission: %d preemptions, b's first token at %.4f s, a done at %.4f s; want b after a, no retraction",
			st.Preemptions, b.Arrival.V.Seconds()+b.TTFTSec.V, aEnd)
	}
}

// TestSGLangIgnoreEOSCheckUsesNextLeft pins a quirk of SGLang v0.4's
// add_one_req_ignore_eos that the replay keeps: at each entry i of the
// requests sorted by tokens left, it charges the whole remaining batch
// (n − i requests) the tokens left of the entry after i, not its own, and
// counts as freed only the tokens of the entries before i. This is
// stricter than what running to the end needs. Here a running request
// holding 1,000 tokens has 1 token left and the candidate 100: both could
// finish with 2 tokens free (after 1 step the first frees 1,000), but
// SGLang admits the candidate only when the pool, less its prompt, has
// more than 2 × 100 tokens free.
func TestSGLangIgnoreEOSCheckUsesNextLeft(t *testing.T) {
	t.Parallel()
	running := []*reqState{{prompt: 999, out: 1, maxOut: 2}}
	const prompt = 10
	for _, c := range []struct {
		free float64 // tokens free, the candidate's prompt included
		want bool
	}{
		{prompt + 2, false}, // what finishing needs: refused
		{prompt + 200, false},
		{prompt + 201, true},
	} {
		g := &sglang{ignoreEOS: true}
		r := &reqState{prompt: prompt, maxOut: 100}
		if got := g.fitsToEnd(r, running, c.free); got != c.want {
			t.Errorf("%v tokens free: admitted %v, want %v", c.free, got, c.want)
		}
	}
}

// Under the overlap scheduler a finished request is released one build
// late (sgDone): a's tokens keep c out of a 420-token pool until a
// finishes at the end of step 3. Without overlap step 4 sees the running
// batch shrink (clearing batch_is_full) and step 5 prefills c; with it
// step 4, built when step 3 began, decodes a once more, step 5 sees the
// batch shrink, and c waits for step 6.
func TestSGLangOverlapFreesLate(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 300, 3), req("b", 0, 10, 8), req("c", 100*time.Microsecond, 250, 2)}
	for _, c := range []struct {
		overlap bool
		want    []string
	}{
		{false, []string{
			"0s-4.1ms r2 w0 p0 P0+300 P0+10",
			"4.1ms-5.12ms r2 w1 p0 D300 D10",
			"5.12ms-6.14ms r2 w1 p0 D301 D11",
			"6.14ms-7.15ms r1 w1 p0 D12", // a left: the batch shrank, batch_is_full cleared
			"7.15ms-10.65ms r2 w0 p0 P0+250",
			"10.65ms-11.67ms r2 w0 p0 D13 D250",
			"11.67ms-12.68ms r1 w0 p0 D14",
			"12.68ms-13.69ms r1 w0 p0 D15",
			"13.69ms-14.7ms r1 w0 p0 D16",
		}},
		{true, []string{
			"0s-4.1ms r2 w0 p0 P0+300 P0+10",
			"4.1ms-5.12ms r2 w1 p0 D300 D10",
			"5.12ms-6.14ms r2 w1 p0 D301 D11",
			"6.14ms-7.16ms r1 w1 p0 D12 D302", // a, finished, decoded once more
			"7.16ms-8.17ms r1 w1 p0 D13",      // a released: the batch shrank
			"8.17ms-11.67ms r2 w0 p0 P0+250",
			"11.67ms-12.69ms r2 w0 p0 D14 D250",
			"12.69ms-13.71ms r1 w0 p0 D15 D251", // c, finished, once more
			"13.71ms-14.72ms r1 w0 p0 D16",
		}},
	} {
		cfg := sgConfig(420)
		cfg.Scheduler.OverlapSchedule = c.overlap
		_, _, _, steps := sgReplay(t, cfg, cost, reqs)
		if strings.Join(steps, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("overlap %v: steps\n%s\nwant\n%s", c.overlap, strings.Join(steps, "\n"), strings.Join(c.want, "\n"))
		}
	}
}
