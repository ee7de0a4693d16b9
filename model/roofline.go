package model

import (
	"fmt"
	"math"
	"time"
)

// Default coefficients of a Deployment. They are starting points for
// calibration, not measurements.
const (
	// DefaultMFU is the fraction of peak FLOPs a serving forward pass
	// reaches in its compute-bound regime; 0.5 is typical of large-batch
	// prefill with FlashAttention on Hopper.
	DefaultMFU = 0.5
	// DefaultBandwidthEfficiency is the fraction of datasheet HBM
	// bandwidth that weight and KV streaming reach (≈ 0.8 in memcpy-like
	// kernels on H100).
	DefaultBandwidthEfficiency = 0.8
	// DefaultLinkEfficiency is the fraction of per-direction link
	// bandwidth a ring all-reduce reaches (NCCL bus bandwidth on 8×H100
	// NVLink is ≈ 360 of 450 GB/s).
	DefaultLinkEfficiency = 0.8
	// DefaultStepOverhead is the fixed cost of a step outside the GPU
	// kernels: scheduling, input preparation, sampling, kernel launches.
	DefaultStepOverhead = 300 * time.Microsecond
	// DefaultBlockSize is vLLM's KV block size on CUDA, in tokens.
	DefaultBlockSize = 16
)

// A Deployment is one model served on TP·PP GPUs of one kind (times DP
// replicas when experts are spread over them), priced as a roofline. It
// implements StepModel.
//
// A step is one forward pass over the whole mixed batch, as vLLM runs it:
// the prefill chunks and decode tokens of a step share one pass and their
// work adds up (Opal instead takes the max of the parts; OpalStep has
// that form). Per GPU of the tensor-parallel group:
//
//	compute = dense linear FLOPs/TP / (peak · MFU) + routed-expert FLOPs/TP / (peak · ExpertMFU)
//	          + attention FLOPs/TP / (PeakFLOPS · AttentionMFU)
//	memory  = weights/TP read / (MemBandwidth · BandwidthEfficiency)
//	          + (KV read + KV written) / (MemBandwidth · KVBandwidthEfficiency)
//	comm    = all-reduces (TP) + all-to-alls (EP) + stage sends (PP), over LinkBandwidth · LinkEfficiency,
//	          plus CollectiveLatency for each of them
//	gpu     = max(compute, memory) + SerialFraction · min(compute, memory) + comm (+ regime terms)
//	step    = gpu + StepOverhead, or max(gpu, layers · EagerLayerCPU) + StepOverhead for an eager step
//
// Linear FLOPs = 2·(active matmul weights)·tokens + 2·(LM head)·sequences;
// the peak is PeakFP8FLOPS for fp8 checkpoints on parts that have it,
// else PeakFLOPS. A chunk of t new tokens over c cached ones costs
// attention FLOPs per (query, key) pair over all keys it sees: c + (t+1)/2
// per token in full layers, at most the window in sliding layers. A decode
// token over c cached ones is a chunk with t = 1. The LM head runs once
// per sequence (vLLM computes logits only at each request's last scheduled
// token). KV read is Σ c (capped at the window in sliding layers) · KV
// bytes per token, KV written is tokens · KV bytes per token, both per
// rank. Of the routed experts, a step reads those its tokens were sent
// to: with n tokens each picking k of E experts uniformly, a fraction
// 1 − (1 − k/E)ⁿ of them.
//
// Parallelism, as vLLM lays it out:
//   - TP splits attention heads, MLP and vocabulary matrices; GQA KV heads
//     are split (replicated when TP exceeds them), the MLA latent is
//     replicated on every rank. Two ring all-reduces per layer.
//   - PP splits the layers into contiguous stages; one batch passes them
//     in turn, so a step costs the sum of the stages (the compute of all
//     layers) plus PP−1 activation sends. vLLM keeps PP batches in flight
//     to fill the pipeline; the replay's one-batch-per-worker loop does
//     not, so PP here prices latency, not peak throughput.
//   - DP replicates attention; EP (1, or TP·DP as with vLLM's
//     --enable-expert-parallel) spreads whole experts over the ranks.
//     With EP the batch given to StepTime is one DP rank's; the other DP
//     ranks are assumed to run equal batches, so expert FLOPs per rank
//     stay tokens·k/TP while the experts a step touches are counted over
//     DP·tokens. Each MoE layer then does a dispatch and a combine
//     all-to-all instead of its MLP all-reduce.
//
// Note: Hardware, LLM and the parallel sizes are fixed by NewDeployment,
// which precomputes the per-step constants from them; build a new
// Deployment to change them. The coefficients (MFU, AttentionMFU,
// ExpertMFU, BandwidthEfficiency, KVBandwidthEfficiency, LinkEfficiency, SerialFraction,
// StepOverhead, CollectiveLatency, EagerLayerLaunch, EagerLayerCPU, UncompiledLayer, BlockSize),
// CUDAGraphMaxBS and TorchCompileMaxBS may be changed at any time, which
// is what calibration and deploy do.
type Deployment struct {
	Hardware Hardware
	LLM      LLM
	TP       int
	PP       int // pipeline stages; 0 reads as 1
	DP       int // data-parallel ranks sharing experts; 0 reads as 1
	EP       int // expert-parallel size: 1 (experts split TP ways) or TP·DP

	MFU float64
	// AttentionMFU is the efficiency of the attention kernels (QKᵀ and
	// PV), fitted apart from MFU because FlashAttention's efficiency
	// differs from a GEMM's; 0 means MFU.
	AttentionMFU float64
	// ExpertMFU is the efficiency of the routed experts' GEMMs (the
	// fused-MoE kernel), fitted apart from MFU: each expert multiplies
	// only the few tokens routed to it (a step of n tokens gives each of
	// E experts about n·k/E) by a shard of intermediate/TP columns, a
	// shape far from the large dense GEMMs MFU is fitted on, and the
	// kernel also gathers, sorts and scatters the tokens by expert. 0
	// means MFU. It prices FLOPs only; the experts' weight reads stay at
	// BandwidthEfficiency.
	ExpertMFU           float64
	BandwidthEfficiency float64
	// KVBandwidthEfficiency is the fraction of HBM bandwidth the
	// attention kernels reach reading and writing the KV cache, fitted
	// apart from BandwidthEfficiency (the weight reads of the GEMMs)
	// because paged attention gathers scattered blocks per request and
	// head, and a large decode batch runs it beside its GEMMs rather than
	// hidden under them; 0 means BandwidthEfficiency.
	KVBandwidthEfficiency float64
	LinkEfficiency        float64
	// SerialFraction is the share of the lesser of a step's compute and
	// memory times that is not hidden under the greater: 0 (default) is
	// the roofline's max, 1 their sum. A step is a sequence of kernels,
	// each a GEMM over the batch's tokens, an attention over its KV, an
	// all-reduce or a small elementwise kernel, and a GEMM over a decode
	// batch of tens of tokens (memory-bound) may run part of its
	// tensor-core work after its loads rather than under them; how much
	// of the lesser time shows is not derived here but fitted by
	// calibration, which fits it only from runs on both sides of the
	// roofline.
	SerialFraction float64
	StepOverhead   time.Duration
	// CollectiveLatency is the fixed cost of one collective operation
	// (NCCL's α: launch and synchronisation, whatever its size), paid
	// by every all-reduce, all-to-all and stage send of a step besides
	// its bytes over the link (default 0: the bytes alone).
	CollectiveLatency time.Duration
	// CUDAGraphMaxBS is the largest decode batch the engine replays as a
	// CUDA graph (SGLang's cuda_graph_max_bs). A step with more decodes,
	// or with any prefill (SGLang runs extend batches without graphs),
	// launches its kernels one at a time from the CPU and takes the
	// stage's layers times EagerLayerLaunch longer. (Launches that hid
	// under the GPU's work, max(GPU, launches), were tried first: on the
	// DataCrunch training runs the launches never exceed the GPU time at
	// any value the fit can reach from 0, so the coefficient was not
	// determined; the added form is what calibrate fits.) 0: every step
	// is priced as a graph replay, with no launch term; negative: graphs
	// are disabled and every step is eager.
	CUDAGraphMaxBS   int
	EagerLayerLaunch time.Duration
	// EagerLayerCPU is the host's time to issue one decoder layer's
	// kernels in an eager step, as a bound rather than an addition:
	// PyTorch launches asynchronously, so the CPU runs ahead of the GPU
	// and an eager step takes max(its GPU time, stage layers ×
	// EagerLayerCPU). A step whose GPU work is short (a small prefill,
	// a decode batch just above CUDAGraphMaxBS) waits for its launches;
	// under a long one (a decode batch of thousands, an 8,192-token
	// chunk) they are hidden. 0 (default): no bound.
	EagerLayerCPU time.Duration
	// TorchCompileMaxBS is the largest decode batch the engine replays
	// as a torch-compiled CUDA graph (SGLang's torch_compile_max_bs under
	// --enable-torch-compile; 0: nothing is compiled). Compiled graphs
	// fuse the layers' small kernels (norms, rotary, activation) that an
	// uncompiled graph or an eager step runs one by one; every step of
	// an engine that compiles and is not itself compiled takes the
	// stage's layers times UncompiledLayer longer (see Regime). 0 by
	// default: the regimes are told apart, and priced alike, until
	// calibration fits it.
	TorchCompileMaxBS int
	UncompiledLayer   time.Duration
	// BlockSize is the KV block size in tokens; KVCacheTokensFor rounds
	// down to whole blocks.
	BlockSize int64

	// DPAttention is SGLang's --enable-dp-attention (v0.4.x, MLA models):
	// the TP GPUs are data-parallel attention ranks, each with its own
	// requests and KV pool and all of the attention weights, that step
	// together and run the MLPs TP-split over all ranks' tokens (see
	// dpattention.go). The batch StepTime prices is one rank's, the others
	// running the same; DPStepTime prices any per-rank batches. Fixed by
	// NewParallelDeployment.
	DPAttention bool

	// InterNode is the network between the worker's nodes when its GPUs
	// span several (see InterNode); nil: one node, every collective on
	// LinkBandwidth. Fixed by NewParallelDeployment.
	InterNode *InterNode

	k   stepConsts
	dpk *dpConsts // with DPAttention
}

// A Parallelism gives the parallel sizes of a Deployment. Zero fields
// read as 1. InterNode, when set, spreads the worker's TP·PP GPUs over
// several nodes.
type Parallelism struct {
	TP, PP, DP, EP int
	InterNode      *InterNode
	// DPAttention makes the TP GPUs SGLang's data-parallel attention
	// ranks (Deployment.DPAttention).
	DPAttention bool
}

// stepConsts are the per-rank shape constants StepTime needs, so that a
// step costs a few multiply-adds per batch entry and no allocation.
type stepConsts struct {
	linearFLOPsPerToken float64 // 2 · dense active matmul weights / TP
	expertFLOPsPerToken float64 // 2 · k routed experts / TP
	lmHeadFLOPsPerSeq   float64 // 2 · vocab · hidden / TP
	fullPairFLOPs       float64 // attention FLOPs per pair, all full layers / TP
	slidingPairFLOPs    float64 // the same over sliding layers
	window              float64
	linearPeak          float64 // PeakFP8FLOPS or PeakFLOPS
	weightBytes         float64 // non-expert weights per rank, read once per step (all stages)
	expertBytes         float64 // routed-expert weights per rank (all stages)
	expertPick          float64 // 1 − k/E
	dpTokens            float64 // tokens of the whole EP group per token of this rank
	kvFullPerToken      float64 // KV bytes per token per rank, full layers
	kvSlidingPerToken   float64 // the same, sliding layers
	commBytesPerToken   float64 // all-reduce + all-to-all bytes each rank sends per token
	collectives         float64 // collective operations per step (all-reduces, all-to-alls, stage sends)
	ppBytesPerToken     float64 // activation bytes sent between stages per token
	// With InterNode: commSecPerToken is the communication time per token
	// at full efficiency (links of different speeds: bytes alone do not
	// say it), and interNodeSec the latency per step of the collectives
	// and sends that cross nodes.
	commSecPerToken float64
	interNodeSec    float64
}

// NewDeployment prices llm on tp GPUs of kind hw with the default
// coefficients. tp must divide the attention heads.
func NewDeployment(hw Hardware, llm LLM, tp int) (*Deployment, error) {
	if tp < 1 {
		return nil, fmt.Errorf("tensor parallel size %d: must be at least 1", tp)
	}
	return NewParallelDeployment(hw, llm, Parallelism{TP: tp})
}

// NewParallelDeployment prices llm on hw with the parallel sizes p and
// the default coefficients.
func NewParallelDeployment(hw Hardware, llm LLM, p Parallelism) (*Deployment, error) {
	if p.TP == 0 {
		p.TP = 1
	}
	d := &Deployment{
		Hardware:            hw,
		LLM:                 llm,
		TP:                  p.TP,
		PP:                  max(p.PP, 1),
		DP:                  max(p.DP, 1),
		EP:                  max(p.EP, 1),
		DPAttention:         p.DPAttention,
		MFU:                 DefaultMFU,
		BandwidthEfficiency: DefaultBandwidthEfficiency,
		LinkEfficiency:      DefaultLinkEfficiency,
		StepOverhead:        DefaultStepOverhead,
		BlockSize:           DefaultBlockSize,
	}
	if p.InterNode != nil {
		in := *p.InterNode
		d.InterNode = &in
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	if d.InterNode != nil {
		if err := d.InterNode.validate(int(d.tp()), int(d.pp())); err != nil {
			return nil, err
		}
	}
	d.k = d.consts()
	if d.DPAttention {
		k := d.dpConstants()
		d.dpk = &k
	}
	return d, nil
}

func (d *Deployment) check() error {
	if err := checkShape(d.Hardware, d.LLM, d.TP); err != nil {
		return err
	}
	m := &d.LLM
	pp, dp, ep := d.pp(), d.dp(), int64(max(d.EP, 1))
	switch {
	case d.PP < 0 || d.DP < 0 || d.EP < 0:
		return fmt.Errorf("parallel sizes must not be negative (pp %d, dp %d, ep %d)", d.PP, d.DP, d.EP)
	case pp > m.NumLayers:
		return fmt.Errorf("pipeline parallel size %d exceeds the %d layers of %q", pp, m.NumLayers, m.Name)
	case ep > 1 && !m.IsMoE():
		return fmt.Errorf("expert parallel size %d: %q has no experts", ep, m.Name)
	case ep > 1 && ep != d.tp()*dp:
		return fmt.Errorf("expert parallel size %d must be 1 or TP·DP = %d (vLLM --enable-expert-parallel)", ep, d.tp()*dp)
	case ep > 1 && m.NumExperts%ep != 0:
		return fmt.Errorf("expert parallel size %d does not divide the %d experts of %q", ep, m.NumExperts, m.Name)
	case (pp > 1 || ep > 1) && d.Hardware.LinkBandwidth <= 0:
		return fmt.Errorf("hardware %q: pipeline or expert parallelism needs a link bandwidth", d.Hardware.Name)
	}
	return d.checkDPAttention()
}

func checkShape(hw Hardware, llm LLM, tp int) error {
	switch {
	case tp < 1:
		return fmt.Errorf("tensor parallel size %d: must be at least 1", tp)
	case llm.NumHeads <= 0 || llm.NumLayers <= 0 || llm.HiddenSize <= 0 || llm.WeightBytes <= 0 || llm.KVBytes <= 0:
		return fmt.Errorf("model %q: incomplete shape (use ParseConfig or LoadConfig)", llm.Name)
	case llm.NumHeads%int64(tp) != 0:
		return fmt.Errorf("tensor parallel size %d does not divide the %d attention heads of %q", tp, llm.NumHeads, llm.Name)
	case hw.PeakFLOPS <= 0 || hw.MemBandwidth <= 0 || hw.MemBytes <= 0:
		return fmt.Errorf("hardware %q: peak FLOPs, memory bandwidth and memory must be positive", hw.Name)
	case tp > 1 && hw.LinkBandwidth <= 0:
		return fmt.Errorf("hardware %q: tensor parallel size %d needs a link bandwidth", hw.Name, tp)
	}
	return nil
}

// tp, pp, dp read zero (a literal Deployment) as 1.
func (d *Deployment) tp() int64 { return max(int64(d.TP), 1) }
func (d *Deployment) pp() int64 { return max(int64(d.PP), 1) }
func (d *Deployment) dp() int64 { return max(int64(d.DP), 1) }

// expertShards is how many ways each MoE layer's experts are split.
func (d *Deployment) expertShards() int64 {
	if d.EP > 1 {
		return int64(d.EP)
	}
	return d.tp()
}

// stageLayers is the layer count of the largest pipeline stage.
func (d *Deployment) stageLayers() int64 {
	pp := d.pp()
	return (d.LLM.NumLayers + pp - 1) / pp
}

// KVHeadsPerRank is the KV heads each GPU holds. As in vLLM, heads are
// split across ranks, and replicated when TP exceeds their number. An MLA
// model has one latent "head", replicated on every rank.
func (d *Deployment) KVHeadsPerRank() int64 {
	if d.LLM.IsMLA() {
		return 1
	}
	return max(1, d.LLM.NumKVHeads/d.tp())
}

// kvPerTokenPerLayerPerRank is one layer's KV bytes of a token on a rank.
func (d *Deployment) kvPerTokenPerLayerPerRank() int64 {
	m := &d.LLM
	if m.IsMLA() {
		return m.KVBytesPerTokenPerLayer()
	}
	return 2 * d.KVHeadsPerRank() * m.HeadDim * m.KVBytes
}

// KVBytesPerTokenPerRank is the KV cache one token occupies on each GPU of
// the largest pipeline stage. Sliding-window layers are left out when the
// model also has full-attention layers: vLLM's hybrid KV cache manager
// frees their blocks once they leave the window, so they hold at most a
// window per request rather than a share of every token.
func (d *Deployment) KVBytesPerTokenPerRank() int64 {
	m := &d.LLM
	layers := m.NumLayers
	if s := m.numSlidingLayers(); s < layers {
		layers -= s
	}
	layers = (layers + d.pp() - 1) / d.pp()
	return layers * d.kvPerTokenPerLayerPerRank()
}

// weightSplit returns the bytes per rank of the whole model (all stages):
// replicated vectors, matrices split TP ways, and routed experts split
// over expertShards.
func (d *Deployment) weightSplit() (replicated, split, experts float64) {
	if d.DPAttention {
		return d.dpWeightSplit()
	}
	m := &d.LLM
	c := m.layerCounts()
	wb := float64(m.WeightBytes)
	replicated = float64(c.small+m.HiddenSize) * wb
	split = float64(c.linear)*m.linearBytes() + float64(m.EmbeddingParams())*wb
	if !m.TieWordEmbeddings {
		split += float64(m.LMHeadParams()) * wb
	}
	split /= float64(d.tp())
	experts = float64(c.experts) * m.expertBytes() / float64(d.expertShards())
	return replicated, split, experts
}

// WeightBytesPerRank is the weight memory on each GPU of the largest
// pipeline stage. The matrices (embedding and LM head included: vLLM
// splits them by vocabulary) are split TP ways, routed experts TP or EP
// ways, and the norm vectors, biases and routers are replicated. With
// PP > 1 a stage holds its share of the layers plus, at worst, the
// embedding or the LM head.
func (d *Deployment) WeightBytesPerRank() int64 {
	rep, split, exp := d.weightSplit()
	total := rep + split + exp
	if d.pp() > 1 {
		m := &d.LLM
		vocab := float64(m.EmbeddingParams()*m.WeightBytes) / float64(d.tp())
		ends := vocab
		if !m.TieWordEmbeddings {
			ends = 2 * vocab
		}
		layers := total - ends
		total = layers*float64(d.stageLayers())/float64(m.NumLayers) + vocab
	}
	return int64(math.Ceil(total))
}

func (d *Deployment) consts() stepConsts {
	m := &d.LLM
	tp := float64(d.tp())
	c := m.layerCounts()
	var k stepConsts
	nMoE := m.numMoELayers()
	expertMat, _ := m.denseMLPParts(m.MoEIntermediateSize, false)
	k.linearFLOPsPerToken = 2 * float64(c.linear+nMoE*m.HiddenSize*m.NumExperts) / tp
	k.expertFLOPsPerToken = 2 * float64(nMoE*m.ExpertsPerToken*expertMat) / tp
	k.lmHeadFLOPsPerSeq = 2 * float64(m.LMHeadParams()) / tp
	s := m.numSlidingLayers()
	k.fullPairFLOPs = float64(m.NumLayers-s) * m.attnFLOPsPerPairLayer() / tp
	k.slidingPairFLOPs = float64(s) * m.attnFLOPsPerPairLayer() / tp
	k.window = float64(m.SlidingWindow)
	k.linearPeak = d.Hardware.PeakFLOPS
	if m.FP8Compute && d.Hardware.PeakFP8FLOPS > 0 {
		k.linearPeak = d.Hardware.PeakFP8FLOPS
	}
	perLayer := float64(d.kvPerTokenPerLayerPerRank())
	k.kvFullPerToken = float64(m.NumLayers-s) * perLayer
	k.kvSlidingPerToken = float64(s) * perLayer

	// Every step streams all weights but the embedding table, of which it
	// gathers only the rows of its tokens (negligible). A tied LM head
	// reads the table as the head.
	rep, split, exp := d.weightSplit()
	k.weightBytes = rep + split
	if !m.TieWordEmbeddings {
		k.weightBytes -= float64(m.EmbeddingParams()*m.WeightBytes) / tp
	}
	k.expertBytes = exp
	if m.IsMoE() {
		k.expertPick = 1 - float64(m.ExpertsPerToken)/float64(m.NumExperts)
	}
	k.dpTokens = 1
	if d.EP > 1 {
		k.dpTokens = float64(d.dp())
	}

	// Activations stay 16-bit even when the weights are fp8.
	act := float64(m.HiddenSize * max(m.WeightBytes, 2))
	ring := 2 * (tp - 1) / tp // a ring all-reduce sends 2(TP−1)/TP of the buffer
	allReduces := 2 * float64(m.NumLayers)
	if d.EP > 1 {
		// MoE layers combine through the all-to-all instead.
		allReduces -= float64(nMoE)
		ep := float64(d.EP)
		k.commBytesPerToken += 2 * float64(nMoE) * float64(m.ExpertsPerToken) * act * (ep - 1) / ep
		k.collectives += 2 * float64(nMoE) // a dispatch and a combine
	}
	if d.tp() > 1 {
		// After attention o_proj and after the MLP down projection.
		k.commBytesPerToken += allReduces * ring * act
		k.collectives += allReduces
	}
	if d.pp() > 1 {
		k.ppBytesPerToken = float64(d.pp()-1) * act
		k.collectives += float64(d.pp() - 1)
	}
	if in := d.InterNode; in != nil {
		k.interNode(d, in, act, allReduces, int(nMoE))
	}
	return k
}

// interNode prices the communication of a worker spanning nodes (see the
// note at InterNode): the TP group's collectives over NVLink or, when the
// group spans nodes, at the ring's inter-node bandwidth; the stage sends
// that cross nodes over one inter-node link, the others over NVLink.
func (k *stepConsts) interNode(d *Deployment, in *InterNode, act, allReduces float64, nMoE int) {
	hw := d.Hardware
	tp, pp := int(d.tp()), int(d.pp())
	tpBW := hw.LinkBandwidth
	crossSends := float64(in.Nodes - 1)
	var crossColl float64
	if tp > in.gpusPerNode(tp, pp) {
		tpBW = in.ringBandwidth(hw, tp, pp)
		crossSends = float64(pp - 1)
		if tp > 1 {
			crossColl += allReduces
		}
		if d.EP > 1 {
			crossColl += 2 * float64(nMoE)
		}
	}
	k.commSecPerToken = k.commBytesPerToken/tpBW +
		(float64(pp-1)-crossSends)*act/hw.LinkBandwidth + crossSends*act/in.linkBandwidth(hw)
	k.interNodeSec = (crossColl + crossSends) * in.Latency.Seconds()
}

// StepTerms are the parts of a step's time at full efficiency, in
// seconds: what the coefficients of a Deployment divide. Calibration
// regresses measured times on them.
type StepTerms struct {
	LinearSec float64 // matmul and LM-head FLOPs at peak, the routed experts' included
	// ExpertSec is the part of LinearSec that the routed experts' GEMMs
	// are (0 for a dense model): what ExpertMFU divides, the rest of
	// LinearSec being MFU's. It is kept inside LinearSec so that a
	// Deployment without ExpertMFU, and every fit that regresses on
	// LinearSec, prices a step exactly as before the term existed.
	ExpertSec    float64
	AttentionSec float64 // attention FLOPs at PeakFLOPS
	WeightSec    float64 // weight bytes read at MemBandwidth
	KVSec        float64 // KV bytes read and written at MemBandwidth
	CommSec      float64 // collective bytes at LinkBandwidth (and the inter-node links)
	// Collectives is the number of collective operations (all-reduces,
	// all-to-alls, stage sends) the step makes, each of which costs
	// CollectiveLatency besides its bytes.
	Collectives float64
	// InterNodeLatencySec is the inter-node latency of the collectives
	// and sends that cross nodes (InterNode.Latency each), a fixed cost.
	InterNodeLatencySec float64
	// EagerLayers is the number of decoder layers whose kernels the
	// step launches one at a time (see Deployment.CUDAGraphMaxBS); 0 for
	// a step replayed as a CUDA graph.
	EagerLayers float64
	// UncompiledLayers is the number of decoder layers the step runs
	// without torch.compile on an engine that compiles its small decode
	// batches (see Deployment.TorchCompileMaxBS): every layer of a step
	// in RegimeGraph or RegimeEager there; 0 for a compiled step and on
	// an engine that compiles nothing.
	UncompiledLayers float64
}

// Terms returns the step terms of b; an empty batch has none.
func (d *Deployment) Terms(b *Batch) StepTerms {
	if b == nil || len(b.Prefill) == 0 && len(b.Decode) == 0 {
		return StepTerms{}
	}
	if d.DPAttention {
		return d.dpTerms(b)
	}
	k := d.constants()
	s := sumBatch(b, k.slidingPairFLOPs > 0, k.window)
	t := d.terms(k, s.tokens, s.seqs, s.ctxFull, s.ctxSliding, s.pairsFull, s.pairsSliding)
	d.regimeTerms(&t, len(b.Prefill) > 0, len(b.Decode))
	return t
}

// batchSums are what a step's terms need of its batch: its tokens and
// sequences, the contexts its tokens read and its attention's (query,
// key) pairs, over full-attention layers and, when the model has them,
// over sliding-window ones.
type batchSums struct {
	tokens, seqs            float64
	ctxFull, ctxSliding     float64
	pairsFull, pairsSliding float64
}

// sumBatch sums b for Terms and the DP-attention ranks (dpSums); the
// sliding sums, with window w, only when sliding is set.
func sumBatch(b *Batch, sliding bool, w float64) batchSums {
	var s batchSums
	for i := range b.Prefill {
		t, c := float64(b.Prefill[i].Tokens), float64(b.Prefill[i].Context)
		s.tokens += t
		s.ctxFull += c
		s.pairsFull += t * (c + (t+1)/2)
		if sliding {
			s.ctxSliding += min(c, w)
			s.pairsSliding += slidingPairs(t, c, w)
		}
	}
	// A decode token over c cached ones reads c and attends to c + 1:
	// the loop only sums contexts (int64, exact), the rest is per batch.
	var decodeCtx int64
	for _, c := range b.Decode {
		decodeCtx += c
	}
	nDecode := float64(len(b.Decode))
	s.ctxFull += float64(decodeCtx)
	s.pairsFull += float64(decodeCtx) + nDecode
	if sliding {
		for _, c := range b.Decode {
			cf := float64(c)
			s.ctxSliding += min(cf, w)
			s.pairsSliding += min(cf+1, w)
		}
	}
	s.tokens += nDecode
	s.seqs = float64(len(b.Prefill)) + nDecode
	return s
}

// constants returns the deployment's per-token constants.
func (d *Deployment) constants() *stepConsts {
	if d.k.fullPairFLOPs == 0 && d.k.slidingPairFLOPs == 0 {
		// A Deployment built as a literal rather than by NewDeployment.
		kk := d.consts()
		return &kk
	}
	return &d.k
}

// terms turns a batch's sums into its step terms.
func (d *Deployment) terms(k *stepConsts, tokens, seqs, ctxFull, ctxSliding, pairsFull, pairsSliding float64) StepTerms {
	t := d.sizeTerms(k, tokens, seqs)
	t.AttentionSec, t.KVSec = d.contextTerms(k, tokens, ctxFull, ctxSliding, pairsFull, pairsSliding)
	return t
}

// sizeTerms returns the step terms that depend on a batch's tokens and
// sequences alone: all but AttentionSec and KVSec (contextTerms).
func (d *Deployment) sizeTerms(k *stepConsts, tokens, seqs float64) StepTerms {
	peak, bw := d.Hardware.PeakFLOPS, d.Hardware.MemBandwidth
	var t StepTerms
	t.LinearSec = (k.linearFLOPsPerToken+k.expertFLOPsPerToken)*tokens/k.linearPeak + k.lmHeadFLOPsPerSeq*seqs/peak
	t.ExpertSec = k.expertFLOPsPerToken * tokens / k.linearPeak
	wb := k.weightBytes
	if k.expertBytes > 0 {
		wb += k.expertBytes * (1 - math.Pow(k.expertPick, tokens*k.dpTokens))
	}
	t.WeightSec = wb / bw
	switch {
	case k.commSecPerToken > 0:
		t.CommSec = k.commSecPerToken * tokens
	case k.commBytesPerToken+k.ppBytesPerToken > 0:
		t.CommSec = (k.commBytesPerToken + k.ppBytesPerToken) * tokens / d.Hardware.LinkBandwidth
	}
	t.Collectives = k.collectives
	t.InterNodeLatencySec = k.interNodeSec
	return t
}

// contextTerms returns a batch's attention and KV seconds, the step terms
// that depend on its contexts.
func (d *Deployment) contextTerms(k *stepConsts, tokens, ctxFull, ctxSliding, pairsFull, pairsSliding float64) (attention, kv float64) {
	peak, bw := d.Hardware.PeakFLOPS, d.Hardware.MemBandwidth
	attention = (k.fullPairFLOPs*pairsFull + k.slidingPairFLOPs*pairsSliding) / peak
	kv = (k.kvFullPerToken*(ctxFull+tokens) + k.kvSlidingPerToken*(ctxSliding+tokens)) / bw
	return attention, kv
}

// StepTime prices one forward pass over b. An empty batch costs 0. It
// does not allocate.
func (d *Deployment) StepTime(b *Batch) time.Duration {
	if b == nil || len(b.Prefill) == 0 && len(b.Decode) == 0 {
		return 0
	}
	if d.DPAttention {
		return d.dpStepTime(b)
	}
	t := d.Terms(b)
	return d.timeOf(&t)
}

// Roofline returns the compute and memory seconds of step terms at the
// deployment's efficiencies: the two sides of the roofline, whose max
// (plus SerialFraction of the lesser) a step pays.
func (d *Deployment) Roofline(t StepTerms) (compute, memory float64) {
	return d.roofline(&t)
}

// roofline is Roofline of *t.
//
// Note: the step's pricing passes its terms by pointer: by value, each
// call spilled and reloaded the ten float registers of StepTerms, some
// 40 instructions a call (timeOf, roofSec, priced and Roofline took
// 42 M instructions of BenchmarkReplayMooncakeRouters/round_robin).
func (d *Deployment) roofline(t *StepTerms) (compute, memory float64) {
	weight, kvEff, apart := d.memorySide(t.WeightSec)
	return d.linearSide(t) + t.AttentionSec/d.attentionMFU(), memoryTime(weight, t.KVSec, kvEff, apart)
}

// attentionMFU is the attention kernels' efficiency: AttentionMFU, or MFU.
func (d *Deployment) attentionMFU() float64 {
	if d.AttentionMFU <= 0 {
		return d.MFU
	}
	return d.AttentionMFU
}

// linearSide is the compute side of t's roofline before its attention
// term: its linear FLOPs at MFU, the routed experts' at ExpertMFU when
// set.
func (d *Deployment) linearSide(t *StepTerms) float64 {
	if d.ExpertMFU > 0 && t.ExpertSec > 0 {
		return (t.LinearSec-t.ExpertSec)/d.MFU + t.ExpertSec/d.ExpertMFU
	}
	// The form without the term (the same rounding: replays without
	// ExpertMFU are unchanged).
	return t.LinearSec / d.MFU
}

// memorySide returns what the memory side of a roofline takes from
// weightSec and the coefficients: with KVBandwidthEfficiency set
// (apart), the weights' time at BandwidthEfficiency and the KV's
// efficiency; else weightSec and the one efficiency for both.
func (d *Deployment) memorySide(weightSec float64) (weight, kvEff float64, apart bool) {
	if kvEff := d.KVBandwidthEfficiency; kvEff > 0 {
		return weightSec / d.BandwidthEfficiency, kvEff, true
	}
	// One efficiency for both, in the form it always had (the same
	// rounding, so replays without the coefficient are unchanged).
	return weightSec, d.BandwidthEfficiency, false
}

// memoryTime is the memory side of a roofline whose KV seconds are kvSec,
// from memorySide's weight, kvEff and apart.
func memoryTime(weight, kvSec, kvEff float64, apart bool) float64 {
	if apart {
		return weight + kvSec/kvEff
	}
	return (weight + kvSec) / kvEff
}

// timeOf prices step terms: the roofline of compute and memory at their
// efficiencies, plus communication and the fixed overhead.
func (d *Deployment) timeOf(t *StepTerms) time.Duration {
	return d.priced(d.roofSec(t), t)
}

// priced adds to sec, a step's roofline seconds, what t's communication,
// collectives, inter-node latency, launches and uncompiled layers cost,
// and the fixed overhead: the tail of every step price (timeOf, and
// dpTime's over the slowest rank plus the shared part; a DecodePricer's
// plan works its terms out once, as here: decodePlan).
func (d *Deployment) priced(sec float64, t *StepTerms) time.Duration {
	if t.CommSec > 0 {
		sec += t.CommSec / d.LinkEfficiency
	}
	if d.CollectiveLatency > 0 {
		sec += t.Collectives * d.CollectiveLatency.Seconds()
	}
	sec += t.InterNodeLatencySec
	if t.EagerLayers > 0 && d.EagerLayerLaunch > 0 {
		sec += t.EagerLayers * d.EagerLayerLaunch.Seconds()
	}
	if t.UncompiledLayers > 0 && d.UncompiledLayer > 0 {
		sec += t.UncompiledLayers * d.UncompiledLayer.Seconds()
	}
	if t.EagerLayers > 0 && d.EagerLayerCPU > 0 {
		sec = max(sec, t.EagerLayers*d.EagerLayerCPU.Seconds())
	}
	return time.Duration(math.Round(sec*1e9)) + d.StepOverhead
}

// DecodeStepTime implements DecodeSumModel: without sliding-window
// layers, a batch of decodes is priced by their number and the sum of
// their contexts alone, exactly as StepTime prices it.
func (d *Deployment) DecodeStepTime(n int, ctx int64) (time.Duration, bool) {
	k := d.constants()
	if k.slidingPairFLOPs > 0 || n <= 0 {
		return 0, false
	}
	if d.DPAttention {
		return d.dpDecodeStepTime(n, ctx), true
	}
	// The sums of Terms for a batch without prefill, in its order.
	nDecode := float64(n)
	var ctxFull, pairsFull, tokens, seqs float64
	ctxFull += float64(ctx)
	pairsFull += float64(ctx) + nDecode
	tokens += nDecode
	seqs = 0 + nDecode
	t := d.terms(k, tokens, seqs, ctxFull, 0, pairsFull, 0)
	d.regimeTerms(&t, false, n)
	return d.timeOf(&t), true
}

var _ DecodeSumModel = (*Deployment)(nil)
