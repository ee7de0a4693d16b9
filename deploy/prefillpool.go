package deploy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A PoolSetup is a pool whose workers are not the cluster's deployment:
// the prefill pool of disaggregation.prefill_hardware and prefill_tp. Its
// Step and KVBlocks are what replay.Options.Prefill takes.
type PoolSetup struct {
	Deployment         *model.Deployment
	Step               model.StepModel
	KVTokens, KVBlocks int64
	KVHow              string
	CostModelText      string
}

// Options returns the replay's model of the pool (replay.Options.Prefill).
func (p *PoolSetup) Options() *replay.PoolModel {
	if p == nil {
		return nil
	}
	return &replay.PoolModel{Cost: p.Step, KVBlocks: p.KVBlocks}
}

// TierCapacityBytes is the capacity of the KV tiers of the workers at
// the start (the tiered ones), in bytes: host and disk over the workers,
// each pool's own when the decode pool has tiers of its own, the remote
// store once.
func (s *Setup) TierCapacityBytes() (host, disk, remote int64) {
	if s.Offload == nil {
		return 0, 0, 0
	}
	if s.DecodeOffload == nil {
		return s.Offload.CapacityBytes(s.Config.TieredWorkers())
	}
	p := s.Config.Disaggregation.PrefillWorkers
	host, disk, remote = s.Offload.CapacityBytes(p)
	h, d, _ := s.DecodeOffload.CapacityBytes(s.Config.Workers - p)
	return host + h, disk + d, remote
}

// FleetKVBlocks is the KV capacity of the workers at the start, in
// blocks: each pool's workers times its capacity.
func (s *Setup) FleetKVBlocks() int64 {
	workers := int64(s.Config.Workers)
	if s.Prefill == nil {
		return s.KVBlocks * workers
	}
	p := int64(s.Config.Disaggregation.PrefillWorkers)
	return s.Prefill.KVBlocks*p + s.KVBlocks*(workers-p)
}

// ownPrefill reports whether the cluster gives its prefill pool a
// deployment or batch limits of its own.
func ownPrefill(d replay.DisaggregationConfig) bool {
	return d.PrefillWorkers > 0 && (d.PrefillHardware != "" || d.PrefillTP != 0 || d.PrefillDP != 0 || d.PrefillNodesPerWorker != 0 || d.PrefillScheduler.On())
}

// prefillKey is the cluster file's key that gives the prefill pool its
// own deployment or limits, for messages: prefill_tp when given, else
// prefill_hardware, prefill_dp, prefill_nodes_per_worker, else
// prefill_scheduler.
func (c *Cluster) prefillKey() string {
	switch d := c.Config.Disaggregation; {
	case d.PrefillTP != 0:
		return "disaggregation.prefill_tp"
	case d.PrefillHardware != "":
		return "disaggregation.prefill_hardware"
	case d.PrefillDP != 0:
		return "disaggregation.prefill_dp"
	case d.PrefillNodesPerWorker != 0:
		return "disaggregation.prefill_nodes_per_worker"
	}
	return "disaggregation.prefill_scheduler"
}

// prefillCluster returns the cluster of the prefill pool's deployment, c
// with prefill_hardware and prefill_tp: the same model, engine and
// memory settings on the pool's GPU and TP size, and its data
// parallelism (a prefill server of dp ranks, each of prefill_tp GPUs, the
// experts over all its GPUs with ep). Another GPU takes its own preset's
// figures and node (hardware_override, node and node_override describe
// the cluster's). A prefill worker spans prefill_nodes_per_worker nodes
// (one by default), on the cluster's inter_node network. With SGLang's
// DP attention a prefill server's ranks are its prefill_tp
// (dpAttentionRanks), each a replay worker, as the cluster's are its tp.
func (c *Cluster) prefillCluster() (Cluster, error) {
	d := c.Config.Disaggregation
	p := *c
	// A prefill worker spans its own nodes (the cluster's are the
	// decode workers'), on the cluster's network between them.
	p.NodesPerWorker = d.PrefillNodesPerWorker
	switch {
	case p.NodesPerWorker <= 1:
		p.InterNode = nil
	case p.InterNode == nil:
		k := "disaggregation.prefill_nodes_per_worker"
		return Cluster{}, c.bad(k, c.given[k], strconv.Itoa(p.NodesPerWorker), "a prefill worker spanning nodes needs inter_node: {transport: tcp|rdma|gpudirect-rdma, bandwidth_gbps: N}, the network between its nodes")
	}
	if h := d.PrefillHardware; h != "" && h != c.Hardware {
		if _, err := model.ResolveHardware(h, nil); err != nil {
			k := "disaggregation.prefill_hardware"
			return Cluster{}, c.bad(k, c.given[k], strconv.Quote(h), err.Error())
		}
		p.Hardware, p.HardwareOverride, p.Node, p.NodeOverride = h, nil, "", nil
	}
	if d.PrefillTP != 0 {
		p.TP = d.PrefillTP
	}
	if d.PrefillDP != 0 {
		if c.EnableDPAttention {
			k := "disaggregation.prefill_dp"
			return Cluster{}, c.bad(k, c.given[k], strconv.Itoa(d.PrefillDP), "with enable_dp_attention a server's ranks are its TP: give prefill_tp")
		}
		p.DP = d.PrefillDP
	}
	if c.EP > 1 {
		p.EP = p.TP * max(p.DP, 1) // EP is TP·DP
	}
	return p, nil
}

// prefillDeployment resolves the prefill pool's own deployment: its
// roofline, its KV capacity sized as its engine sizes it on its GPUs (the
// scheduler's settings are the cluster's, and kv_cache_tokens or
// num_gpu_blocks_override, when given, every worker's), and its step
// model (the cost model's form of it when one is given, which must cover
// its GPU).
func prefillDeployment(c *Cluster, cfg replay.Config, run trace.Run, o Overrides) (*PoolSetup, error) {
	pc, err := c.prefillCluster()
	if err != nil {
		return nil, err
	}
	key := c.prefillKey()
	dep, err := pc.Deployment()
	if err != nil {
		return nil, c.bad(key, c.given[key], "", "the prefill pool's deployment: "+err.Error())
	}
	var sg model.SGLangDefaults
	if EngineName(cfg) == replay.EngineSGLang {
		sg = model.SGLangServeDefaults(c.EngineVersion, dep.Hardware, dep.TP, dep.PP)
		dep.CUDAGraphMaxBS = sglangCUDAGraphMaxBS(run, sg)
		dep.TorchCompileMaxBS = sglangTorchCompileMaxBS(run, sg)
		if dep.DPAttention {
			// server_args.py's cap under DP attention (dpAttention).
			dep.CUDAGraphMaxBS = min(dep.CUDAGraphMaxBS, sglangDPCUDAGraphMaxBS)
		}
	}
	cfg.Scheduler = cfg.Disaggregation.PrefillScheduler.Apply(cfg.Scheduler) // vLLM profiles its token budget
	tokens, how, err := kvCapacity(pc, cfg, dep, sg)
	if err != nil {
		return nil, err
	}
	p := &PoolSetup{Deployment: dep, KVTokens: tokens, KVHow: how}
	if p.Step, p.CostModelText, err = stepModel(c, dep, o, "the prefill pool's deployment: "); err != nil {
		return nil, err
	}
	block := cfg.Scheduler.BlockSize
	if block == 0 {
		block = replay.DefaultConfig().Scheduler.BlockSize
	}
	p.KVBlocks = tokens / block
	return p, nil
}

// prefillOffload returns the KV tiers of a cluster whose prefill pool has
// its own deployment: the prefill workers', which alone have tiers by
// default, sized by that deployment (its ranks' PCIe links and KV bytes a
// token, its node, its KV pool for SGLang's hicache_ratio); and with
// decode_kv_tiers the decode workers' own, sized by the cluster's
// deployment dep of kvTokens a worker (replay.Options.DecodeOffload).
// One remote store takes blocks of one size: pools of other KV bytes a
// token (an MLA model's KV, replicated on ranks of two TP sizes) with a
// remote store are refused.
func prefillOffload(c *Cluster, p *PoolSetup, dep *model.Deployment, kvTokens int64) (prefill, decode *replay.Offload, err error) {
	pc, err := c.prefillCluster()
	if err != nil {
		return nil, nil, err
	}
	prefill, err = offloadOf(pc, p.Deployment, p.KVTokens)
	if err != nil || prefill == nil || !c.Config.Disaggregation.DecodeKVTiers || EngineName(c.Config) == replay.EngineSGLang {
		return prefill, nil, err // (SGLang's decode tiers are refused with the note)
	}
	if decode, err = offloadOf(*c, dep, kvTokens); err != nil {
		return nil, nil, err
	}
	if decode.RemoteBlocks > 0 && decode.KVBytesPerToken != prefill.KVBytesPerToken {
		key := "disaggregation.decode_kv_tiers"
		return nil, nil, c.bad(key, c.given[key], "", fmt.Sprintf("a remote store shared by a prefill pool of %d KV bytes a token and a decode pool of %d: not modelled yet (one store holds blocks of one size)",
			prefill.KVBytesPerToken, decode.KVBytesPerToken))
	}
	return prefill, decode, nil
}

// prefillNote says what the prefill pool's own deployment is, and its
// own batch limits.
func prefillNote(p *PoolSetup, ps replay.PoolScheduler) string {
	d := p.Deployment
	limits := "the scheduler's settings are the cluster's"
	if ps.On() {
		var own []string
		for _, l := range []struct {
			name string
			v    int64
		}{{"max_num_batched_tokens", ps.MaxNumBatchedTokens}, {"max_num_seqs", int64(ps.MaxNumSeqs)},
			{"chunked_prefill_size", ps.ChunkedPrefillSize}, {"max_running_requests", int64(ps.MaxRunningRequests)}} {
			if l.v != 0 {
				own = append(own, fmt.Sprintf("%s %d", l.name, l.v))
			}
		}
		limits = "its own " + strings.Join(own, ", ") + ", the scheduler's other settings the cluster's"
	}
	unit := "a worker"
	switch {
	case d.DPAttention:
		unit = "a server, each of its ranks a worker"
	case d.DP > 1:
		unit = fmt.Sprintf("a rank, each a worker, servers of %d", d.DP)
	}
	return fmt.Sprintf("prefill pool of its own deployment: %s on %d×%s (%s) %s, KV %s; its steps priced by %s; %s",
		d.LLM.Name, d.TP*max(d.PP, 1), d.Hardware.Name, workerParallelism(d), unit, p.KVHow, firstLine(p.CostModelText), limits)
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
