package replay

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/trace"
)

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %.12g, want %.12g", name, got, want)
	}
}

func nearAll(t *testing.T, name string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", name, got, want)
	}
	for i := range got {
		near(t, name, got[i], want[i])
	}
}

// One request alone: a 100-token prefill step that also emits the first
// token, then one decode step per further token.
func TestOneRequest(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	reqs := []*trace.Request{req("a", time.Second, 100, 3)}
	got, all, st := replay(t, Config{}, cost, 1000, reqs)
	a := got["a"]
	// Step 1: 1 ms + 100·10 µs = 2 ms. Steps 2, 3: 1 ms + 10 µs.
	near(t, "ttft", a.TTFTSec.V, 0.002)
	near(t, "e2e", a.E2ESec.V, 0.002+2*0.00101)
	nearAll(t, "itl", a.ITLSec, []float64{0.00101, 0.00101})
	near(t, "queue", a.QueueSec.V, 0)
	near(t, "prefill", a.PrefillSec.V, 0.002)
	near(t, "decode", a.DecodeSec.V, 0.00202)
	if a.GPUStart.V != trace.Time(time.Second) || a.DoneAtRouter.V != trace.Time(time.Second+4020*time.Microsecond) {
		t.Errorf("gpu start %v, done %v", a.GPUStart.V, a.DoneAtRouter.V)
	}
	if a.Worker != "w0" || a.CachedTokens.V != 0 || a.Preemptions.V != 0 {
		t.Errorf("worker %q cached %d preemptions %d", a.Worker, a.CachedTokens.V, a.Preemptions.V)
	}
	if st.Steps != 3 || st.Completed != 1 || st.OutputTokens != 3 {
		t.Errorf("stats %+v", st)
	}
	golden.Check(t, "testdata/one.golden", []byte(dump(all)))
}

// A 20,000-token prompt under the 8192-token budget is computed in chunks
// of 8192, 8192 and 3616 tokens; the last chunk's step emits the first
// token. A second request arriving mid-prefill waits: the running prefill
// takes the whole budget.
func TestChunkedPrefill(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: time.Microsecond}
	reqs := []*trace.Request{req("long", 0, 20000, 2), req("short", 5*ms, 10, 1)}
	got, _, st := replay(t, Config{}, cost, 10000, reqs)
	long, short := got["long"], got["short"]
	if st.Preemptions != 0 || st.Steps != 4 {
		t.Errorf("a spent budget must not preempt: %+v", st)
	}
	s1, s2 := 0.001+0.008192, 0.001+0.008192
	// Step 3 (the last 3616-token chunk) also admits the short request:
	// 3616 + 10 tokens.
	s3 := 0.001 + 0.000001*(3616+10)
	near(t, "long ttft", long.TTFTSec.V, s1+s2+s3)
	near(t, "long prefill", long.PrefillSec.V, s1+s2+s3)
	// short arrived at 5 ms, during step 1; step 2 was all long's chunk.
	// The engine took it in at step 2's start (the pass after step 1),
	// so its queue time, as vLLM counts it, is step 2; the whole wait
	// since it reached the scheduler includes the rest of step 1.
	near(t, "short queue", short.QueueSec.V, s2)
	near(t, "short wait", short.ScheduleSec.V, s1+s2-0.005)
	near(t, "short ttft", short.TTFTSec.V, s1+s2+s3-0.005)
	// Step 4 decodes long alone.
	nearAll(t, "long itl", long.ITLSec, []float64{0.001 + 0.000001})
}

// Requests sharing a prefix: the second hits the first's full blocks only,
// and only up to prompt length − 1 tokens.
func TestPrefixSharing(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	ids := []int64{1, 2, 3, 4, 5, 6, 7} // 16-token trace blocks
	reqs := []*trace.Request{
		withHashes(req("a", 0, 100, 1), 16, ids...),
		// b shares a's first four trace blocks: 64 tokens.
		withHashes(req("b", time.Second, 100, 1), 16, 1, 2, 3, 4, 9, 10, 11),
		// c equals a: 6 full blocks (96 tokens) are cached; the 7th,
		// partial, never is.
		withHashes(req("c", 2*time.Second, 100, 1), 16, ids...),
		// d's prompt is a's first 96 tokens: all six blocks are cached,
		// but at most 95 tokens may hit, so five blocks do.
		withHashes(req("d", 3*time.Second, 96, 1), 16, ids[:6]...),
		// e has no hash ids: nothing is shared with anyone.
		req("e", 4*time.Second, 100, 1),
		req("f", 5*time.Second, 100, 1),
	}
	got, all, st := replay(t, Config{}, cost, 1000, reqs)
	for _, c := range []struct {
		id     string
		cached int64
	}{{"a", 0}, {"b", 64}, {"c", 96}, {"d", 80}, {"e", 0}, {"f", 0}} {
		r := got[c.id]
		if r.CachedTokens.V != c.cached || r.DeviceHitTokens.V != c.cached {
			t.Errorf("%s: cached %d, want %d", c.id, r.CachedTokens.V, c.cached)
		}
		want := 0.001 + 0.00001*float64(r.InputTokens.V-c.cached)
		near(t, c.id+" ttft", r.TTFTSec.V, want)
	}
	if st.CachedTokens != 64+96+80 {
		t.Errorf("stats cached %d", st.CachedTokens)
	}
	// Without prefix caching nobody hits.
	off := false
	cfg := Config{Scheduler: SchedulerConfig{EnablePrefixCaching: &off}}
	got, _, _ = replay(t, cfg, cost, 1000, reqs)
	for _, id := range []string{"b", "c", "d"} {
		if got[id].CachedTokens.V != 0 {
			t.Errorf("caching off: %s cached %d", id, got[id].CachedTokens.V)
		}
	}
	golden.Check(t, "testdata/prefix.golden", []byte(dump(all)))
}

// Two requests outgrow a 10-block cache (4-token blocks): the last running
// one is preempted, waits for the other to finish, and is recomputed.
// Timeline by hand, prefix caching off:
//
//	step 1        both prefill 8 tokens: 1 ms + 16·10 µs = 1.16 ms; token 1 each
//	steps 2–13    both decode (1.02 ms each): tokens 2–13; at step 13 each
//	              holds 5 blocks for 20 tokens, so the cache is full
//	step 14       a needs a 6th block: b (last) is preempted; a decodes
//	              alone, and no waiting request is admitted in a step
//	              that preempted
//	steps 14–20   a alone (1.01 ms each) to token 20 and completes at 20.47 ms
//	steps 15–20   b (21 tokens: 6 blocks) does not fit beside a
//	step 21       b recomputes its 21 tokens: 1.21 ms; token 14
//	steps 22–27   b decodes tokens 15–20 and completes at 27.74 ms
func TestPreemption(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	off := false
	cfg := Config{Scheduler: SchedulerConfig{BlockSize: 4, EnablePrefixCaching: &off}}
	reqs := []*trace.Request{req("a", 0, 8, 20), req("b", 0, 8, 20)}
	got, all, st := replay(t, cfg, cost, 10, reqs)
	a, b := got["a"], got["b"]
	near(t, "a e2e", a.E2ESec.V, 0.00116+12*0.00102+7*0.00101)
	near(t, "b e2e", b.E2ESec.V, 0.00116+12*0.00102+7*0.00101+0.00121+6*0.00101)
	near(t, "b ttft", b.TTFTSec.V, 0.00116)
	near(t, "b gap over the preemption", b.ITLSec[12], 7*0.00101+0.00121)
	if a.Preemptions.V != 0 || b.Preemptions.V != 1 || st.Preemptions != 1 {
		t.Errorf("preemptions a %d b %d total %d", a.Preemptions.V, b.Preemptions.V, st.Preemptions)
	}
	if all[0].RequestID != "a" {
		t.Errorf("completion order %s first", all[0].RequestID)
	}
	golden.Check(t, "testdata/preempt.golden", []byte(dump(all)))

	// With prefix caching on, b's recompute hits its own freed blocks
	// that a did not take: a took two of b's five (the last two it
	// freed), so b recomputes 21 − 12 = 9 tokens, and finishes sooner.
	on := true
	cfg.Scheduler.EnablePrefixCaching = &on
	got, _, _ = replay(t, cfg, cost, 10, reqs)
	b = got["b"]
	near(t, "b e2e with cache", b.E2ESec.V, 0.00116+12*0.00102+7*0.00101+0.00109+6*0.00101)
	if b.CachedTokens.V != 0 {
		t.Errorf("cached tokens count the first schedule only, got %d", b.CachedTokens.V)
	}
}

// A request that can never fit in a worker's KV cache is rejected at once
// with a reason; the others run.
func TestReject(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms}
	reqs := []*trace.Request{req("big", 0, 150, 20), req("ok", 0, 100, 1), req("empty", 0, 0, 5)}
	got, _, st := replay(t, Config{}, cost, 10, reqs) // 160 tokens per worker
	if r := got["big"]; r.Status != trace.StatusRejected || r.Error == "" || r.DoneAtRouter.V != 0 {
		t.Errorf("big: %v", r)
	}
	if got["empty"].Status != trace.StatusRejected {
		t.Errorf("empty prompt: %v", got["empty"])
	}
	if got["ok"].Status != trace.StatusOK || st.Rejected != 2 || st.Completed != 1 {
		t.Errorf("ok: %v, stats %+v", got["ok"], st)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	r := req("x", 0, 10, 1)
	r.Arrival = trace.Opt[trace.Time]{}
	r.SetPos("t.jsonl", 7)
	_, err := Run(Config{}, linearCost{Base: ms}, 100, []*trace.Request{r}, func(*trace.Request) error { return nil })
	if err == nil || err.Error() != "t.jsonl:7: arrival_s: absent (the open loop replays arrival times; use the closed loop)" {
		t.Errorf("err = %v", err)
	}
	// The closed loop does not need arrivals.
	n := 0
	cfg := Config{Workload: WorkloadConfig{Mode: ModeClosed}}
	if _, err := Run(cfg, linearCost{Base: ms}, 100, []*trace.Request{r}, func(*trace.Request) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("closed loop: %v, %d outputs", err, n)
	}
}

// Round-robin spreads requests over workers in arrival order.
func TestRoundRobin(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i := range 6 {
		reqs = append(reqs, req(string(rune('a'+i)), time.Duration(i)*ms, 10, 2))
	}
	got, _, _ := replay(t, Config{Workers: 3}, linearCost{Base: ms}, 100, reqs)
	var ws []string
	for i := range 6 {
		ws = append(ws, got[string(rune('a'+i))].Worker)
	}
	if want := []string{"w0", "w1", "w2", "w0", "w1", "w2"}; !slices.Equal(ws, want) {
		t.Errorf("workers %v, want %v", ws, want)
	}
}

// Streaming as the client sees it: a stream interval of 2 sends the first
// token alone, then two tokens a chunk, the rest with the last token; a
// 5 ms one-way client latency delays the request and every chunk.
//
//	server (from arrival at 1.005 s): token 1 at 2 ms, then one per
//	1.01 ms: tokens 2…6 at 3.01, 4.02, 5.03, 6.04, 7.05 ms
//	chunks: [1] at 2, [2 3] at 4.02, [4 5] at 6.04, [6] at 7.05 ms
//	client: TTFT = 2 + 2·5 = 12 ms; ITL 2.02, 2.02, 1.01 ms; E2E 17.05 ms
func TestStreamIntervalAndLatency(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: ms, PerToken: 10 * time.Microsecond}
	cfg := Config{Scheduler: SchedulerConfig{StreamInterval: 2}, Client: ClientConfig{LatencySec: 0.005}}
	got, _, _ := replay(t, cfg, cost, 1000, []*trace.Request{req("a", time.Second, 100, 6)})
	a := got["a"]
	near(t, "ttft", a.TTFTSec.V, 0.012)
	near(t, "e2e", a.E2ESec.V, 0.01705)
	nearAll(t, "itl", a.ITLSec, []float64{0.00202, 0.00202, 0.00101})
	if !slices.Equal(a.ChunkTokens, []int32{1, 2, 2, 1}) || a.ITLUnit != trace.ITLChunk {
		t.Errorf("chunks %v unit %s", a.ChunkTokens, a.ITLUnit)
	}
	if a.Arrival.V != trace.Time(time.Second) || a.RouterArrival.V != trace.Time(time.Second+5*ms) ||
		a.PrefillDone.V != trace.Time(time.Second+7*ms) {
		t.Errorf("sent %v, at router %v, first token %v", a.Arrival.V, a.RouterArrival.V, a.PrefillDone.V)
	}
	// Every chunk count and remainder.
	for out := int64(1); out < 40; out++ {
		for k := int64(1); k < 9; k++ {
			c := chunkTokens(out, k)
			var sum int64
			for _, x := range c {
				sum += int64(x)
				if x < 1 || int64(x) > k && len(c) > 1 && x != c[0] {
					t.Fatalf("out %d k %d: chunks %v", out, k, c)
				}
			}
			if sum != out || int64(len(c)) != numChunks(out, k) {
				t.Fatalf("out %d k %d: chunks %v", out, k, c)
			}
		}
	}
	// In the closed loop the next request is sent when the client has
	// the last chunk: one latency after the server finished.
	cfg.Workload = WorkloadConfig{Mode: ModeClosed}
	got, _, _ = replay(t, cfg, cost, 1000, []*trace.Request{req("a", 0, 100, 6), req("b", 0, 100, 6)})
	if got["b"].Arrival.V != got["a"].DoneAtRouter.V.Add(5*ms) {
		t.Errorf("b sent at %v, a done at %v", got["b"].Arrival.V, got["a"].DoneAtRouter.V)
	}
}

// A client timeout of 45 ms on one worker running one sequence at a time
// with 10 ms steps:
//
//	a (4 tokens) runs [0,40) and completes in time
//	b runs [40,50); its deadline, 45 ms, falls inside the step, so it is
//	aborted when the step ends, with its one token
//	b2 waits behind b and is removed from the queue at 45 ms, tokenless
//	c (10 tokens, alone at 100 ms) has tokens at 110 … 140 ms and is
//	aborted at 150 ms, the end of the step its deadline falls in: 5 tokens
func TestTimeout(t *testing.T) {
	t.Parallel()
	cfg := Config{Scheduler: SchedulerConfig{MaxNumSeqs: 1}, Client: ClientConfig{TimeoutSec: 0.045}}
	reqs := []*trace.Request{req("a", 0, 10, 4), req("b", 0, 10, 1), req("b2", 0, 10, 1), req("c", 100*ms, 10, 10)}
	got, all, st := replay(t, cfg, constCost(10*ms), 100, reqs)
	a, b, b2, c := got["a"], got["b"], got["b2"], got["c"]
	if a.Status != trace.StatusOK || b.Status != trace.StatusTimeout || b2.Status != trace.StatusTimeout ||
		c.Status != trace.StatusTimeout || st.TimedOut != 3 || st.Completed != 1 {
		t.Fatalf("statuses %s %s %s %s, stats %+v", a.Status, b.Status, b2.Status, c.Status, st)
	}
	if b.DoneAtRouter.V != trace.Time(50*ms) || b.OutputTokens.V != 1 || b.TTFTSec.OK {
		t.Errorf("b: %v", b)
	}
	if b2.DoneAtRouter.V != trace.Time(45*ms) || b2.TTFTSec.OK || b2.OutputTokens.V != 0 || b2.GPUStart.OK {
		t.Errorf("b2: %v", b2)
	}
	if c.DoneAtRouter.V != trace.Time(150*ms) || c.OutputTokens.V != 5 || c.TTFTSec.V != 0.01 {
		t.Errorf("c: %v", c)
	}
	var order []string
	for _, r := range all {
		order = append(order, r.RequestID)
	}
	if !slices.Equal(order, []string{"a", "b2", "b", "c"}) {
		t.Errorf("emission order %v", order)
	}
	// The closed loop sends the next request when one times out; the
	// KV cache stays whole (the validator checks every step).
	cfg.Workload = WorkloadConfig{Mode: ModeClosed, Clients: 1}
	got, _, _ = replay(t, cfg, constCost(10*ms), 100, []*trace.Request{req("x", 0, 10, 10), req("y", 0, 10, 2)})
	if got["x"].Status != trace.StatusTimeout || got["y"].Status != trace.StatusOK || got["y"].Arrival.V != trace.Time(50*ms) {
		t.Errorf("x %v\ny %v", got["x"], got["y"])
	}
}

// Sessions: a session's next turn is sent its think time after the
// previous answer. 10 ms steps:
//
//	s1 turn 0 (2 tokens) at 0: done at 20 ms; turn 1 (think 0.5 s) sent
//	at 520 ms, done at 530 ms
//	s2 turn 0 at 100 ms: done at 110 ms
//
// With one session at a time, s2 starts when s1 ends, at 530 ms.
func TestSessions(t *testing.T) {
	t.Parallel()
	withSession := func(r *trace.Request, s string, turn int64, think float64) *trace.Request {
		r.Session, r.Turn = s, trace.Some(turn)
		if think > 0 {
			r.ThinkSec = trace.Some(think)
		}
		return r
	}
	reqs := []*trace.Request{
		withSession(req("s1/1", 7*time.Second, 10, 1), "s1", 1, 0.5), // its trace arrival is not used
		withSession(req("s1/0", 0, 10, 2), "s1", 0, 0),
		withSession(req("s2/0", 100*ms, 10, 1), "s2", 0, 0),
	}
	cfg := Config{Workload: WorkloadConfig{Mode: ModeSessions}}
	got, _, _ := replay(t, cfg, constCost(10*ms), 100, reqs)
	for _, c := range []struct {
		id         string
		sent, done time.Duration
	}{{"s1/0", 0, 20 * ms}, {"s1/1", 520 * ms, 530 * ms}, {"s2/0", 100 * ms, 110 * ms}} {
		if r := got[c.id]; r.Arrival.V != trace.Time(c.sent) || r.DoneAtRouter.V != trace.Time(c.done) {
			t.Errorf("%s: sent %v done %v, want %v %v", c.id, r.Arrival.V, r.DoneAtRouter.V, c.sent, c.done)
		}
	}
	cfg.Workload.Sessions = 1
	got, _, _ = replay(t, cfg, constCost(10*ms), 100, reqs)
	if r := got["s2/0"]; r.Arrival.V != trace.Time(530*ms) {
		t.Errorf("one session at a time: s2 sent at %v", r.Arrival.V)
	}
}
