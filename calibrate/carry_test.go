package calibrate

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// TestCarriedCacheMakesPrefillsHits: a run sent all at once after a run
// of the same prompts finds them cached (vLLM's prefix cache), so its
// TTFT falls far below the cold replay's; only its own requests are
// measured; and a run replayed after nothing is unchanged.
func TestCarriedCacheMakesPrefillsHits(t *testing.T) {
	dep := deployment(t, "llama-3.1-8b")
	kv, err := dep.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	prev, run, cm := sweepPair(dep, kv/16)

	cold, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	run.After = prev
	warm, err := simulate(run, cm)
	if err != nil {
		t.Fatal(err)
	}
	if len(warm[MetricE2E]) != 100 || len(cold[MetricE2E]) != 100 {
		t.Fatalf("measured %d carried and %d cold requests, want 100 each", len(warm[MetricE2E]), len(cold[MetricE2E]))
	}
	c, w := quantileOf(cold[MetricTTFT], 50), quantileOf(warm[MetricTTFT], 50)
	if !(w < c/2) {
		t.Errorf("median TTFT %.4g s carried, %.4g s cold: the carried cache did not serve the prompts", w, c)
	}
	t.Logf("median TTFT: cold %.4g s, carried %.4g s", c, w)
}

// sweepPair returns two runs of a sweep on dep's workers of blocks KV
// blocks each: 100 prompts sent at 4 a second, then the same prompts all
// at once, and the coefficients to replay them with. The second is not
// yet replayed after the first (After).
func sweepPair(dep *model.Deployment, blocks int64) (prev, run *ReplayRun, cm *CostModel) {
	prev = &ReplayRun{Run: trace.Run{Name: "f#1"}, Deployment: dep, Config: replay.DefaultConfig(), KVBlocks: blocks,
		Inputs: poissonRun(100, 4, 1)}
	var atOnce replay.Requests
	for _, r := range poissonRun(100, 4, 1) {
		r.Arrival = trace.Opt[trace.Time]{}
		atOnce = append(atOnce, r)
	}
	cfg := replay.DefaultConfig()
	cfg.Workload.Mode, cfg.Workload.Clients = replay.ModeClosed, 100
	run = &ReplayRun{Run: trace.Run{Name: "f#2"}, Deployment: dep, Config: cfg, KVBlocks: blocks, Inputs: atOnce}
	return prev, run, candidate{CoefMFU: 0.4, CoefBandwidthEff: 0.6, CoefStepOverhead: 3e-4}.costModel()
}

// TestSameSession: the surajssd layout (same prompts, vLLM dates 13 s
// apart) is one session; another prompt, a long pause, overlapping runs
// or missing dates are not.
func TestSameSession(t *testing.T) {
	wl := &trace.Workload{Dataset: "sharegpt", NumPrompts: 2}
	run := func(date string, dur float64) trace.Run {
		return trace.Run{Model: "m", Engine: "vllm", Hardware: "a100", TP: 8, Workload: wl,
			Extra: map[string]string{"date": date}, DurationSec: trace.Some(dur)}
	}
	reqs := func(lens ...int64) replay.Requests {
		var rs replay.Requests
		for _, l := range lens {
			rs = append(rs, &trace.Request{InputTokens: trace.Some(l)})
		}
		return rs
	}
	a := run("20250414-141505", 205)
	for _, tc := range []struct {
		name string
		b    trace.Run
		rb   replay.Requests
		want string // "" when one session
	}{
		{"next run", run("20250414-141621", 63), reqs(10, 20), ""},
		{"other prompt", run("20250414-141621", 63), reqs(10, 21), "request 1 has another prompt length"},
		{"long pause", run("20250414-143621", 63), reqs(10, 20), "not within"},
		{"overlap", run("20250414-141621", 100), reqs(10, 20), "not within"},
		{"no date", run("", 63), reqs(10, 20), "no dates"},
		{"summary only", run("20250414-141621", 63), nil, "no per-request prompt lengths"},
	} {
		ok, why := SameSession(a, tc.b, reqs(10, 20), tc.rb)
		if ok != (tc.want == "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s: %v %q, want %q", tc.name, ok, why, tc.want)
		}
	}
}
