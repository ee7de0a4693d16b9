package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A vLLM run recorded with data_parallel_size 2 and enable_expert_parallel
// (the LLMServingSim Qwen3-30B-A3B run's meta.json) is replayed as one
// worker per rank behind vLLM's own front end, the experts over both GPUs;
// a router given by a flag is kept with a note; SGLang's --dp-size ranks
// are dispatched in turn.
func TestResolveDataParallel(t *testing.T) {
	run := trace.Run{Name: "moe", Source: "vllm-engine", Model: "Qwen/Qwen3-30B-A3B-Instruct-2507", Hardware: "RTXPRO6000", TP: 1, DP: 2, Engine: "vllm",
		Extra: map[string]string{"engine_opt.enable_expert_parallel": "true", "engine_opt.max_num_seqs": "128"}}
	s, err := Resolve(DefaultCluster(), run, Overrides{Measured: true})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(s.Notes, "\n")
	switch {
	case s.Deployment.DP != 2 || s.Deployment.EP != 2 || s.Deployment.TP != 1:
		t.Errorf("deployment TP%d DP%d EP%d, want TP1 DP2 EP2", s.Deployment.TP, s.Deployment.DP, s.Deployment.EP)
	case s.Config.Workers != 2 || s.Config.Router != replay.RouterVLLMDP:
		t.Errorf("workers %d, router %s; want 2, vllm_dp", s.Config.Workers, s.Config.Router)
	case s.Config.Scheduler.MaxNumSeqs != 128:
		t.Errorf("max_num_seqs %d per rank, want 128", s.Config.Scheduler.MaxNumSeqs)
	case s.Config.Client.APIServerRanks != 2 || !strings.Contains(notes, "one API server per 2 ranks"):
		t.Errorf("api_server_ranks %d, want the server's 2 ranks behind one API server, said so:\n%s", s.Config.Client.APIServerRanks, notes)
	case !strings.Contains(s.Header(), "2×rtx-pro-6000 (TP1 DP2 EP2), vllm, 2 workers (one per DP rank)"):
		t.Errorf("header %q", s.Header())
	case !strings.Contains(notes, "dp 2: 1 server(s) × 2 data-parallel ranks replayed as 2 workers") ||
		!strings.Contains(notes, "enable_expert_parallel=true"):
		t.Errorf("notes do not say what was done:\n%s", notes)
	}

	// Two servers: four ranks, balanced as one front end's, with a note.
	s, err = Resolve(DefaultCluster(), run, Overrides{Measured: true, Settings: []Setting{{"workers", 2, "--workers"}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Workers != 4 || s.Config.Client.APIServerRanks != 2 || !strings.Contains(strings.Join(s.Notes, "\n"), "the 2 servers' ranks are balanced as one front end's") {
		t.Errorf("two servers: %d workers, notes:\n%s", s.Config.Workers, strings.Join(s.Notes, "\n"))
	}

	// A router given by the user replaces vLLM's balancer, said so.
	s, err = Resolve(DefaultCluster(), run, Overrides{Measured: true, Settings: []Setting{{"router", "least_requests", "--router"}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Router != replay.RouterLeastRequests || !strings.Contains(strings.Join(s.Notes, "\n"), "dispatched by router least_requests (--router) instead of vLLM's front end") {
		t.Errorf("given router: %s, notes:\n%s", s.Config.Router, strings.Join(s.Notes, "\n"))
	}

	// A recorded ep wins over enable_expert_parallel only when given.
	s, err = Resolve(DefaultCluster(), run, Overrides{Measured: true, Settings: []Setting{{"ep", 1, "--ep"}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Deployment.EP != 1 || !strings.Contains(strings.Join(s.Notes, "\n"), "records ep 2 (enable_expert_parallel, TP·DP); replayed with 1 (--ep)") {
		t.Errorf("--ep 1: EP%d, notes:\n%s", s.Deployment.EP, strings.Join(s.Notes, "\n"))
	}

	// SGLang's --dp-size: its controller's round robin.
	sg := trace.Run{Name: "sg", Source: "sglang-bench", Model: "llama-3.1-8b", Hardware: "H100", TP: 1, DP: 4, Engine: "sglang"}
	s, err = Resolve(DefaultCluster(), sg, Overrides{Measured: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Workers != 4 || s.Config.Router != replay.RouterRoundRobin || s.Deployment.EP != 1 {
		t.Errorf("sglang dp 4: %d workers, router %s, EP%d; want 4, round_robin, 1", s.Config.Workers, s.Config.Router, s.Deployment.EP)
	}
}
