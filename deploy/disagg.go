package deploy

import (
	"fmt"
	"strconv"

	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// disaggregationOf fills in the prefill/decode hand-over of c's
// disaggregation (replay.DisaggregationConfig) what the cluster file
// leaves out: the KV a prompt token sends (the model's, all of a worker's
// ranks: each TP rank sends its own heads, replicated ones included) and
// the link it goes over (the node's network, node_override's network and
// nic_gbps included, unless transfer_gbps is given), and returns the note
// that says so. prefill_workers counts servers, as workers does (servers:
// the fleet's, before data parallelism): with data parallelism each of a
// server's ranks (sr) is a replay worker, so the prefill pool is that
// many times as many workers; a prefill server of DP attention with a
// prefill_tp of its own has that many ranks, beside decode servers of tp.
//
// pdep is the prefill pool's deployment (dep unless it has its own,
// disaggregation.prefill_hardware and prefill_tp): the KV it sends and its
// node's network are its, and its autoscaler's GPUs a worker.
func disaggregationOf(c *Cluster, cfg *replay.Config, dep, pdep *model.Deployment, servers int, sr serverRanks) (string, error) {
	d := &cfg.Disaggregation
	if d.PrefillWorkers >= servers {
		return "", c.bad("disaggregation.prefill_workers", c.given["disaggregation.prefill_workers"], strconv.Itoa(d.PrefillWorkers),
			fmt.Sprintf("leaves no decode worker of %d workers", servers))
	}
	perServer, prefillPerServer := sr.decode, sr.prefill
	if perServer > 1 || prefillPerServer > 1 {
		// A pool's HPA sizes servers (pods), each of its ranks, and
		// the planner engines of as many.
		d.PrefillAutoscale.ReplicaWorkers, d.DecodeAutoscale.ReplicaWorkers = prefillPerServer, perServer
		d.Planner.ReplicaWorkers = perServer
		if prefillPerServer != perServer {
			d.Planner.PrefillReplicaWorkers = prefillPerServer
		}
	}
	d.PrefillWorkers *= prefillPerServer
	if prefillPerServer != perServer && cfg.Client.PrefillAPIServerRanks == 0 {
		// A prefill server's ranks behind its API server, the decode
		// servers' behind theirs (api_server_ranks).
		cfg.Client.PrefillAPIServerRanks = prefillPerServer
	}
	ranksNote := ""
	switch {
	case prefillPerServer != perServer:
		ranksNote = fmt.Sprintf(" (%d ranks a prefill server, %d a decode server: %d prefill and %d decode workers)", prefillPerServer, perServer, d.PrefillWorkers, max(cfg.Workers, 1)-d.PrefillWorkers)
	case perServer > 1:
		ranksNote = fmt.Sprintf(" (%d ranks each: %d prefill and %d decode workers)", perServer, d.PrefillWorkers, max(cfg.Workers, 1)-d.PrefillWorkers)
	}
	ranks := int64(workerGPUs(pdep)) // a prefill worker's, which sends the KV
	if _, given := c.given["disaggregation.planner.gpus_per_worker"]; d.Planner.Policy != "" && !given {
		// The planner's budget counts GPUs: a worker's ranks.
		d.Planner.GPUsPerWorker = workerGPUs(dep)
	}
	if _, given := c.given["disaggregation.planner.prefill_gpus_per_worker"]; d.Planner.Policy != "" && !given && pdep != dep {
		d.Planner.PrefillGPUsPerWorker = int(ranks) // the prefill pool's own deployment's
	}
	// Pools of two deployments: a pool without an autoscaler still has
	// its own GPUs a worker, which the fleet's GPU-hours count (replay's
	// gpuHours).
	c.defaultGPUs("disaggregation.prefill_autoscale", &d.PrefillAutoscale, int(ranks), pdep != dep)
	c.defaultGPUs("disaggregation.decode_autoscale", &d.DecodeAutoscale, workerGPUs(dep), pdep != dep)
	kv := "the model's"
	if d.KVBytesPerToken == 0 {
		d.KVBytesPerToken = pdep.KVBytesPerTokenPerRank() * ranks
	} else {
		kv = "given"
	}
	link := "given"
	if d.TransferGBps == 0 {
		nc := *c // the prefill worker's node: its own GPU's (prefillCluster)
		if pdep != dep {
			var err error
			if nc, err = c.prefillCluster(); err != nil {
				return "", err
			}
		}
		n, err := nc.node(pdep)
		if err != nil {
			return "", err
		}
		d.TransferGBps = n.Network.Bandwidth / 1e9
		if _, ok := c.given["disaggregation.transfer_latency_s"]; !ok {
			d.TransferLatencySec = n.Network.Latency.Seconds()
		}
		link = "the " + n.Name + " node's network"
	}
	how := "vLLM's KV connector behind its proxy: the decode worker computes the last prompt token again"
	if EngineName(*cfg) == replay.EngineSGLang {
		how = "SGLang's PD servers: the decode server streams the prefill server's first token"
	}
	prefill := d.PrefillWorkers / prefillPerServer
	decode := ""
	switch {
	case d.DecodeRouter == replay.DecodeLeastRequests:
		decode = "; each request's decode worker the one with the fewest outstanding requests (decode_router least_requests)"
	case d.DecodeRouter == replay.DecodeDynamo || d.DecodeRouter == "" && cfg.Router == replay.RouterDynamo:
		decode = "; each request's decode worker the one whose outstanding requests hold the fewest prompt blocks (decode_router dynamo_kv, Dynamo's decode router)"
	}
	return fmt.Sprintf("prefill/decode disaggregated (%s): %d prefill and %d decode servers%s; %d KV bytes a prompt token (%s, %s), sent at %.4g GB/s and %.4g ms a transfer (%s)%s",
		how, prefill, servers-prefill, ranksNote, d.KVBytesPerToken, kv, human.Plural(int(ranks), "rank"), d.TransferGBps, d.TransferLatencySec*1e3, link, decode), nil
}

// disaggregationTiers checks the KV tiers of a disaggregated cluster, off
// (nil) or on, and returns the note that says which pools have them: the
// prefill pool, and with decode_kv_tiers the decode pool too (vLLM; an
// SGLang decode server's HiCache is not modelled yet).
func disaggregationTiers(c *Cluster, d replay.DisaggregationConfig, off *replay.Offload) (string, error) {
	sglang := EngineName(c.Config) == replay.EngineSGLang
	switch {
	case d.DecodeKVTiers && off == nil:
		key := "disaggregation.decode_kv_tiers"
		return "", c.bad(key, c.given[key], "", "no KV tiers to give the decode pool (scheduler.kv_offloading_size, kv_offloading_backend)")
	case d.DecodeKVTiers && sglang:
		key := "disaggregation.decode_kv_tiers"
		return "", c.bad(key, c.given[key], "", "an SGLang decode server's HiCache is not modelled yet (the prefill servers' is)")
	case off == nil:
		return "", nil
	case sglang:
		return "HiCache on the prefill servers: they prefetch, load and write as an aggregated server does; the decode servers have none, as SGLang's decode server takes no hits without its decode radix cache", nil
	case d.DecodeKVTiers:
		return "KV tiers on both pools: a decode worker writes the prompts it receives to its own tiers and loads those it preempts back (decode_kv_tiers)", nil
	}
	return "KV tiers on the prefill pool: its workers load their prompts' hits and write what they compute, the decode pool has none (decode_kv_tiers: true gives it tiers)", nil
}

// defaultGPUs sets the gpus_per_worker of autoscaler a, the cluster
// file's key, to gpus when a is on (or evenOff) and the file does not
// give it: GPU-hours count a worker's GPUs, as the planner's budget does.
func (c *Cluster) defaultGPUs(key string, a *replay.AutoscaleConfig, gpus int, evenOff bool) {
	if _, given := c.given[key+".gpus_per_worker"]; (a.On() || evenOff) && !given {
		a.GPUsPerWorker = gpus
	}
}

// workerGPUs is the GPUs of one replay worker of deployment dep: its TP
// and PP ranks, or, with DP attention, its PP ranks alone (a worker is
// one rank of the TP group, its own requests' KV whole).
func workerGPUs(dep *model.Deployment) int {
	if dep.DPAttention {
		return max(dep.PP, 1)
	}
	return dep.TP * max(dep.PP, 1)
}
