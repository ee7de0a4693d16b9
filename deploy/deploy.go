package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/samples"
	"github.com/opaltrace/opaltrace/trace"
)

// A CostModel prices steps with fitted coefficients instead of the
// roofline's defaults: calibrate.CostModel, read from a costmodel.yaml,
// or a calibration's candidate. (An interface, so that calibrate, which
// replays through this package, is not imported by it.)
type CostModel interface {
	// Check returns an error when the coefficients were fitted for
	// another deployment.
	Check(hardware, modelName string, tp int) error
	// StepModel returns what prices the steps of d.
	StepModel(d *model.Deployment) (model.StepModel, error)
}

// A LinkCostModel is a CostModel that also holds fitted links (the PCIe
// and NVMe bandwidth and latency calibrate --server-side fits from
// per-request tier data). Resolve gives them to the node the workers run
// on, over its preset; a node_override key in the cluster file still
// wins, as the more specific statement.
type LinkCostModel interface {
	CostModel
	// ApplyNode sets n's fitted links for a worker of gpusPerWorker
	// GPUs and returns the coefficient names it set.
	ApplyNode(n *model.Node, gpusPerWorker int) []string
}

// Overrides are what a caller sets over the cluster file and the run's
// record.
type Overrides struct {
	// Settings are applied over the cluster file (Cluster.With).
	Settings []Setting
	// CostModel prices the steps instead of the roofline; it is required
	// when the cluster names a cost_model file. CostModelText is what the
	// output records of it (the file as written).
	CostModel     CostModel
	CostModelText string
	// Measured says the run's requests carry measured latencies, so that
	// its replay is meant to be compared with them: if the run records no
	// usable model or hardware and the cluster file and the settings name
	// none either, Resolve refuses it unless AssumeDeployment, rather
	// than replay it on a default deployment nobody chose.
	Measured         bool
	AssumeDeployment bool
}

// A Setup is a ready replay of one run: what replay.RunInputs takes, and
// what the simulated run records.
type Setup struct {
	// Cluster is the effective cluster: the file's, the run's record and
	// the overrides merged.
	Cluster Cluster
	// Config is the workers' configuration, with the engine's options
	// from the run's record.
	Config replay.Config
	// Deployment is the roofline of one worker; Step prices its steps
	// (Deployment itself, or a cost model's form of it).
	Deployment *model.Deployment
	Step       model.StepModel
	// KVTokens is one worker's KV capacity in tokens as the engine sizes
	// it, and KVBlocks the same in blocks of Config.Scheduler.BlockSize,
	// which replay.RunInputs takes. KVHow says how it was derived.
	KVTokens, KVBlocks int64
	KVHow              string
	// CostModelText says what priced the steps, for the outputs' metadata.
	CostModelText string
	// Offload is the workers' KV tiers, for replay.Options; nil: none.
	// With a prefill pool of its own (Prefill) they are its workers',
	// and DecodeOffload the decode pool's (decode_kv_tiers), sized by
	// the cluster's deployment.
	Offload, DecodeOffload *replay.Offload
	// Prefill is the prefill pool's own deployment
	// (disaggregation.prefill_hardware, prefill_tp), for
	// replay.Options.Prefill (Prefill.Options()); nil: the cluster's.
	Prefill *PoolSetup
	// Run is the simulated run's metadata but its name: source, model,
	// engine, hardware, TP, PP, DP, and Extra "config" (the effective
	// cluster) and "cost_model"; the caller adds the name and the workload.
	Run trace.Run
	// Notes say, for the user, where the deployment came from: what the
	// run recorded, what the cluster file or a flag changed of it, what
	// was assumed. The caller prints them; Resolve prints nothing.
	Notes []string
}

// Header is the deployment in one line, for summaries: "llama-3.3-70b
// on 4×h200 (TP4), sglang, 2 workers".
func (s *Setup) Header() string {
	d := s.Deployment
	par := fmt.Sprintf("TP%d", d.TP)
	if d.PP > 1 {
		par += fmt.Sprintf(" PP%d", d.PP)
	}
	if d.DP > 1 {
		par += fmt.Sprintf(" DP%d", d.DP)
	}
	gpus := d.TP * max(d.PP, 1) * max(d.DP, 1)
	w := "1 worker"
	if s.Config.Workers != 1 {
		w = fmt.Sprintf("%d workers", s.Config.Workers)
	}
	if d.EP > 1 {
		par += fmt.Sprintf(" EP%d", d.EP)
	}
	switch {
	case d.DPAttention:
		par += " DP-attention"
		w = fmt.Sprintf("%d workers (one per DP-attention rank)", s.Config.Workers)
	case d.DP > 1:
		w = fmt.Sprintf("%d workers (one per DP rank)", s.Config.Workers)
	}
	if in := d.InterNode; in != nil {
		par += fmt.Sprintf(" over %d nodes, %s %g Gb/s", in.Nodes, in.Transport, in.Bandwidth*8/1e9)
	}
	if p := s.Config.Disaggregation.PrefillWorkers; p > 0 {
		w = fmt.Sprintf("%d workers (%d prefill, %d decode: disaggregated)", s.Config.Workers, p, s.Config.Workers-p)
		if pre := s.Prefill; pre != nil {
			pd := pre.Deployment
			w = fmt.Sprintf("%d workers (%d prefill on %d×%s (%s), %d decode: disaggregated)", s.Config.Workers, p, pd.TP*max(pd.PP, 1), pd.Hardware.Name, workerParallelism(pd), s.Config.Workers-p)
		}
	}
	return fmt.Sprintf("%s on %d×%s (%s), %s, %s", d.LLM.Name, gpus, d.Hardware.Name, par, EngineName(s.Config), w)
}

// oneDomain returns the note that a worker of dep (what: "a worker")
// has more GPUs than its node and no nodes to span (key, the setting that
// gives them): it is priced as one NVLink domain, which its node is not;
// none when it fits, spans nodes, or its node does not resolve (the KV
// tiers, which need it, say why).
func (c Cluster) oneDomain(dep *model.Deployment, what, key string) []string {
	gpus := dep.TP * max(dep.PP, 1)
	n, err := c.node(dep)
	if dep.InterNode != nil || err != nil || gpus <= n.GPUs {
		return nil
	}
	return []string{fmt.Sprintf("%s of %d GPUs (TP%d, PP%d) on %s nodes of %d: priced as one NVLink domain, which no node is (%s and inter_node price the crossing between nodes)",
		what, gpus, dep.TP, max(dep.PP, 1), n.Name, n.GPUs, key)}
}

// workerParallelism says how one worker of d is laid out, for a pool of
// its own: TP, and PP and EP when there are (with data parallelism a
// worker is a rank, the experts over the server's ranks), DP attention,
// and the nodes it spans.
func workerParallelism(d *model.Deployment) string {
	par := fmt.Sprintf("TP%d", d.TP)
	if d.PP > 1 {
		par += fmt.Sprintf(" PP%d", d.PP)
	}
	if d.DP > 1 && !d.DPAttention {
		par += fmt.Sprintf(" DP%d", d.DP)
	}
	if d.EP > 1 {
		par += fmt.Sprintf(" EP%d", d.EP)
	}
	if d.DPAttention {
		par += " DP-attention" // a worker is one of its TP ranks
	}
	if in := d.InterNode; in != nil {
		par += fmt.Sprintf(" over %d nodes", in.Nodes)
	}
	return par
}

// Resolve returns the ready replay of run (the input's run whose
// requests are replayed; the zero Run when there is none, as for
// synthetic workloads) on cluster c with the overrides o applied.
//
// The run's recorded deployment drives it: its model (a shipped name, a
// Hugging Face id of one, or a config.json path; see ModelName), its
// hardware ("4xH200": the GPU and, when the run records no parallel
// sizes, the TP degree; a cluster file's or a setting's hardware may name
// a count alike, takeGPUCount), its TP, PP and DP, its engine, and the engine
// options recorded at ingest (Run.Extra "engine_opt.KEY", see
// engineOptions). A key the cluster file or a setting gives wins over
// the record, with a note when they differ. The KV capacity is sized as
// the engine sizes it (kvCapacity).
func Resolve(c Cluster, run trace.Run, o Overrides) (*Setup, error) {
	c, err := c.With(o.Settings...)
	if err != nil {
		return nil, err
	}
	if err := c.takeGPUCount(); err != nil {
		return nil, err
	}
	notes, err := applyRecord(&c, run, o)
	if err != nil {
		return nil, err
	}
	if lm, ok := o.CostModel.(LinkCostModel); ok {
		c.links = lm
	}
	cfg, err := engineOptions(c.Config, run, c.EngineVersion)
	if err != nil {
		return nil, err
	}
	c.Config = cfg                 // the effective cluster has the engine's options
	servers := max(cfg.Workers, 1) // before data parallelism makes each rank a worker
	dep, err := c.Deployment()
	if err != nil {
		return nil, err
	}
	var sg model.SGLangDefaults
	if EngineName(cfg) == replay.EngineSGLang {
		sg = model.SGLangServeDefaults(c.EngineVersion, dep.Hardware, dep.TP, dep.PP)
		if note := sglangServeDefaults(c, &cfg, sg); note != "" {
			notes = append(notes, note)
			c.Config = cfg
		}
		// Priced only when a cost model gives eager_layer_launch_s or
		// uncompiled_layer_s.
		dep.CUDAGraphMaxBS = sglangCUDAGraphMaxBS(run, sg)
		dep.TorchCompileMaxBS = sglangTorchCompileMaxBS(run, sg)
		if c.EnableDPAttention {
			note, err := dpAttention(&c, &cfg, dep, run)
			if err != nil {
				return nil, err
			}
			notes = append(notes, note)
			c.Config = cfg
		}
		notes = append(notes, regimeNote(dep))
	}
	if c.EnableDPAttention && EngineName(cfg) != replay.EngineSGLang {
		return nil, c.bad("enable_dp_attention", c.given["enable_dp_attention"], "true", "is SGLang's: set scheduler.engine sglang")
	}
	if EngineName(cfg) == replay.EngineVLLM {
		if note := vllmBatchDefaults(c, &cfg, dep.Hardware, c.EngineVersion); note != "" {
			notes = append(notes, note)
			c.Config = cfg
		}
	}
	if sr := dataParallelRanks(cfg.Disaggregation, dep); !c.EnableDPAttention && max(sr.decode, sr.prefill) > 1 {
		note, err := dataParallel(&c, &cfg, dep)
		if err != nil {
			return nil, err
		}
		notes = append(notes, note)
		c.Config = cfg
	}
	if perServer := cfg.Workers / servers; perServer > 1 && cfg.Autoscale.On() {
		// An HPA's replica is a server (a pod), its ranks started,
		// counted and stopped together.
		cfg.Autoscale.ReplicaWorkers = perServer
		c.Config = cfg
	}
	c.defaultGPUs("autoscale", &cfg.Autoscale, workerGPUs(dep), false)
	if cfg.Planner.Policy != "" {
		// The planner of an aggregated fleet: an engine is a server of
		// its ranks, and its budget counts a worker's GPUs, as
		// disaggregation.planner's (disaggregationOf).
		if perServer := cfg.Workers / servers; perServer > 1 {
			cfg.Planner.ReplicaWorkers = perServer
		}
		if _, given := c.given["planner.gpus_per_worker"]; !given {
			cfg.Planner.GPUsPerWorker = workerGPUs(dep)
		}
		if _, given := c.given["planner.prefill_gpus_per_worker"]; !given {
			cfg.Planner.PrefillGPUsPerWorker = cfg.Planner.GPUsPerWorker // one pool
		}
	}
	c.Config = cfg
	var pre *PoolSetup
	pdep := dep // the prefill pool's deployment
	if ownPrefill(cfg.Disaggregation) {
		if pre, err = prefillDeployment(&c, cfg, run, o); err != nil {
			return nil, err
		}
		pdep = pre.Deployment
	}
	if cfg.Disaggregation.PrefillWorkers > 0 {
		sr := dataParallelRanks(cfg.Disaggregation, dep)
		if c.EnableDPAttention {
			sr = dpAttentionRanks(cfg.Disaggregation, dep)
		}
		note, err := disaggregationOf(&c, &cfg, dep, pdep, servers, sr)
		if err != nil {
			return nil, err
		}
		notes = append(notes, note)
		c.Config = cfg
	}
	kvTokens, kvHow, err := kvCapacity(c, cfg, dep, sg)
	if err != nil {
		return nil, err
	}
	s := &Setup{Cluster: c, Deployment: dep, KVTokens: kvTokens, KVHow: kvHow, Notes: notes, Prefill: pre}
	if pre == nil {
		s.Offload, err = offloadOf(c, dep, kvTokens)
	} else {
		s.Offload, s.DecodeOffload, err = prefillOffload(&c, pre, dep, kvTokens)
	}
	if err != nil {
		return nil, err
	}
	if pre != nil {
		s.Notes = append(s.Notes, prefillNote(pre, cfg.Disaggregation.PrefillScheduler))
	}
	s.Notes = append(s.Notes, c.oneDomain(dep, "a worker", "nodes_per_worker")...)
	if pre != nil {
		if pc, err := c.prefillCluster(); err == nil {
			s.Notes = append(s.Notes, pc.oneDomain(pre.Deployment, "a prefill worker", "disaggregation.prefill_nodes_per_worker")...)
		}
	}
	if d := cfg.Disaggregation; d.PrefillWorkers > 0 {
		note, err := disaggregationTiers(&c, d, s.Offload)
		if err != nil {
			return nil, err
		}
		if note != "" {
			s.Notes = append(s.Notes, note)
		}
	}
	if c.links != nil && s.Offload != nil {
		var probe model.Node
		if set := c.links.ApplyNode(&probe, 1); len(set) > 0 {
			s.Notes = append(s.Notes, "node links from the cost model: "+strings.Join(set, ", ")+" (node_override keys win)")
		}
	}
	if s.Step, s.CostModelText, err = stepModel(&c, dep, o, ""); err != nil {
		return nil, err
	}
	if cfg.Scheduler.ContextLength == 0 {
		// SGLang sizes its request pool by it.
		cfg.Scheduler.ContextLength = dep.LLM.MaxPositionEmbeddings
	}
	block := cfg.Scheduler.BlockSize
	if block == 0 {
		block = replay.DefaultConfig().Scheduler.BlockSize
	}
	s.KVBlocks = kvTokens / block
	s.Config = cfg
	s.Run = trace.Run{
		Source: "simulated", Model: dep.LLM.Name, Engine: EngineName(cfg),
		Hardware: dep.Hardware.Name, TP: c.TP, PP: c.PP, DP: c.DP,
		Extra: map[string]string{"config": c.YAML(), "cost_model": s.CostModelText, "deployment": s.Header()},
	}
	if pre != nil {
		s.Run.Extra["prefill_cost_model"] = pre.CostModelText
	}
	return s, nil
}

// Deployment builds the roofline of one worker of c: its GPU, model and
// parallel sizes, with the default coefficients.
func (c Cluster) Deployment() (*model.Deployment, error) {
	hw, err := model.ResolveHardware(c.Hardware, c.HardwareOverride)
	var se *model.HardwareSpecError
	switch {
	case errors.As(err, &se) && se.Key == "":
		return nil, c.bad("hardware", c.given["hardware"], "custom", "hardware_override "+se.Msg)
	case errors.As(err, &se):
		key := "hardware_override." + se.Key
		return nil, c.bad(key, c.given[key], "", se.Msg)
	case err != nil:
		return nil, err
	}
	llm, err := LoadLLM(c.Model)
	if err != nil {
		return nil, err
	}
	if llm, err = llm.WithKVCacheDType(c.KVCacheDType); err != nil {
		return nil, err
	}
	p := model.Parallelism{TP: c.TP, PP: c.PP, DP: c.DP, EP: c.EP, DPAttention: c.EnableDPAttention}
	if p.InterNode, err = c.interNode(); err != nil {
		return nil, err
	}
	d, err := model.NewParallelDeployment(hw, llm, p)
	if err != nil && p.InterNode != nil {
		return nil, c.bad("nodes_per_worker", c.given["nodes_per_worker"], "", err.Error())
	}
	return d, err
}

// interNode returns the network of a worker spanning nodes, nil for one
// node; an inter_node without nodes_per_worker, or the reverse, is an
// error naming the key and line.
func (c Cluster) interNode() (*model.InterNode, error) {
	n := c.InterNode
	switch {
	case c.NodesPerWorker <= 1 && n == nil:
		return nil, nil
	case c.NodesPerWorker <= 1 && c.Config.Disaggregation.PrefillNodesPerWorker > 1:
		return nil, nil // the prefill workers' network (prefillCluster)
	case c.NodesPerWorker <= 1:
		return nil, c.bad("inter_node", c.given["inter_node.transport"], "", "applies to a worker spanning nodes: set nodes_per_worker (or disaggregation.prefill_nodes_per_worker)")
	case n == nil:
		return nil, c.bad("nodes_per_worker", c.given["nodes_per_worker"], strconv.Itoa(c.NodesPerWorker),
			"a worker spanning nodes needs inter_node: {transport: tcp|rdma|gpudirect-rdma, bandwidth_gbps: N}")
	}
	switch n.Transport {
	case model.TransportTCP, model.TransportRDMA, model.TransportGPUDirectRDMA:
	default:
		return nil, c.bad("inter_node.transport", c.given["inter_node.transport"], strconv.Quote(n.Transport),
			fmt.Sprintf("want %s, %s or %s", model.TransportTCP, model.TransportRDMA, model.TransportGPUDirectRDMA))
	}
	if !(n.BandwidthGbps > 0) {
		return nil, c.bad("inter_node.bandwidth_gbps", c.given["inter_node.transport"], "", "missing: want the line rate of one link in Gb/s")
	}
	return &model.InterNode{
		Nodes: c.NodesPerWorker, Transport: n.Transport, Bandwidth: n.BandwidthGbps * 1e9 / 8, LinkPerGPU: n.LinkPerGPU,
		Latency: time.Duration(math.Round(n.LatencyUs * 1e3)),
	}, nil
}

// rooflineText says what priced the steps when no cost model did: the
// roofline with its coefficients.
// stepModel returns what prices dep's steps and the text that says so:
// the cost model's form of dep when one is given (it must cover dep's
// GPU, model and TP), else dep's roofline. of names dep in errors ("":
// the cluster's deployment).
func stepModel(c *Cluster, dep *model.Deployment, o Overrides, of string) (model.StepModel, string, error) {
	switch {
	case o.CostModel != nil:
		if err := o.CostModel.Check(dep.Hardware.Name, dep.LLM.Name, dep.TP); err != nil {
			return nil, "", fmt.Errorf("%s: %s%v", c.CostModel, of, err)
		}
		step, err := o.CostModel.StepModel(dep)
		return step, o.CostModelText, err
	case c.CostModel != "":
		return nil, "", fmt.Errorf("cost_model %s: not loaded (Overrides.CostModel is nil)", c.CostModel)
	}
	return dep, rooflineText(dep), nil
}

func rooflineText(dep *model.Deployment) string {
	return fmt.Sprintf("roofline: %s on %d × %s (%.4g FLOP/s, %.4g B/s); mfu %g, attention_mfu %g, bandwidth_efficiency %g, link_efficiency %g, step_overhead %v\n",
		dep.LLM.Name, dep.TP, dep.Hardware.Name, dep.Hardware.PeakFLOPS, dep.Hardware.MemBandwidth,
		dep.MFU, dep.AttentionMFU, dep.BandwidthEfficiency, dep.LinkEfficiency, dep.StepOverhead)
}

// LoadLLM resolves a model: a path to a config.json (or its folder), a
// name shipped in samples/models, or a Hugging Face id of one (ModelName).
func LoadLLM(name string) (model.LLM, error) {
	if _, err := os.Stat(name); err == nil {
		return model.LoadConfig(name)
	}
	if shipped, ok := ModelName(name); ok {
		name = shipped
	}
	sub, err := fs.Sub(samples.FS, samples.Models)
	if err != nil {
		return model.LLM{}, err
	}
	return model.LLMByName(sub, name)
}

// EngineName is the engine a configuration's workers run.
func EngineName(cfg replay.Config) string {
	if cfg.Scheduler.Engine == "" {
		return replay.EngineVLLM
	}
	return cfg.Scheduler.Engine
}

// vllmBatchDefaults sets the max_num_seqs and max_num_batched_tokens of
// cfg that neither the run's record nor the cluster file nor a setting
// gave (c.Given) to what vLLM's API server of the run's version chooses
// on its GPU (model.VLLMServeBatchDefaults), so that the scheduler and
// the KV sizing's profiling run both use them; it returns the line
// saying so, "" when both were given.
func vllmBatchDefaults(c Cluster, cfg *replay.Config, hw model.Hardware, version string) string {
	s := &cfg.Scheduler
	d := model.VLLMServeBatchDefaults(version, hw)
	var set []string
	if _, ok := c.Given("scheduler.max_num_seqs"); !ok {
		s.MaxNumSeqs = int(d.MaxNumSeqs)
		set = append(set, fmt.Sprintf("max_num_seqs %d", d.MaxNumSeqs))
	}
	if _, ok := c.Given("scheduler.max_num_batched_tokens"); !ok {
		s.MaxNumBatchedTokens = d.MaxNumBatchedTokens
		set = append(set, fmt.Sprintf("max_num_batched_tokens %d", d.MaxNumBatchedTokens))
	}
	if len(set) == 0 {
		return ""
	}
	return strings.Join(set, ", ") + " (" + d.Why + ")"
}

// sglangServeDefaults sets the schedule_policy and chunked_prefill_size
// of cfg that neither the run's record nor the cluster file nor a setting
// gave to d, SGLang's defaults for the cluster's engine_version on its
// GPU (model.SGLangServeDefaults), and returns the line saying so and
// which rule chose them, with the mem_fraction_static and
// cuda_graph_max_bs the same rule gives when they too were left out
// (kvCapacity, sglangCUDAGraphMaxBS apply them); "" when all were given.
func sglangServeDefaults(c Cluster, cfg *replay.Config, d model.SGLangDefaults) string {
	s := &cfg.Scheduler
	var set []string
	if s.SchedulePolicy == "" {
		s.SchedulePolicy = d.SchedulePolicy
		set = append(set, "schedule_policy "+d.SchedulePolicy)
	}
	if s.ChunkedPrefillSize == 0 {
		s.ChunkedPrefillSize = d.ChunkedPrefillSize
		set = append(set, fmt.Sprintf("chunked_prefill_size %d", d.ChunkedPrefillSize))
	}
	if c.MemFractionStatic == 0 && s.KVCacheTokens == 0 && c.NumGPUBlocksOverride == 0 {
		set = append(set, fmt.Sprintf("mem_fraction_static %g", d.MemFractionStatic))
	}
	if len(set) == 0 {
		return ""
	}
	return strings.Join(set, ", ") + " (" + d.Why + ")"
}
