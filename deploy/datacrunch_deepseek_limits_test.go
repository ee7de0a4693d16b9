package deploy

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

var deepseekLimits = flag.Bool("deepseeklimits", false, "rewrite testdata/datacrunch_deepseek_limits.md")

// deepseekOtherSGLang are the other SGLang runs of the same DataCrunch
// repository (same H200s, same server build era, same client): what they
// could tell of a front-end cost.
var deepseekOtherSGLang = []string{
	"formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_offline_output.jsonl",
	"formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl",
	"formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_405b_online_output.jsonl",
}

// TestDataCrunchDeepSeekLimits works out, from the DataCrunch DeepSeek
// run's summary and the deployments both launch lines resolve to, which
// of SGLang v0.4.0.post1's limits could hold the run to what it reports,
// and checks the arithmetic's conclusions (testdata/
// datacrunch_deepseek_limits.md): no admission limit of the engine is
// near the ~577 requests a rank that Little's law suggests, that reading
// contradicts the run's own TTFT and E2E, and what the step model and the
// front end would have to cost instead. It fits nothing.
func TestDataCrunchDeepSeekLimits(t *testing.T) {
	run, _, _, _ := deepseekSetup(t, "fp8")
	var r struct {
		Completed       float64 `json:"completed"`
		OutputLen       float64 `json:"random_output_len"`
		InputLen        float64 `json:"random_input_len"`
		Duration        float64 `json:"duration"`
		Throughput      float64 `json:"output_throughput"`
		OutputTokens    float64 `json:"total_output_tokens"`
		Retokenized     float64 `json:"total_output_tokens_retokenized"`
		MeanE2E, MedE2E float64
	}
	if err := json.Unmarshal(run.Reported, &r); err != nil {
		t.Fatal(err)
	}
	rep := analyze.ReportedStats(run)
	r.MeanE2E, r.MedE2E = rep["e2el"]["mean"], rep["e2el"]["p50"]
	ttft, itl := rep["ttft"]["p50"], rep["itl"]["p50"]
	if !(r.Completed > 0 && r.OutputLen > 1 && r.Duration > r.MeanE2E && ttft > 0 && itl > 0) {
		t.Fatalf("the run's summary lacks what this needs: %s", run.Reported)
	}
	const ranks = 8 // --tp 8 --enable-dp-attention: dp_size = tp_size
	perRank := int(r.Completed) / ranks
	gaps := r.OutputLen - 1

	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# DataCrunch DeepSeek-V2, 8×H200, SGLang DP attention: what its summary says of its limits\n\n")
	p("Arithmetic on the run's reported summary and on the deployments both launch lines resolve to (SGLang v0.4.0.post1's\n")
	p("rules, as `replay` and `model` implement them); nothing is fitted. Regenerate: go test ./deploy -run TestDataCrunchDeepSeekLimits -deepseeklimits\n\n")
	p("The run: %.0f requests of %.0f prompt token(s) and %.0f output tokens, all sent at once; duration D = %.1f s; mean E2E %.1f s,\n",
		r.Completed, r.InputLen, r.OutputLen, r.Duration, r.MeanE2E)
	p("median E2E %.1f s, median TTFT %.2f s, median ITL %.1f ms, output throughput %.0f tok/s. bench_serving (v0.4.x,\n",
		r.MedE2E, ttft, 1e3*itl, r.Throughput)
	p("`async_request_sglang_generate`) starts a request's clock before it opens a new aiohttp session (a new TCP connection per\n")
	p("request), takes one ITL per streamed chunk that carries text (SGLang's `/generate` streams the whole text so far in each\n")
	p("chunk), and reports throughput as the requested output lengths over D (%.0f; retokenized %.0f).\n\n", r.OutputTokens, r.Retokenized)

	// 1. What the summary implies.
	inflight := r.Completed * r.MeanE2E / r.Duration
	const x = 300.0 // s: an E2E threshold for the bound below
	shortAtMost := (r.Duration - r.MeanE2E) / (r.Duration - x)
	longAtLeast := 1 - shortAtMost
	both := longAtLeast - 0.5
	period := (x - ttft) / gaps
	little := r.Throughput * itl / ranks
	runToEnd := gaps * itl
	wait := x - runToEnd
	p("## What the summary implies\n\n")
	p("1. In flight at the client (Little's law): %.0f × %.1f s / %.1f s = %.0f requests on average, %.1f %% of them.\n",
		r.Completed, r.MeanE2E, r.Duration, inflight, 100*inflight/r.Completed)
	p("2. No request outlasts the run, so at most (D − mean E2E) / (D − %.0f s) = %.1f %% end within %.0f s: at least %.1f %% take\n",
		x, 100*shortAtMost, x, 100*longAtLeast)
	p("   %.0f s or more. Half have a TTFT of at most %.2f s, so at least %.1f %% both start within %.2f s and take %.0f s or more:\n",
		x, ttft, 100*both, ttft, x)
	p("   %.0f tokens in %.1f s or more, %.1f ms a token on average, %.2f × the median ITL.\n", gaps, x-ttft, 1e3*period, period/itl)
	p("3. Read as Little's law at the server (every running request gets a token a step, the median gap is the step):\n")
	p("   %.0f tok/s × %.1f ms / %d ranks = %.0f running a rank. Run to completion, such a request decodes in %.0f × %.1f ms = %.1f s,\n",
		r.Throughput, 1e3*itl, ranks, little, gaps, 1e3*itl, runToEnd)
	p("   so the %.1f %% that take %.0f s or more would have waited %.1f s or more for their first token; the median TTFT is %.2f s.\n",
		100*longAtLeast, x, wait, ttft)
	p("   So running requests were not served a token every %.1f ms: at least %.1f %% of all were served at %.0f ms a token or\n",
		1e3*itl, 100*both, 1e3*period)
	p("   slower on average while half of all chunk gaps were %.1f ms or less. The gaps are irregular, and ~%.0f a rank, Little's\n",
		1e3*itl, little)
	p("   law at the median gap, is not the number running.\n\n")
	if !(longAtLeast > 0.5 && both > 0 && wait > 2*ttft && period > itl) {
		t.Errorf("the summary no longer contradicts ~%.0f running a rank: %.3f take ≥ %.0f s, %.3f both, wait %.1f s, period %.3f s",
			little, longAtLeast, x, both, wait, period)
	}

	// 2. The engine's limits on each launch line.
	p("## SGLang v0.4.0.post1's limits on each launch line\n\n")
	p("| | fp8 | bf16 |\n|---|---:|---:|\n")
	type line struct{ maxRun, kv, hold, step, expert, layers float64 }
	var lines []line
	meanCtx := int64(math.Round(r.InputLen + gaps/2)) // a decode's context, averaged over its life
	for _, cand := range deepseekCandidates {
		_, s, _, _ := deepseekSetup(t, cand.name)
		eff := s.Config.Effective(s.KVBlocks)
		per := r.InputLen + r.OutputLen // a request's tokens at its end (the BOS aside)
		ctx := int64(perRank) * meanCtx
		step, ok := s.Deployment.DecodeStepTime(perRank, ctx)
		if !ok {
			t.Fatalf("%s: no decode-sum form", cand.name)
		}
		var batch []int64
		for range perRank {
			batch = append(batch, meanCtx)
		}
		terms := s.Deployment.Terms(&model.Batch{Decode: batch})
		lines = append(lines, line{float64(eff.Scheduler.MaxRunningRequests), float64(s.KVTokens),
			math.Floor(float64(s.KVTokens) / per), step.Seconds(), terms.ExpertSec, float64(s.Deployment.LLM.NumLayers)})
		if eff.Scheduler.MaxRunningRequests < perRank {
			t.Errorf("%s: max_running_requests %d < %d a rank: the table's (a) is wrong", cand.name, eff.Scheduler.MaxRunningRequests, perRank)
		}
		if !eff.Scheduler.IgnoreEOS || !eff.Scheduler.DisableRadixCache {
			t.Errorf("%s: admission is not add_one_req_ignore_eos (ignore_eos %v, radix cache off %v)", cand.name, eff.Scheduler.IgnoreEOS, eff.Scheduler.DisableRadixCache)
		}
	}
	row := func(what string, f func(l line) string) {
		p("| %s | %s | %s |\n", what, f(lines[0]), f(lines[1]))
	}
	row("(a) max_running_requests a rank (model_runner.init_memory_pool, tp_worker)", func(l line) string { return fmt.Sprintf("%.0f", l.maxRun) })
	row("(a) KV pool a rank, tokens", func(l line) string { return fmt.Sprintf("%.0f", l.kv) })
	row(fmt.Sprintf("(a) requests it holds to their end (%.0f tokens each; add_one_req_ignore_eos)", r.InputLen+r.OutputLen),
		func(l line) string { return fmt.Sprintf("%.0f", l.hold) })
	row(fmt.Sprintf("(c) decode step priced at %d a rank, mean context %d (uncalibrated), ms", perRank, meanCtx),
		func(l line) string { return fmt.Sprintf("%.1f", 1e3*l.step) })
	row(fmt.Sprintf("(c) %.0f ms a token is that step times", 1e3*period), func(l line) string { return fmt.Sprintf("%.1f", period/l.step) })
	row("(c) eager launches would have to add beyond it, a layer, ms", func(l line) string { return fmt.Sprintf("%.2f", 1e3*(period-l.step)/l.layers) })
	row("(d) routed experts' GEMMs at peak, ms a step", func(l line) string { return fmt.Sprintf("%.1f", 1e3*l.expert) })
	row(fmt.Sprintf("(d) their efficiency if they alone filled %.0f ms, %% of peak", 1e3*period),
		func(l line) string { return fmt.Sprintf("%.1f", 100*l.expert/period) })
	p("\n")

	// 3. The front end, and whether the other SGLang runs could measure it:
	// a serial cost c a token at ρ = throughput·c of its capacity delays a
	// chunk by about c/(1−ρ), against that run's median ITL; a cost a
	// request delays the median request of a burst of n by n/2 of it.
	perRequest := ttft / (r.Completed / 2)
	perToken := 1 / r.Throughput
	var worstITL, worstTTFT, busiest float64
	var worstITLRun string
	var bursts []string
	for _, rel := range deepseekOtherSGLang {
		runs, _, err := ingest.Files([]string{shareddata.Path(t, rel)}, ingest.Options{}, func(*trace.Request) error { return nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range runs {
			var v struct {
				Throughput float64 `json:"output_throughput"`
				Completed  float64 `json:"completed"`
			}
			if err := json.Unmarshal(o.Reported, &v); err != nil {
				t.Fatal(err)
			}
			rs := analyze.ReportedStats(o)
			rho := v.Throughput * perToken
			busiest = max(busiest, rho)
			if rho >= 1 {
				t.Fatalf("%s streams %.0f tok/s: a front end at %.1f µs a token would bind there", o.Name, v.Throughput, 1e6*perToken)
			}
			if f := perToken / (1 - rho) / rs["itl"]["p50"]; f > worstITL {
				worstITL, worstITLRun = f, filepath.Base(o.Name)
			}
			if w := o.Workload; w != nil && math.IsInf(float64(w.RequestRate), 1) {
				f := v.Completed / 2 * perRequest / rs["ttft"]["p50"]
				bursts = append(bursts, fmt.Sprintf("| %s | %.0f | %.1f | %.1f | %.1f |",
					strings.TrimPrefix(filepath.Base(o.Name), "datacrunch-research_h200-benchmarks_"), v.Completed,
					rs["ttft"]["p50"], v.Completed/2*perRequest, 100*f))
				worstTTFT = max(worstTTFT, f)
			}
		}
	}
	p("(b) One TokenizerManager (the HTTP server, tokenisation, one ReqState each), one data-parallel controller (round-robin\n")
	p("dispatch) and one detokenizer for all %d ranks (two batch_decode calls a rank's step, the whole text so far for each\n", ranks)
	p("request), all Python; `_wait_one_response` yields only the newest output, so a stream that falls behind sends several\n")
	p("tokens as one chunk. If they paced the run: %.2f s / %.0f = %.2f ms a request (the median request reached its scheduler\n",
		ttft, r.Completed/2, 1e3*perRequest)
	p("after half of them), 1 / %.0f tok/s = %.1f µs a token. Could the other SGLang runs of these files (DataCrunch's 70B and\n",
		r.Throughput, 1e6*perToken)
	p("405B, the same client) measure either? A token's cost would keep the front end at most %.0f %% busy there and add to a\n",
		100*busiest)
	p("chunk about c / (1 − busy), at most %.2f %% of that run's median ITL (%s): no. A request's cost\n",
		100*worstITL, strings.TrimPrefix(worstITLRun, "datacrunch-research_h200-benchmarks_"))
	p("would delay the median request of each burst (rate inf) by half the burst times it:\n\n")
	p("| run | requests | median TTFT, s | delay at %.2f ms a request, s | %% of the TTFT |\n|---|---:|---:|---:|---:|\n", 1e3*perRequest)
	p("%s\n\n", strings.Join(bursts, "\n"))
	p("Effects of the size of those runs' calibrated TTFT errors (README, the DataCrunch 70B section), whose prefill queues set\n")
	p("the rest: they do not determine a request's cost either.\n\n")
	p("(e) The client, one asyncio process, parses %.0f chunks a second, each the whole text so far: a serial cost per chunk that\n", r.Throughput)
	p("no file measures either.\n\n")
	if worstITL > 0.02 || worstTTFT > 0.25 {
		t.Errorf("another SGLang run could measure the front end: %.1f %% of a median ITL (%s), %.1f %% of a median TTFT",
			100*worstITL, worstITLRun, 100*worstTTFT)
	}

	p("## Verdict\n\n")
	p("No admission limit of SGLang v0.4.0.post1 is near %.0f a rank ((a): the request pool holds all %d a rank, the KV pool all\n", little, perRank)
	p("of them (fp8) or all but %.0f (bf16), and add_one_req_ignore_eos admits only what can run to its end, so nothing is\n",
		float64(perRank)-lines[1].hold)
	p("retracted), and the summary itself rules out ~%.0f running a rank, each served every %.1f ms (2, 3). What remains: at\n",
		little, 1e3*itl)
	p("least %.1f %% of the requests were served at %.0f ms a token or slower on average, against a decode step priced at\n", 100*both, 1e3*period)
	p("%.0f–%.0f ms with all %d a rank running (an upper bound: a smaller batch is cheaper). Eager launches of %.1f–%.1f ms a\n",
		1e3*lines[0].step, 1e3*lines[1].step, perRank, 1e3*(period-lines[1].step)/lines[1].layers, 1e3*(period-lines[0].step)/lines[0].layers)
	p("layer, routed experts at %.1f–%.1f %% of peak, a Python front end at ~%.0f µs a token, or a client at as much, could each\n",
		100*lines[0].expert/period, 100*lines[1].expert/period, 1e6*perToken)
	p("account for it alone, and no run in these files measures any of them. This run's limit cannot be determined from its\n")
	p("summary; a server log (SGLang's \"Decode batch. #running-req … gen throughput\" lines) or the per-request ITL lists\n")
	p("would determine it.\n")

	t.Log("\n" + b.String())
	golden.CheckOrWrite(t, filepath.Join("testdata", "datacrunch_deepseek_limits.md"), []byte(b.String()), *deepseekLimits)
}
