package replay

import (
	"math/bits"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// llm-d's precise prefix scorer: a worker's leading keys held, by its KV
// events, over the prompt's whole keys; the weights of llm-d's precise
// deployment (2, 1, 1).
func TestLLMDPrecise(t *testing.T) {
	rc := RouterConfig{PrefixScorer: LLMDPrecise}
	cfg := Config{Workers: 2, Router: RouterLLMD, RouterConfig: rc}.Effective(1000)
	if got := cfg.RouterConfig; *got.PrefixWeight != 2 || *got.QueueWeight != 1 || *got.KVUsageWeight != 1 || got.PrefixBlockTokens != 16 {
		t.Errorf("precise defaults: weights %v %v %v, key block %d; want 2 1 1, 16", *got.PrefixWeight, *got.QueueWeight, *got.KVUsageWeight, got.PrefixBlockTokens)
	}
	if got := (Config{Workers: 2, Router: RouterLLMD}).Effective(1000).RouterConfig; got.PrefixScorer != LLMDApproximate || *got.PrefixWeight != 3 {
		t.Errorf("default scorer %q, prefix weight %v; want approximate, 3", got.PrefixScorer, *got.PrefixWeight)
	}
	f := newFake(2)
	r := build(t, RouterLLMD, 2, rc).(*llmdPrecise)
	r.kvStored(1, []int64{1, 2, 3, 4}, 32)
	r.kvStored(0, []int64{1}, 32)
	route := func(q *Routed, want int, score float64, why string) {
		t.Helper()
		if w := r.Route(q, f); (want >= 0 && w != want) || q.Score != score {
			t.Errorf("%v went to %d (score %v), want %d (%v): %s", q.HashIDs, w, q.Score, want, score, why)
		}
	}
	// Six keys of 16 tokens in 100 (the last 4 tokens dropped); worker 1
	// holds the three trace blocks of 32 the prompt starts with: 96
	// tokens, all six keys. Worker 0 holds 32 tokens, two keys.
	route(&Routed{Prompt: 100, HashIDs: []int64{1, 2, 3, 9}, BlockSize: 32}, 1, 2*1+1+1, "worker 1: 2·6/6 + 1 + 1; worker 0: 2·2/6 + 2")
	// The router's own choices index nothing: a new prompt has no match
	// anywhere, then or after.
	for range 3 {
		route(&Routed{Prompt: 100, HashIDs: []int64{7, 8}, BlockSize: 32}, -1, 2, "no worker holds key 7: 1 + 1 each")
	}
	// A match past the prompt's end counts its keys only: 60 tokens,
	// three keys, all in the trace blocks worker 1 holds (64 tokens);
	// worker 0 holds two.
	route(&Routed{Prompt: 60, HashIDs: []int64{1, 2}, BlockSize: 32}, 1, 4, "three of three keys")
	// Shorter than a key: no prefix score anywhere.
	route(&Routed{Prompt: 10, HashIDs: []int64{1}, BlockSize: 32}, -1, 2, "no whole key")
	// The queue and KV scorers weigh half as much as the prefix: worker
	// 1, queued and a fifth full, still wins on its whole prefix (2 + 0 +
	// 0.8 against 2·2/6 + 1 + 1).
	f.loads[1].Waiting, f.loads[1].FreeBlocks = 10, 80
	route(&Routed{Prompt: 100, HashIDs: []int64{1, 2, 3, 9}, BlockSize: 32}, 1, 2.8, "prefix 2·1, queue 0, KV 0.8")
	f.loads[1].FreeBlocks = 0
	route(&Routed{Prompt: 100, HashIDs: []int64{1, 2, 3, 9}, BlockSize: 32}, 0, 2*2.0/6+2, "full and queued: worker 0, 2·2/6 + 1 + 1, beats 2")
	f.loads[1].Waiting, f.loads[1].FreeBlocks = 0, 100

	// Trace blocks of 24 tokens, keys of 16: two trace blocks held are
	// 48 tokens, three keys of the prompt's five.
	r = build(t, RouterLLMD, 2, rc).(*llmdPrecise)
	r.kvStored(0, []int64{5, 6}, 24)
	route(&Routed{Prompt: 80, HashIDs: []int64{5, 6, 7, 8}, BlockSize: 24}, 0, 2*3.0/5+2, "3 of 5 keys")
	// … and past the prompt's end, its keys only: 48 tokens held of a
	// 40-token prompt, two keys of two.
	route(&Routed{Prompt: 40, HashIDs: []int64{5, 6}, BlockSize: 24}, 0, 2+1+1, "2 of 2 keys")
}

// In a replay the precise scorer hears the workers' KV events: a
// conversation's later turns go where its earlier turns' prompts were
// computed, and more prompt tokens hit than under round-robin.
func TestLLMDPreciseReplay(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:3000]
	cost, blocks := llama8BOnH100(t)
	hit := map[string]float64{}
	for _, rc := range []RouterConfig{{}, {PrefixScorer: LLMDPrecise}} {
		name := RouterLLMD + " " + rc.PrefixScorer
		router := RouterLLMD
		if rc.PrefixScorer == "" {
			router, name = RouterRoundRobin, RouterRoundRobin
		}
		st, err := Run(Config{Workers: 8, Router: router, RouterConfig: rc}, cost, blocks, reqs, func(*trace.Request) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed != len(reqs) {
			t.Errorf("%s: %d of %d completed", name, st.Completed, len(reqs))
		}
		hit[name] = float64(st.CachedTokens) / float64(st.PromptTokens)
	}
	if p, rr := hit[RouterLLMD+" "+LLMDPrecise], hit[RouterRoundRobin]; !(p > 2*rr) {
		t.Errorf("hit rate: precise %.4f, round-robin %.4f; want more than twice", p, rr)
	}
	t.Log(hit)
	// Workers that start and stop (their index parts dropped), and a
	// disaggregated cluster (the prefill pool routed): every request
	// served.
	precise := RouterConfig{PrefixScorer: LLMDPrecise}
	for name, cfg := range map[string]Config{
		"autoscaled":     {Workers: 1, Router: RouterLLMD, RouterConfig: precise, Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 2, MaxReplicas: 4, SyncPeriodSec: 1, ScaleDownStabilizationSec: ptr(10.0)}},
		"disaggregated":  {Workers: 6, Router: RouterLLMD, RouterConfig: precise, Disaggregation: DisaggregationConfig{PrefillWorkers: 2, KVBytesPerToken: 131072, TransferGBps: 40}},
		"view 2 s stale": {Workers: 8, Router: RouterLLMD, RouterConfig: RouterConfig{PrefixScorer: LLMDPrecise, ViewIntervalSec: 2}},
	} {
		st, err := Run(cfg, cost, blocks, reqs[:1500], func(*trace.Request) error { return nil })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Completed != 1500 || st.CachedTokens == 0 {
			t.Errorf("%s: %d of 1500 completed, %d tokens cached", name, st.Completed, st.CachedTokens)
		}
	}
}

// What llm-d's bound of ten pods a key (not modelled) would change: on the
// Mooncake conversation trace with 16 workers, nearly every prompt starts
// with a trace block that more than ten workers hold when it is routed
// (the figure routerllmdprecise.go's doc gives).
func TestLLMDPreciseKeysOverTenPods(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(t)
	over := 0
	routed := func(e *engine, q *Routed, _ int) {
		x := e.router.(*llmdPrecise).llm.index
		if len(q.HashIDs) == 0 {
			return
		}
		if s, ok := x.slots.get(q.HashIDs[0]); ok && int(s) < len(x.holders16) && bits.OnesCount16(x.holders16[s]) > 10 {
			over++
		}
	}
	cfg := Config{Workers: 16, Router: RouterLLMD, RouterConfig: RouterConfig{PrefixScorer: LLMDPrecise}}
	if _, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, Options{test: testSwitches{routed: routed}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d prompts start with a trace block more than ten workers hold", over, len(reqs))
	if over != 12005 {
		t.Errorf("%d of %d prompts start with a trace block more than ten workers hold; the doc says 12,005", over, len(reqs))
	}
}
