package deploy

import (
	"fmt"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// dataParallel sets up the replay of servers running the engine's own data
// parallelism (dp > 1 without SGLang's DP attention): vLLM's
// --data-parallel-size with its internal load balancer starts an engine
// core per rank (v1/engine/core_client.py, DPLBAsyncMPClient; v1/engine/
// core.py, DPEngineCoreProc) and SGLang's --dp-size a scheduler per rank
// (managers/data_parallel_controller.py), each with its own requests, KV
// pool and batch limits, so each rank is a replay worker (workers becomes
// servers × DP). Requests reach the ranks as the engine's front end sends
// them: vLLM's by the least waiting·4 + running of the DP coordinator's
// published counts (router vllm_dp), SGLang's controller in turn
// (load_balance_method round_robin, its default). A router the cluster
// file or a flag gives is kept, with a note. It returns the note saying
// what it did.
//
// Note: with expert parallelism the ranks of a vLLM MoE server step
// together (an idle rank runs a dummy batch); each replay worker steps
// alone, its step priced with the experts' tokens of DP ranks running a
// batch as large as its own (model.Deployment with EP = TP·DP).
func dataParallel(c *Cluster, cfg *replay.Config, dep *model.Deployment) (string, error) {
	sr := dataParallelRanks(cfg.Disaggregation, dep)
	dp := sr.decode
	servers := cfg.Workers
	var prefill int // servers of sr.prefill ranks
	cfg.Workers, prefill = sr.fleet(cfg.Disaggregation, servers)
	if cfg.Workers > MaxWorkers {
		return "", c.bad("workers", c.given["workers"], fmt.Sprint(servers),
			fmt.Sprintf("%d servers of %d data-parallel ranks are more than %d workers", servers, max(dp, sr.prefill), MaxWorkers))
	}
	engine := EngineName(*cfg)
	router, balancer := replay.RouterVLLMDP, "vLLM's front end: the least waiting·4 + running of the DP coordinator's counts, published every 100 ms"
	if engine == replay.EngineSGLang {
		router, balancer = replay.RouterRoundRobin, "SGLang's data-parallel controller: in turn (load_balance_method round_robin)"
	}
	how := fmt.Sprintf("requests dispatched as by %s", balancer)
	if from, ok := c.Given("router"); ok && cfg.Router != router {
		how = fmt.Sprintf("requests dispatched by router %s (%s) instead of %s", cfg.Router, from, balancer)
	} else {
		cfg.Router = router
	}
	if cfg.Client.APIServerRanks == 0 {
		// One front end per server: SGLang's TokenizerManager before its
		// data-parallel controller, vLLM's API server before its engine
		// cores (api_server_count 1, the DP client the router models).
		cfg.Client.APIServerRanks = dp
	}
	how += "; " + sr.apiServersText("API server", cfg.Client, prefill)
	if servers > 1 {
		how += fmt.Sprintf("; the %d servers' ranks are balanced as one front end's (the router in front of the servers is not modelled)", servers)
	}
	if err := c.validate(*cfg); err != nil {
		return "", err
	}
	ep := ""
	if dep.EP > 1 {
		ep = fmt.Sprintf(", experts over all %d GPUs of a server (EP%d)", dep.EP, dep.EP)
	}
	layout := fmt.Sprintf("dp %d: %d server(s) × %d data-parallel ranks", dp, servers, dp)
	if sr.apart(prefill) {
		layout = fmt.Sprintf("dp %d, prefill_dp %d: %d prefill server(s) × %d and %d decode server(s) × %d data-parallel ranks", dp, sr.prefill, prefill, sr.prefill, servers-prefill, dp)
	}
	return fmt.Sprintf("%s replayed as %d workers, one %s scheduler and KV pool each%s; %s",
		layout, cfg.Workers, engine, ep, how), nil
}
