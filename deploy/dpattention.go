package deploy

import (
	"fmt"
	"math"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// sglangDPCUDAGraphMaxBS and sglangDPConservativeness are what SGLang's
// server_args.py (v0.4.0.post1, __post_init__ under enable_dp_attention)
// does to cuda_graph_max_bs (min with 96) and schedule_conservativeness
// (times 0.3); the same block halves chunked_prefill_size, sets dp_size
// to tp_size and disables the overlap scheduler.
const (
	sglangDPCUDAGraphMaxBS   = 96
	sglangDPConservativeness = 0.3
)

// dpAttention sets up the replay of servers running SGLang with
// --enable-dp-attention: each server's TP GPUs are attention ranks with a
// scheduler, requests and a KV pool each, so each rank is a replay worker
// (workers becomes servers × TP), to which SGLang's data-parallel
// controller dispatches round-robin (load_balance_method's default in
// v0.4.x), and dep prices their steps with DP attention
// (model.Deployment.DPAttention: every rank running the batch priced). The
// scheduler gets server_args.py's adjustments: chunked_prefill_size
// halved, schedule_conservativeness × 0.3, no overlap scheduler, CUDA
// graphs up to 96. It returns the note saying so, with a warning when
// run's workload does not give every rank the same requests at the same
// times (see the Note).
//
// Note: the ranks of a server step together, and the replay's workers
// each step alone. Priced as if every rank ran the same batch, the replay
// is exact when the ranks see the same requests at the same times (a
// round-robin dispatch of identical requests arriving together, as a
// rate-inf bench_serving run of fixed lengths sends them); otherwise a
// rank's step ignores the others' batches (model.Deployment.DPStepTime
// prices them; the engine does not yet step the ranks in lockstep).
func dpAttention(c *Cluster, cfg *replay.Config, dep *model.Deployment, run trace.Run) (string, error) {
	if !dep.DPAttention {
		return "", fmt.Errorf("enable_dp_attention: the deployment was built without it")
	}
	s := &cfg.Scheduler
	servers := cfg.Workers
	sr := dpAttentionRanks(cfg.Disaggregation, dep)
	var prefill int // servers of sr.prefill ranks
	cfg.Workers, prefill = sr.fleet(cfg.Disaggregation, servers)
	if cfg.Workers > MaxWorkers {
		return "", c.bad("workers", c.given["workers"], fmt.Sprint(servers),
			fmt.Sprintf("%d servers of %d DP-attention ranks are more than %d workers", servers, max(sr.decode, sr.prefill), MaxWorkers))
	}
	routed := ""
	if cfg.Router != replay.RouterRoundRobin {
		routed = fmt.Sprintf(" (router %s replaced)", cfg.Router)
		cfg.Router = replay.RouterRoundRobin
	}
	if s.ChunkedPrefillSize > 0 {
		s.ChunkedPrefillSize /= 2
	}
	s.ScheduleConservativeness = max(s.ScheduleConservativeness, 0)
	if s.ScheduleConservativeness == 0 {
		s.ScheduleConservativeness = 1
	}
	s.ScheduleConservativeness *= sglangDPConservativeness
	s.OverlapSchedule = false
	if cfg.Client.APIServerRanks == 0 {
		// One TokenizerManager takes a server's requests before its
		// data-parallel controller dispatches them to the ranks.
		cfg.Client.APIServerRanks = dep.TP
	}
	if dep.CUDAGraphMaxBS > sglangDPCUDAGraphMaxBS {
		dep.CUDAGraphMaxBS = sglangDPCUDAGraphMaxBS
	}
	if err := c.validate(*cfg); err != nil {
		return "", err
	}
	layout := fmt.Sprintf("%d server(s) × %d DP-attention ranks", servers, dep.TP)
	if sr.apart(prefill) {
		layout = fmt.Sprintf("%d prefill server(s) × %d and %d decode server(s) × %d DP-attention ranks (prefill_tp %d)", prefill, sr.prefill, servers-prefill, sr.decode, sr.prefill)
	}
	note := fmt.Sprintf("enable_dp_attention: %s replayed as %d workers, requests dispatched round-robin%s; "+
		"each rank's step priced with every rank running its batch; chunked_prefill_size %d, schedule_conservativeness %g, "+
		"overlap scheduler off, cuda_graph_max_bs ≤ %d (SGLang v0.4.x server_args.py); %s",
		layout, cfg.Workers, routed, s.ChunkedPrefillSize, s.ScheduleConservativeness, sglangDPCUDAGraphMaxBS,
		sr.apiServersText("API server (TokenizerManager)", cfg.Client, prefill))
	if !sameRequestsAtOnce(run.Workload) {
		note += "; warning: this workload does not give every rank the same requests at the same times " +
			"(only a run of fixed lengths sent all at once does), so a rank's step is priced without the other ranks' batches"
	}
	return note, nil
}

// sameRequestsAtOnce reports whether a recorded benchmark sent requests
// of one input and one output length all at once: dispatched
// round-robin, every rank then runs the same requests at the same times.
func sameRequestsAtOnce(w *trace.Workload) bool {
	return w != nil && w.RangeRatio == 1 && math.IsInf(float64(w.RequestRate), 1) && w.Concurrency == 0 &&
		(w.Dataset == "random" || w.Dataset == "random-ids")
}
