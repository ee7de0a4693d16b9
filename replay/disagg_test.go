package replay

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// pdConfig is a disaggregation of prefill workers sending 1,000 bytes a
// token at 1 GB/s, 1 ms a transfer: 100 tokens take 1.1 ms.
func pdConfig(prefill int) DisaggregationConfig {
	return DisaggregationConfig{PrefillWorkers: prefill, KVBytesPerToken: 1000, TransferGBps: 1, TransferLatencySec: 0.001}
}

// pdLeast is pdConfig with the decode worker chosen by its load.
func pdLeast(prefill int) DisaggregationConfig {
	d := pdConfig(prefill)
	d.DecodeRouter = DecodeLeastRequests
	return d
}

func pdNear(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestDisaggregatedTimeline follows requests through a prefill worker,
// its link and the decode workers by hand.
func TestDisaggregatedTimeline(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	// One request: a 100-token prefill (20 ms) of one token on w0, its KV
	// sent in 1.1 ms, the last prompt token computed again on w1 (10.1 ms:
	// the first token at 31.2 ms), then two decode steps of 10.1 ms.
	out, _, st := replay(t, Config{Workers: 2, Disaggregation: pdConfig(1)}, cost, 100, []*trace.Request{req("a", 0, 100, 3)})
	a := out["a"]
	if !pdNear(a.TTFTSec.V, 0.0312) || !pdNear(a.E2ESec.V, 0.0514) || len(a.ITLSec) != 2 || !pdNear(a.ITLSec[0], 0.0101) || !pdNear(a.ITLSec[1], 0.0101) {
		t.Errorf("TTFT %v, E2E %v, ITL %v; want 0.0312, 0.0514, [0.0101 0.0101]", a.TTFTSec.V, a.E2ESec.V, a.ITLSec)
	}
	if a.Worker != "w1" || a.PrefillWorker != "w0" || !pdNear(a.KVFetchSec.V, 0.0011) || a.OutputTokens.V != 3 {
		t.Errorf("worker %s, prefill worker %s, KV fetch %v s, output %d; want w1, w0, 0.0011, 3", a.Worker, a.PrefillWorker, a.KVFetchSec.V, a.OutputTokens.V)
	}
	// Its prefill is its prefill worker's, to its token there (20 ms):
	// TTFT is the queue (0), that prefill, the hand-over (kv_fetch_s)
	// and the decode worker's first step (10.1 ms), which TTFT's
	// decomposition leaves in "other".
	if !pdNear(a.PrefillSec.V, 0.020) || a.PrefillDone.V != trace.Time(20*ms) || !pdNear(a.QueueSec.V, 0) {
		t.Errorf("prefill %v s, done at %v, queue %v s; want 0.02, 20ms, 0", a.PrefillSec.V, a.PrefillDone.V, a.QueueSec.V)
	}
	if z := analyze.Decompose([]*trace.Request{a}, analyze.DefaultBands); z == nil || !pdNear(z.Bands[0].Mean[4], 0.0101) {
		t.Errorf("TTFT decomposition %+v: want 10.1 ms of other (the decode worker's first step)", z)
	}
	if st.Steps != 4 || st.OutputTokens != 3 || st.Completed != 1 {
		t.Errorf("stats %+v", st)
	}

	// SGLang's decode server streams the prefill server's token when the
	// KV is in (21.1 ms) and decodes the next two (10.1 ms each); a
	// one-token request is done when its KV is in.
	sg := Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1000}}
	out, _, st = replay(t, sg, cost, 1, []*trace.Request{req("a", 0, 100, 3), req("b", time.Second, 100, 1)})
	if a := out["a"]; !pdNear(a.TTFTSec.V, 0.0211) || !pdNear(a.E2ESec.V, 0.0413) || a.Worker != "w1" {
		t.Errorf("SGLang: TTFT %v, E2E %v, worker %s; want 0.0211, 0.0413, w1", a.TTFTSec.V, a.E2ESec.V, a.Worker)
	}
	if b := out["b"]; !pdNear(b.TTFTSec.V, 0.0211) || !pdNear(b.E2ESec.V, 0.0211) || b.OutputTokens.V != 1 {
		t.Errorf("SGLang, one token: TTFT %v, E2E %v, output %d; want 0.0211, 0.0211, 1", b.TTFTSec.V, b.E2ESec.V, b.OutputTokens.V)
	}
	if st.Steps != 4 || st.OutputTokens != 4 {
		t.Errorf("SGLang stats %+v", st)
	}

	// The decode worker gives back every token of a request it ran: the
	// second request fits the 160-token pool only then (the token keys
	// made for the prefill's one output token once left 48 of the
	// first's private).
	sg.Scheduler.KVCacheTokens = 160
	out, _, _ = replay(t, sg, cost, 1, []*trace.Request{req("a", 0, 100, 50), req("b", 2*time.Second, 100, 50)})
	if b := out["b"]; b.Status != trace.StatusOK || b.Preemptions.V != 0 || !pdNear(b.TTFTSec.V, 0.0211) {
		t.Errorf("SGLang, after a long decode: %s, %d preemptions, TTFT %v; want ok, 0, 0.0211", b.Status, b.Preemptions.V, b.TTFTSec.V)
	}

	// Two at once on one prefill worker: one 200-token step (30 ms), the
	// transfers one after the other on its link (30 → 31.1 → 32.2 ms),
	// the decode workers in turn.
	out, _, _ = replay(t, Config{Workers: 3, Disaggregation: pdConfig(1)}, cost, 100,
		[]*trace.Request{req("a", 0, 100, 2), req("b", 0, 100, 2)})
	for _, c := range []struct {
		id, worker  string
		fetch, ttft float64
	}{{"a", "w1", 0.0011, 0.0412}, {"b", "w2", 0.0022, 0.0423}} {
		o := out[c.id]
		if o.Worker != c.worker || !pdNear(o.KVFetchSec.V, c.fetch) || !pdNear(o.TTFTSec.V, c.ttft) {
			t.Errorf("%s: worker %s, KV fetch %v, TTFT %v; want %s, %v, %v", c.id, o.Worker, o.KVFetchSec.V, o.TTFTSec.V, c.worker, c.fetch, c.ttft)
		}
	}
}

// TestDecodeLeastRequests: with long and short replies in turn, vLLM's
// proxy (round-robin) sends every long one to the same decode worker of
// two; the least-requests decode router sends each to the worker with
// fewer outstanding, by hand below, and the long replies' decodes share
// the pool.
func TestDecodeLeastRequests(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	// Every 50 ms a 100-token prompt (a prefill of 20 ms, its KV in 1.1
	// ms more), replies of 200 tokens and of 2 in turn: a short reply is
	// done some 21 ms after its hand-over, before the next one; a long
	// one decodes for over 2 s, past the last arrival.
	var reqs []*trace.Request
	for i := range 12 {
		out := int64(200)
		if i%2 == 1 {
			out = 2
		}
		reqs = append(reqs, req(fmt.Sprint(i), time.Duration(i)*50*ms, 100, out))
	}
	longOn := func(d DisaggregationConfig) map[string]int {
		out, _, _ := replay(t, Config{Workers: 3, Disaggregation: d}, cost, 1000, reqs)
		n := map[string]int{}
		for i := 0; i < len(reqs); i += 2 {
			n[out[fmt.Sprint(i)].Worker]++
		}
		return n
	}
	if got := longOn(pdConfig(1)); got["w1"] != 6 {
		t.Errorf("round-robin: long replies on %v, want all 6 on w1", got)
	}
	// Least requests: each pick finds the short replies done and the
	// long ones under way, so the long ones are spread: a worker with
	// fewer takes the next, ties to the worker after the last chosen.
	if got := longOn(pdLeast(1)); got["w1"] != 3 || got["w2"] != 3 {
		t.Errorf("least requests: long replies on %v, want 3 on w1 and 3 on w2", got)
	}
}

// TestDecodeDynamo: Dynamo's decode router counts the prompt blocks of
// the requests it sent each decode worker and that have not ended, and
// sends the next to the fewest: a 1,600-token prompt (100 blocks) holds
// one worker of two, so the two 160-token ones after it (10 blocks each)
// both go to the other, where least requests would split them. It is the
// decode router when the cluster's router is dynamo_kv, and every count
// is back to none when the requests have ended.
func TestDecodeDynamo(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	// Prefills end at 170, 196 and 226 ms; each decodes 300 tokens,
	// past the last choice.
	reqs := []*trace.Request{req("a", 0, 1600, 300), req("b", 100*ms, 160, 300), req("c", 200*ms, 160, 300)}
	run := func(cfg Config) (map[string]*trace.Request, *disagg) {
		var p *disagg
		out, _, _ := replayWith(t, cfg, cost, 1000, reqs, testSwitches{atEnd: func(e *engine) { p = e.pd }})
		return out, p
	}
	d := pdConfig(1)
	d.DecodeRouter = DecodeDynamo
	out, p := run(Config{Workers: 3, Disaggregation: d})
	if a, b, c := out["a"].Worker, out["b"].Worker, out["c"].Worker; b != c || a == b {
		t.Errorf("dynamo_kv decode router: a on %s, b on %s, c on %s; want b and c together, away from a", a, b, c)
	}
	for w, n := range p.blocks {
		if n != 0 {
			t.Errorf("at the end, decode worker %d still counts %d blocks", w, n)
		}
	}
	if out, _ := run(Config{Workers: 3, Disaggregation: pdLeast(1)}); out["b"].Worker == out["c"].Worker {
		t.Errorf("least requests: b and c both on %s, want them split (the test tells the two apart)", out["b"].Worker)
	}
	// At a temperature the draw spreads them: over twenty seeds at 100
	// (all but uniform), b and c meet and part.
	met := 0
	for seed := range uint64(20) {
		out, _ := run(Config{Workers: 3, Seed: seed, Disaggregation: d, RouterConfig: RouterConfig{RouterTemperature: 100}})
		if out["b"].Worker == out["c"].Worker {
			met++
		}
	}
	if met == 0 || met == 20 {
		t.Errorf("router_temperature 100: b and c together in %d of 20 seeded replays, want some and not all", met)
	}
	cfg := Config{Workers: 3, Router: RouterDynamo, Disaggregation: pdConfig(1)}.Effective(1000)
	if got := cfg.Disaggregation.DecodeRouter; got != DecodeDynamo {
		t.Errorf("with router dynamo_kv the decode router is %q, want %q", got, DecodeDynamo)
	}
}

// TestDisaggregatedDecodeShort: the decode worker allocates a prompt's
// blocks before its KV is sent, so with no room the KV waits on its
// prefill worker. On 10 blocks a (100 tokens, 40 out: 7 blocks, then 9)
// decodes from 31.2 ms, 10.1 ms a step, to 425.1 ms; b's prefill (64
// tokens) ends at 116.4 ms, but its 4 blocks fit only when a has ended:
// its load (1.064 ms) then, its first token 10.1 ms later (436.264 ms),
// its KV wait from its prefill's end to its load's end.
func TestDisaggregatedDecodeShort(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	out, _, _ := replay(t, Config{Workers: 2, Disaggregation: pdConfig(1)}, cost, 10,
		[]*trace.Request{req("a", 0, 100, 40), req("b", 100*ms, 64, 2)})
	if b := out["b"]; !pdNear(b.TTFTSec.V, 0.336264) || !pdNear(b.KVFetchSec.V, 0.426164-0.1164) {
		t.Errorf("b: TTFT %v, KV wait %v; want 0.336264, %v", b.TTFTSec.V, b.KVFetchSec.V, 0.426164-0.1164)
	}
}

// TestSGLangPrealloc: an SGLang decode server pre-allocates a prompt's
// tokens before its prefill server may run it. On a decode pool of 300
// tokens a (200 tokens, 80 out) holds 200 and more as it decodes; b (150
// tokens) arrives at 50 ms and cannot be pre-allocated until a has ended,
// so it waits in its prefill server's queue, not after its prefill.
func TestSGLangPrealloc(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	sg := Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 300}}
	out, _, st := replay(t, sg, cost, 1, []*trace.Request{req("a", 0, 200, 80), req("b", 50*ms, 150, 2)})
	a, b := out["a"], out["b"]
	if st.Completed != 2 {
		t.Fatalf("%d completed, want 2", st.Completed)
	}
	aEnd := a.Arrival.V.Seconds() + a.E2ESec.V
	if q := b.QueueSec.V; q < aEnd-0.05 {
		t.Errorf("b queued %v s on its prefill server; want at least until a ended (%v s after b arrived)", q, aEnd-0.05)
	}
}

// TestDisaggregatedUnstall: a decode worker of 12 blocks decodes a (7
// blocks, growing) when b's KV (4 blocks) loads into the last free
// blocks; at the next pass a needs a block, finds none, and is preempted
// before b is taken in: at the front of the queue a cannot fit again
// while b, behind it, holds blocks it needs and nothing runs. vLLM's FCFS
// admission would wait for good; b goes first, and both complete.
func TestDisaggregatedUnstall(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	cfg := Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{MaxNumSeqs: 2}}
	out, _, st := replay(t, cfg, cost, 12, []*trace.Request{req("a", 0, 100, 60), req("b", 280*ms, 64, 30)})
	a, b := out["a"], out["b"]
	if st.Completed != 2 || a.Preemptions.V != 1 || b.Preemptions.V != 0 {
		t.Fatalf("%d completed, a preempted %d times, b %d; want 2, 1, 0", st.Completed, a.Preemptions.V, b.Preemptions.V)
	}
	if aEnd, bEnd := a.Arrival.V.Seconds()+a.E2ESec.V, b.Arrival.V.Seconds()+b.E2ESec.V; bEnd >= aEnd {
		t.Errorf("b ended at %v s, a at %v s: want b first", bEnd, aEnd)
	}
}

// TestDecodeRandomAndPowerOfTwo: with one prefill worker and four decode
// workers, 40 requests of long replies (each decoding past the last
// arrival), random choices reach every decode worker and repeat from the
// same seed; power of two choices, each the less loaded of two drawn,
// spread them no more than one apart from even, where random does not.
func TestDecodeRandomAndPowerOfTwo(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	var reqs []*trace.Request
	for i := range 40 {
		reqs = append(reqs, req(fmt.Sprint(i), time.Duration(i)*25*ms, 100, 400))
	}
	spread := func(policy string, seed uint64) map[string]int {
		d := pdConfig(1)
		d.DecodeRouter = policy
		out, _, _ := replay(t, Config{Workers: 5, Disaggregation: d, Seed: seed}, cost, 10000, reqs)
		n := map[string]int{}
		for _, o := range out {
			n[o.Worker]++
		}
		return n
	}
	rnd := spread(DecodeRandom, 3)
	if len(rnd) != 4 || !maps.Equal(rnd, spread(DecodeRandom, 3)) {
		t.Errorf("random: %v, again %v; want all four decode workers, the same twice", rnd, spread(DecodeRandom, 3))
	}
	p2 := spread(DecodePowerOfTwo, 3)
	for w, n := range p2 {
		if n < 9 || n > 11 {
			t.Errorf("power of two: %v; want 10 ± 1 on each (%s has %d)", p2, w, n)
			break
		}
	}
	lo, hi := 40, 0
	for _, n := range rnd {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo <= 2 {
		t.Errorf("random: %v, as even as power of two: the test does not tell them apart", rnd)
	}
}

// TestDecodeChosenWhen: vLLM's proxy picks the decode worker when the
// prefill response is back, SGLang's router picks the pair when the
// request arrives. a (1,000 tokens, 110 ms of prefill) arrives first, on
// prefill worker w0; b (100 tokens, 20 ms) a millisecond later, on w1, and
// its prefill ends first: under vLLM it takes the first decode worker in
// turn (w2) and a the next (w3); under SGLang a took w2 at its arrival.
func TestDecodeChosenWhen(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	reqs := []*trace.Request{req("a", 0, 1000, 3), req("b", ms, 100, 3)}
	for _, c := range []struct {
		name   string
		sched  SchedulerConfig
		blocks int64
		a, b   string
	}{
		{"vllm", SchedulerConfig{}, 1000, "w3", "w2"},
		{"sglang", SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 10000}, 1, "w2", "w3"},
	} {
		out, _, _ := replay(t, Config{Workers: 4, Disaggregation: pdConfig(2), Scheduler: c.sched}, cost, c.blocks, reqs)
		if a, b := out["a"].Worker, out["b"].Worker; a != c.a || b != c.b {
			t.Errorf("%s: a decoded on %s, b on %s; want %s and %s", c.name, a, b, c.a, c.b)
		}
	}
}

// TestDisaggregatedHoldsBlocks: a prefill worker keeps a prompt's blocks
// until its KV has left, so the next prompt that needs them waits for the
// transfer, not only for the step.
func TestDisaggregatedHoldsBlocks(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	slow := pdConfig(1)
	slow.TransferLatencySec = 0.05
	// 8 blocks of 16 tokens: each 100-token prompt needs 7, so b waits
	// for a's blocks: a's prefill ends at 20 ms, its transfer at 70.1 ms,
	// and b's 20 ms prefill then ends at 90.1 ms. The decode worker,
	// decoding a from 70.1 ms (10.1 ms a step), allocates b's blocks
	// and starts its load when it schedules next, at a's end (90.3 ms):
	// b's first token at 90.3 + 50.1 + 10.1 ms.
	out, _, _ := replay(t, Config{Workers: 2, Disaggregation: slow}, cost, 8, []*trace.Request{req("a", 0, 100, 2), req("b", 0, 100, 2)})
	if got := out["b"].TTFTSec.V; !pdNear(got, 0.0903+0.0501+0.0101) {
		t.Errorf("b's TTFT %v, want %v", got, 0.0903+0.0501+0.0101)
	}
}

func TestDisaggregationConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: 2, KVBytesPerToken: 1, TransferGBps: 1}}, "disaggregation.prefill_workers: 2 leaves no decode worker of 2 workers"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: -1, TransferGBps: 1}}, "disaggregation.kv_bytes_per_token: negative"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: 1, TransferGBps: -2}}, "disaggregation.transfer_gbps: -2 is not a rate"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: 1, TransferGBps: 1, TransferLatencySec: -1}}, "disaggregation.transfer_latency_s: -1"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: -1}}, "disaggregation.prefill_workers: negative"},
		{Config{Workers: 2, Disaggregation: DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: 1, TransferGBps: 1, DecodeRouter: "cache_aware"}}, `disaggregation.decode_router: "cache_aware" is not one of round_robin, least_requests, random, power_of_two`},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg.Disaggregation, err, c.want)
		}
	}
	for _, d := range []DisaggregationConfig{{PrefillWorkers: 1, TransferGBps: 1}, {PrefillWorkers: 1, KVBytesPerToken: 1}} {
		_, err := Run(Config{Workers: 2, Disaggregation: d}, linearCost{Base: ms}, 100, []*trace.Request{req("a", 0, 10, 2)}, func(*trace.Request) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "disaggregation needs kv_bytes_per_token and transfer_gbps") {
			t.Errorf("%+v: %v", d, err)
		}
	}
	// (KV tiers: TestDisaggregatedTierErrors.)
	// A transfer of more than a day is refused, not run with a clock
	// that overflows (1e-300 GB/s once made the simulated time negative).
	for _, d := range []DisaggregationConfig{
		{PrefillWorkers: 1, KVBytesPerToken: 1, TransferGBps: 1e-300},
		{PrefillWorkers: 1, KVBytesPerToken: 1 << 62, TransferGBps: 1},
	} {
		_, err := Run(Config{Workers: 2, Disaggregation: d}, linearCost{Base: ms}, 100, []*trace.Request{req("a", 0, 10, 2)}, func(*trace.Request) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "sending the KV of 10 prompt tokens") || !strings.Contains(err.Error(), "more than 86400") {
			t.Errorf("%+v: %v", d, err)
		}
	}
}

// A vLLM decode worker with prefix caching on is sent only the prompt
// tokens past what its own cache holds (the connector loads the rest),
// and schedules the request with those blocks; with prefix caching off
// it is sent the whole prompt.
func TestDisaggregatedDecodeHit(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	ids := []int64{1, 2, 3, 4, 5, 6, 7}
	reqs := func() []*trace.Request {
		return []*trace.Request{withHashes(req("a", 0, 100, 2), 16, ids...), withHashes(req("b", time.Second, 100, 2), 16, ids...)}
	}
	// a: 20 ms of prefill, 1.1 ms of KV, 10.1 ms for the last token
	// again. b: 96 tokens hit on the prefill worker (10.4 ms for the
	// other 4), 96 on the decode worker, so 4 tokens' KV are sent
	// (1.004 ms), and 10.1 ms for the last token.
	out, _, _ := replay(t, Config{Workers: 2, Disaggregation: pdConfig(1)}, cost, 100, reqs())
	for _, c := range []struct {
		id          string
		fetch, ttft float64
	}{{"a", 0.0011, 0.0312}, {"b", 0.001004, 0.021504}} {
		if o := out[c.id]; !pdNear(o.KVFetchSec.V, c.fetch) || !pdNear(o.TTFTSec.V, c.ttft) || o.CachedTokens.V != map[string]int64{"a": 0, "b": 96}[c.id] {
			t.Errorf("%s: KV fetch %v, TTFT %v, cached %d; want %v, %v", c.id, o.KVFetchSec.V, o.TTFTSec.V, o.CachedTokens.V, c.fetch, c.ttft)
		}
	}
	// The decode worker takes the hit blocks: with 9 blocks a worker,
	// a (20 output tokens, first at 31.2 ms, steps of 10.1 ms) holds 8
	// when b's prefill ends (210.4 ms); the decode worker schedules next
	// at 213.0 ms, and b's 7 blocks fit beside a's only by sharing a's 6
	// prompt blocks: its load starts then (4 tokens, 1.004 ms), and it
	// runs alone after a's end (223.1 ms): its first token at 233.2 ms.
	// With prefix caching off (no hits on either worker; b's prefill
	// ends at 220 ms) its 7 blocks fit only at a's end: its load (1.1
	// ms) ends at 224.2 ms, its first token at 234.3 ms.
	for _, c := range []struct {
		prefix bool
		ttft   float64
	}{{true, 0.0332}, {false, 0.0343}} {
		prefix := c.prefix
		out, _, _ = replay(t, Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{EnablePrefixCaching: &prefix}}, cost, 9,
			[]*trace.Request{withHashes(req("a", 0, 100, 20), 16, ids...), withHashes(req("b", 200*ms, 100, 2), 16, ids...)})
		if b := out["b"]; !pdNear(b.TTFTSec.V, c.ttft) {
			t.Errorf("b beside a on 9 blocks, prefix caching %v: TTFT %v, want %v", prefix, b.TTFTSec.V, c.ttft)
		}
	}
	off := false
	out, _, _ = replay(t, Config{Workers: 2, Disaggregation: pdConfig(1), Scheduler: SchedulerConfig{EnablePrefixCaching: &off}}, cost, 100, reqs())
	if b := out["b"]; !pdNear(b.KVFetchSec.V, 0.0011) || !pdNear(b.TTFTSec.V, 0.0312) {
		t.Errorf("prefix caching off: b's KV fetch %v, TTFT %v; want 0.0011, 0.0312", b.KVFetchSec.V, b.TTFTSec.V)
	}
}

// Behind vLLM's proxy the decode request passes the decode worker's API
// server before its KV load starts; SGLang's router sends it to both
// servers at once, so no second pass shows. A client that gives up while
// the request is at the decode API server gets a timeout.
func TestDisaggregatedDecodeAPIServer(t *testing.T) {
	t.Parallel()
	cost := linearCost{Base: 10 * ms, PerToken: 100 * time.Microsecond}
	api := ClientConfig{APIServerRequestSec: 0.002}
	// 2 ms at w0's API server, 20 ms of prefill, 2 ms at w1's, 1.1 ms of
	// KV, 10.1 ms for the last prompt token again: 35.2 ms; two more
	// tokens, 10.1 ms each.
	out, _, _ := replay(t, Config{Workers: 2, Disaggregation: pdConfig(1), Client: api}, cost, 100, []*trace.Request{req("a", 0, 100, 3)})
	if a := out["a"]; !pdNear(a.TTFTSec.V, 0.0352) || !pdNear(a.E2ESec.V, 0.0554) || !pdNear(a.KVFetchSec.V, 0.0011) {
		t.Errorf("vLLM: TTFT %v, E2E %v, KV fetch %v; want 0.0352, 0.0554, 0.0011", a.TTFTSec.V, a.E2ESec.V, a.KVFetchSec.V)
	}
	sg := Config{Workers: 2, Disaggregation: pdConfig(1), Client: api, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 1000}}
	out, _, _ = replay(t, sg, cost, 1, []*trace.Request{req("a", 0, 100, 3)})
	if a := out["a"]; !pdNear(a.TTFTSec.V, 0.0231) {
		t.Errorf("SGLang: TTFT %v, want 0.0231", a.TTFTSec.V)
	}
	// a's client gives up at 23 ms, while a is at w1's API server (22
	// to 24 ms): a timeout when the server hands it over, which frees
	// a's 7 blocks on the prefill worker, where b (8 blocks a worker)
	// waits for them, and times out too.
	cfg := Config{Workers: 2, Disaggregation: pdConfig(1), Client: ClientConfig{APIServerRequestSec: 0.002, TimeoutSec: 0.023}}
	out, _, st := replay(t, cfg, cost, 8, []*trace.Request{req("a", 0, 100, 3), req("b", 0, 100, 3)})
	if a, b := out["a"], out["b"]; a.Status != trace.StatusTimeout || b.Status != trace.StatusTimeout || st.TimedOut != 2 {
		t.Errorf("a %s, b %s, %d timed out; want both timeouts", a.Status, b.Status, st.TimedOut)
	}
}
