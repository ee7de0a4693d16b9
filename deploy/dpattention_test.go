package deploy

import (
	"math"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A run recorded with enable_dp_attention is replayed as one worker per
// rank with server_args.py's adjustments (v0.4.0.post1): the default
// chunked_prefill_size 8192 halved, schedule_conservativeness 0.3, no
// overlap scheduler, CUDA graphs up to 96, round-robin dispatch after one
// TokenizerManager for all ranks.
func TestResolveDPAttention(t *testing.T) {
	run := trace.Run{Name: "ds", Source: "sglang-bench", Model: "deepseek-ai/DeepSeek-V2.5-1210", Hardware: "8xH200", TP: 8, Engine: "sglang",
		Extra: map[string]string{"engine_opt.enable_dp_attention": "true", "engine_opt.mem_fraction_static": "0.78"}}
	s, err := Resolve(DefaultCluster(), run, Overrides{Measured: true})
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Config.Scheduler
	switch {
	case !s.Deployment.DPAttention || s.Deployment.TP != 8:
		t.Errorf("deployment: DPAttention %v, TP %d", s.Deployment.DPAttention, s.Deployment.TP)
	case s.Config.Workers != 8 || s.Config.Router != replay.RouterRoundRobin:
		t.Errorf("workers %d, router %s; want 8, round_robin", s.Config.Workers, s.Config.Router)
	case sc.ChunkedPrefillSize != 4096 || sc.ScheduleConservativeness != 0.3 || sc.OverlapSchedule:
		t.Errorf("scheduler: chunked_prefill_size %d, schedule_conservativeness %g, overlap %v", sc.ChunkedPrefillSize, sc.ScheduleConservativeness, sc.OverlapSchedule)
	case s.Deployment.CUDAGraphMaxBS != 96:
		t.Errorf("cuda_graph_max_bs %d, want 96", s.Deployment.CUDAGraphMaxBS)
	case s.Config.Client.APIServerRanks != 8 || !strings.Contains(strings.Join(s.Notes, "\n"), "one API server (TokenizerManager) per 8 ranks"):
		t.Errorf("api_server_ranks %d, want the 8 ranks behind one TokenizerManager, said so", s.Config.Client.APIServerRanks)
	case !strings.Contains(s.Header(), "DP-attention"):
		t.Errorf("header %q does not say DP attention", s.Header())
	}
	// Per rank: the bf16 weights with the attention, embedding and LM head
	// whole leave 593,791 tokens at 0.78 (the fp8 checkpoint 1,131,476:
	// testdata/datacrunch_deepseek.md).
	if s.KVTokens != 593791 {
		t.Errorf("KV tokens per rank %d, want 593791", s.KVTokens)
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "warning: this workload does not give every rank") {
		t.Errorf("a run with no recorded workload: no warning that the ranks' loads may differ:\n%s", strings.Join(s.Notes, "\n"))
	}
	run.Workload = &trace.Workload{Dataset: "random", InputLen: 1, OutputLen: 512, RangeRatio: 1, RequestRate: trace.Rate(math.Inf(1)), NumPrompts: 10000}
	if s, err = Resolve(DefaultCluster(), run, Overrides{Measured: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(s.Notes, "\n"), "warning") {
		t.Errorf("identical requests sent at once: a warning:\n%s", strings.Join(s.Notes, "\n"))
	}
	run.Engine = "vllm"
	if _, err := Resolve(DefaultCluster(), run, Overrides{Measured: true}); err == nil || !strings.Contains(err.Error(), "enable_dp_attention") {
		t.Errorf("dp attention under vLLM: err = %v", err)
	}
}
