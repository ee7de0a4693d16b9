package replay

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

var routerTable = flag.Bool("routertable", false, "replay the Mooncake conversation trace through every router and write testdata/routers_mooncake.md")

// A routerRow is one line of the router table: a router, how stale its
// view is, and what the replay gave.
type routerRow struct {
	router             string
	view               float64 // s
	hit                float64 // cached / prompt tokens
	p50, p99           float64 // TTFT, s
	imbalance          float64 // max / mean of tokens served per worker
	completed, total   int
	events, steps, end int64
}

// TestRouterTableMooncake replays the whole Mooncake conversation trace on
// 16 workers of Llama-3.1-8B on H100 through each router, with an oracle
// view and with a 1 s stale one, and writes the prefix hit rate, TTFT
// p50/p99 and load imbalance of each to testdata/routers_mooncake.md (run
// with -routertable; some 20 replays of 12,031 requests).
func TestRouterTableMooncake(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	cost, blocks := llama8BOnH100(t)
	type run struct {
		router string
		view   float64
		scorer string // llm_d's prefix scorer
	}
	var runs []run
	for _, s := range routers {
		if s.name != RouterRecorded { // the trace names no workers
			runs = append(runs, run{s.name, 0, ""})
		}
		if s.name == RouterLLMD {
			runs = append(runs, run{s.name, 0, LLMDPrecise})
		}
	}
	for _, name := range []string{RouterLLMD, RouterDynamo, RouterMaxPrefix} {
		runs = append(runs, run{name, 1, ""})
	}
	runs = append(runs, run{RouterLLMD, 1, LLMDPrecise}, run{RouterMaxPrefix, 30, ""})
	var rows []routerRow
	for _, rn := range runs {
		cfg := Config{Workers: 16, Router: rn.router, RouterConfig: RouterConfig{ViewIntervalSec: rn.view, PrefixScorer: rn.scorer}}
		var ttft []float64
		served := map[string]int64{}
		st, err := Run(cfg, cost, blocks, reqs, func(r *trace.Request) error {
			if r.Status == trace.StatusOK {
				ttft = append(ttft, r.TTFTSec.V)
				served[r.Worker] += r.InputTokens.V + r.OutputTokens.V
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed != len(reqs) {
			t.Errorf("%s: %d of %d requests completed", rn.router, st.Completed, len(reqs))
		}
		slices.Sort(ttft)
		var sum, most int64
		for _, v := range served {
			sum += v
			most = max(most, v)
		}
		name := rn.router
		if rn.scorer != "" {
			name += " (" + rn.scorer + ")"
		}
		rows = append(rows, routerRow{
			router: name, view: rn.view,
			hit: float64(st.CachedTokens) / float64(st.PromptTokens),
			p50: quantile(ttft, 0.5), p99: quantile(ttft, 0.99),
			imbalance: float64(most) / (float64(sum) / 16),
			completed: st.Completed, total: len(reqs), events: st.Events, steps: st.Steps, end: int64(st.End),
		})
	}
	var b strings.Builder
	b.WriteString("# Routers on the Mooncake conversation trace\n\n")
	b.WriteString("12,031 requests, open loop at the trace's times, 16 workers of Llama-3.1-8B on one H100 each\n")
	b.WriteString("(roofline, vLLM v1 defaults, KV at 0.9 memory utilisation). Hit rate: prefix-cache hit tokens /\n")
	b.WriteString("prompt tokens. Imbalance: the most tokens (prompt + output) one worker served / the mean.\n")
	b.WriteString("View: how stale the router's view of the workers is (0: oracle); vllm_dp reads the workers' counts as vLLM's\n")
	b.WriteString("DP coordinator publishes them, every 100 ms (router_config.stats_update_interval_ms), whatever the view.\n")
	b.WriteString("llm_d's prefix scorer as the Gateway API inference extension's with autoTune: 16-token hash blocks (the\n")
	b.WriteString("workers' KV block), 256 at most (a prompt's first 4,096 tokens), an LRU of each worker's KV blocks;\n")
	b.WriteString("llm_d (precise): its precise-prefix-cache-scorer instead, fed by the workers' KV events, weights 2, 1, 1,\n")
	b.WriteString("its index listing ten workers a key (llm-d's podCacheSize).\n")
	b.WriteString("Regenerate: go test ./replay -run TestRouterTableMooncake -routertable\n\n")
	b.WriteString("| router | view (s) | hit rate | TTFT p50 (s) | TTFT p99 (s) | imbalance | completed |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %g | %.4f | %.3f | %.3f | %.3f | %d/%d |\n", r.router, r.view, r.hit, r.p50, r.p99, r.imbalance, r.completed, r.total)
	}
	t.Log("\n" + b.String())
	// The table is a golden file: every run checks it, the flag (or
	// -update) rewrites it.
	golden.CheckOrWrite(t, filepath.Join("testdata", "routers_mooncake.md"), []byte(b.String()), *routerTable)
}

// quantile is the q-quantile of sorted v by linear interpolation (numpy's
// default).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	p := q * float64(len(v)-1)
	i := int(p)
	if i+1 >= len(v) {
		return v[len(v)-1]
	}
	return v[i] + (p-float64(i))*(v[i+1]-v[i])
}
