package analyze

import (
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The statistics ReportedFields reads from AIPerf's and llmperf's own
// summaries of the real runs are opaltrace's, computed over the same runs'
// per-request files with vLLM's rules: so a summary read alone is compared
// with a replay on the metrics it names, meaning what they mean in vLLM.
// (llmperf's summary is compared at 1e-9: its quantiles are pandas',
// linear like numpy's.)
func TestReportedFieldsMatchPerRequest(t *testing.T) {
	for _, c := range []struct {
		name, perRequest, summary string
		metrics                   []string
		stats                     []string
		counts                    map[string]float64
	}{
		{"aiperf", "formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export.jsonl",
			"formats/aiperf/ai-dynamo_aiperf_examples_artifacts_run1_profile_export_aiperf.json",
			[]string{"ttft", "tpot", "itl", "e2el"}, []string{"mean", "p1", "p5", "p25", "p50", "p75", "p90", "p95", "p99"},
			map[string]float64{"completed": 89, "failed": 11}},
		{"llmperf", "formats/llmperf/ray-project_llmperf_vllm_Yi-1-5-34B-Chat_550_150_c16_individual_responses.json",
			"formats/llmperf/ray-project_llmperf_vllm_Yi-1-5-34B-Chat_550_150_c16_summary.json",
			[]string{"ttft", "e2el"}, []string{"mean", "p25", "p50", "p75", "p90", "p95", "p99"},
			map[string]float64{"completed": 112, "failed": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs, reqs := loadFormat(t, shareddata.Path(t, c.perRequest))
			s := Summarize(runs[0], reqs)
			lone, none := loadFormat(t, shareddata.Path(t, c.summary))
			if len(lone) != 1 || len(none) != 0 {
				t.Fatalf("summary read as %d runs, %d requests", len(lone), len(none))
			}
			rep := ReportedStats(lone[0])
			dists := map[string]Dist{"ttft": s.TTFT, "tpot": s.TPOT, "itl": s.ITL, "e2el": s.E2E}
			checked := 0
			for _, m := range c.metrics {
				d := dists[m]
				for _, st := range c.stats {
					want := d.Mean
					if st != "mean" {
						want = d.Percentile(map[string]float64{"p1": 1, "p5": 5, "p25": 25, "p50": 50, "p75": 75, "p90": 90, "p95": 95, "p99": 99}[st])
					}
					got, ok := rep[m][st]
					if !ok {
						t.Errorf("%s %s: not read from the summary", m, st)
						continue
					}
					checked++
					if !near(got, want) {
						t.Errorf("%s %s: summary %v, per-request %v", m, st, got, want)
					}
				}
			}
			if len(rep) != len(c.metrics) {
				t.Errorf("metrics read: %v, want only %v", rep, c.metrics)
			}
			fields := ReportedFields(lone[0])
			for k, want := range c.counts {
				if fields[k] != want {
					t.Errorf("%s = %v, want %v", k, fields[k], want)
				}
			}
			if checked != len(c.metrics)*len(c.stats) {
				t.Errorf("checked %d", checked)
			}
		})
	}
}

// inference-perf's stage report: the distributions it computes as vLLM
// does, in seconds, read as vLLM's keys in milliseconds; its
// inter_token_latency (the gaps between re-tokenized tokens) is not read.
func TestReportedFieldsInferencePerf(t *testing.T) {
	runs, reqs := loadFormat(t, shareddata.Path(t, "formats/inference_perf/kubernetes-sigs_inference-perf_kubecon-na-2025_vllm_stage_3_lifecycle_metrics.json"))
	if len(runs) != 1 || len(reqs) != 0 {
		t.Fatalf("%d runs, %d requests", len(runs), len(reqs))
	}
	f := ReportedFields(runs[0])
	// The file's own values (successes.latency.time_to_first_token.median,
	// .time_per_output_token.p99, .request_latency.mean, successes.count).
	for k, want := range map[string]float64{
		"median_ttft_ms": 0.04451845702715218 * 1000, "p99_tpot_ms": 0.009620544096444148 * 1000,
		"mean_e2el_ms": 1.0212724370473967 * 1000, "completed": 5531, "failed": 0,
		"request_throughput": 91.35730480202015,
	} {
		if g, ok := f[k].(float64); !ok || !near(g, want) {
			t.Errorf("%s = %v, want %v", k, f[k], want)
		}
	}
	for k := range f {
		if len(k) > 7 && k[len(k)-7:] == "_itl_ms" {
			t.Errorf("%s read: inference-perf's ITL is not vLLM's", k)
		}
	}
	if ReportedFields(trace.Run{Source: "inference-perf"}) != nil {
		t.Error("a run that reported nothing has fields")
	}
}
