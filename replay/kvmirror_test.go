package replay

import (
	"fmt"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The routers fed by KV events (dynamo_kv, llm_d's precise scorer) keep a
// mirror of each worker's cache from its stored events alone, evicting by
// the worker's capacity, least recently used first, where the real
// indexes hear removal events the engine's caches do not emit. On the
// Mooncake conversation trace, what the mirror says the chosen worker
// holds of a prompt is what the worker's cache then gives it, request by
// request, for all but a few: the mirror stands in for the removals.
func TestKVEventMirrorMatchesEngine(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(t)
	for _, cfg := range []Config{
		{Workers: 16, Router: RouterDynamo},
		// Its index's bound of pods a key above the workers: the
		// mirror alone (the bound drops holders on purpose).
		{Workers: 16, Router: RouterLLMD, RouterConfig: RouterConfig{PrefixScorer: LLMDPrecise, PodCacheSize: 16}},
	} {
		name := cfg.Router + " " + cfg.RouterConfig.PrefixScorer
		believed := make([]int64, len(reqs)) // tokens, whole engine blocks
		routed := func(e *engine, q *Routed, w int) {
			var held int64
			switch r := e.router.(type) {
			case *dynamoKV:
				held = q.Prompt - r.chosen[w]
			case *llmdPrecise:
				bs := e.cfg.Scheduler.BlockSize
				held = min(int64(r.llm.match[w])*q.BlockSize, q.Prompt) / bs * bs
			default:
				held = -1 // not a router this test knows
			}
			believed[q.Index] = held
		}
		index := map[string]int{}
		for i, r := range reqs {
			index[r.RequestID] = i
		}
		var same, over, under int
		var sumBelieved, sumGot int64
		_, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(r *trace.Request) error {
			i, ok := index[r.RequestID]
			if !ok {
				return fmt.Errorf("record of unknown request %q", r.RequestID)
			}
			b, got := believed[i], r.CachedTokens.V
			sumBelieved += b
			sumGot += got
			switch {
			case b == got:
				same++
			case b > got:
				over++
			default:
				under++
			}
			return nil
		}, Options{test: testSwitches{routed: routed}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d of %d requests as the mirror says, %d fewer tokens cached than it says, %d more; tokens %d said, %d cached",
			name, same, len(reqs), over, under, sumBelieved, sumGot)
		if same < len(reqs)*99/100 || sumGot == 0 || float64(sumBelieved) > 1.01*float64(sumGot) || float64(sumBelieved) < 0.99*float64(sumGot) {
			t.Errorf("%s: the mirror is the cache for %d of %d requests (want 99 %%), %d tokens said against %d cached (want within 1 %%)",
				name, same, len(reqs), sumBelieved, sumGot)
		}
	}
}
