package replay

import (
	"fmt"
	"math"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// Tiers below the GPU, fastest first, as an Offload names them and as a
// request's hit tokens count them (trace.Request's host, storage and
// remote hit tokens).
const (
	tierHost = iota
	tierDisk
	tierRemote
	numTiers
)

// Write policies (SGLang's --hicache-write-policy names).
const (
	WriteThrough = "write_through" // every computed block goes to every tier
	WriteBack    = "write_back"    // to the host tier; lower tiers take what it evicts
)

// An OffloadConfig holds the KV offloading settings of a worker's engine,
// under the engines' own names; it is part of SchedulerConfig, and
// package deploy turns it into an Offload (the tiers' capacities on the
// node's links). Zero values are absent: no offloading.
type OffloadConfig struct {
	// KVOffloadingSize is vLLM's --kv-offloading-size: each worker's CPU
	// tier in GiB (0: none).
	KVOffloadingSize float64 `yaml:"kv_offloading_size,omitempty"`
	// KVOffloadingBackend is vLLM's --kv-offloading-backend: "native"
	// (default: vLLM's OffloadingConnector) or "lmcache" (LMCache's
	// tiers; see LMCache).
	KVOffloadingBackend string `yaml:"kv_offloading_backend,omitempty"`
	// LMCache holds LMCache's own settings (its tiers turn on with it).
	LMCache *LMCacheConfig `yaml:"lmcache,omitempty"`
}

// Offloading backends (OffloadConfig.KVOffloadingBackend).
const (
	OffloadNative  = "native"
	OffloadLMCache = "lmcache"
)

// An LMCacheConfig holds LMCache's settings under its configuration
// file's names (its LMCACHE_* environment variables): a chunk of
// ChunkSize tokens is the unit it stores, looks up and loads; local_cpu,
// local_disk and remote backends are its tiers.
type LMCacheConfig struct {
	ChunkSize        int64   `yaml:"chunk_size,omitempty"`          // tokens per chunk (default 256)
	MaxLocalCPUSize  float64 `yaml:"max_local_cpu_size,omitempty"`  // CPU tier, GiB (default 5; vLLM's kv_offloading_size sets it)
	LocalDisk        string  `yaml:"local_disk,omitempty"`          // a path ("file:///...") turns the disk tier on
	MaxLocalDiskSize float64 `yaml:"max_local_disk_size,omitempty"` // disk tier, GiB
	RemoteURL        string  `yaml:"remote_url,omitempty"`          // a URL turns the remote tier on (its size: the cluster's kv_store_gib)
}

// An Offload is a replay's KV offloading, resolved to physical figures:
// the node the workers run on, the size of a token's KV, the tier
// capacities and the write policy. The engines' own keys (vLLM's
// kv_offloading_size, LMCache's chunk_size and max_local_cpu_size,
// SGLang's hicache_*) are turned into one by package deploy.
//
// Workers fill nodes in order: Node.GPUs / GPUsPerWorker workers a node.
// Each worker has its own host and disk tiers (vLLM's CPU pool, LMCache's
// local CPU and disk backends, SGLang's L2 are per instance) and a PCIe
// link per direction and GPU; the remote tier is one store shared by the
// whole cluster over each node's NIC.
type Offload struct {
	Node            model.Node
	GPUsPerWorker   int   // GPUs of one worker (TP×PP): its PCIe links, used in parallel
	KVBytesPerToken int64 // one worker's KV bytes per token, all its GPUs
	// BlockTokens is the tier block: the offloaded block of vLLM (a
	// multiple of its block_size), LMCache's chunk_size, SGLang's
	// page size. A multiple of the scheduler's block size.
	BlockTokens int64
	// Tier capacities in tier blocks: per worker (host, disk) and for
	// the cluster (remote); 0: no such tier.
	HostBlocks, DiskBlocks, RemoteBlocks int64
	// DiskRemote says the disk tier is reached over the network (a
	// shared file system), not the node's NVMe. (Unused for now: false.)
	WritePolicy string // WriteThrough (default), WriteBack or (SGLang) WriteThroughSelective
	// HiCache, when set, makes these SGLang's HiCache tiers (hicache.go):
	// the host tier is its L2 pool, the disk or remote tier its L3
	// storage, a tier block its page.
	HiCache *HiCache

	blockByBlock bool // tests: store private blocks one by one, not as runs
}

// A HiCache holds the settings of SGLang's hierarchical cache that are
// not tier sizes: the L3 prefetch policy and its figures (SGLang's
// hicache_storage_backend_extra_config), the prefetch thread's time per
// storage query, and the forward's layers, over which a load from host
// memory overlaps the step's compute.
type HiCache struct {
	PrefetchPolicy         string        // best_effort, wait_complete or timeout
	PrefetchThreshold      int64         // tokens: a smaller storage hit is not fetched
	PrefetchTimeoutBase    time.Duration // timeout policy: base
	PrefetchTimeoutPerPage time.Duration // and per page fetched
	// StorageQuery is the prefetch thread's time for one operation's
	// storage query past the L3 links' round trip (hashing its pages,
	// batch_exists, the TP all-reduce of the hit count), one operation at
	// a time (hicache.go); 0: the round trip alone.
	StorageQuery time.Duration
	Layers       int64 // layers of the forward pass (≥ 1)
}

// Validate reports an Offload the replay cannot run.
func (o *Offload) Validate(blockSize int64) error {
	switch {
	case o.GPUsPerWorker <= 0:
		return fmt.Errorf("offload: %d GPUs per worker", o.GPUsPerWorker)
	case o.Node.GPUs < o.GPUsPerWorker:
		return fmt.Errorf("offload: node %q has %d GPUs, a worker needs %d", o.Node.Name, o.Node.GPUs, o.GPUsPerWorker)
	case o.KVBytesPerToken <= 0:
		return fmt.Errorf("offload: %d KV bytes per token", o.KVBytesPerToken)
	case o.BlockTokens <= 0 || o.BlockTokens%blockSize != 0:
		return fmt.Errorf("offload: a tier block of %d tokens is not a multiple of the %d-token KV block", o.BlockTokens, blockSize)
	case o.HostBlocks < 0 || o.DiskBlocks < 0 || o.RemoteBlocks < 0:
		return fmt.Errorf("offload: negative tier capacity")
	case o.WritePolicy != "" && o.WritePolicy != WriteThrough && o.WritePolicy != WriteBack &&
		(o.HiCache == nil || o.WritePolicy != WriteThroughSelective):
		return fmt.Errorf("offload: write policy %q (want %s or %s)", o.WritePolicy, WriteThrough, WriteBack)
	}
	if h := o.HiCache; h != nil {
		switch {
		case h.PrefetchPolicy != PrefetchBestEffort && h.PrefetchPolicy != PrefetchWaitComplete && h.PrefetchPolicy != PrefetchTimeout:
			return fmt.Errorf("offload: prefetch policy %q", h.PrefetchPolicy)
		case h.PrefetchThreshold < 0 || h.PrefetchTimeoutBase < 0 || h.PrefetchTimeoutPerPage < 0 || h.StorageQuery < 0:
			return fmt.Errorf("offload: negative prefetch threshold, timeout or storage query time")
		case h.Layers < 1:
			return fmt.Errorf("offload: %d layers", h.Layers)
		case o.DiskBlocks > 0 && o.RemoteBlocks > 0:
			return fmt.Errorf("offload: HiCache has one storage tier, not a disk and a remote one")
		}
	}
	return o.Node.Validate()
}

// offload is the engine's state of the tiers and their transfers.
type offload struct {
	e          *engine
	bs         int64 // tokens per KV block
	err        error // an internal error met where none can be returned
	spec       Offload
	blockBytes int64 // bytes of one tier block
	nodes      []*offNode
	remote     *kvcache.Tier
	// The transfers in flight, by slot: a transfer's fabric id is
	// its sequence number times xferSlots plus its slot, so ids rise
	// in the order transfers start (the fabric breaks ties by id) and
	// name their slot without a map.
	xfers     []*xfer
	freeXfers []int32 // slots of xfers not in flight
	seq       int64   // transfers started
	nextID    int64   // the id of the last transfer started
	spare     []*xfer // completed stores and vLLM loads, for storeXfer
}

// xferSlots bounds the transfers in flight at once (offload.xfers).
const xferSlots = 1 << 24

// An offNode is one node's links and the transfers on them.
type offNode struct {
	f               *kvcache.Fabric
	dram, nvme, net int
	queued          trace.Time     // the time of its queued evTransfer; never: none
	class           []int          // each link's class (linkH2D, ...), for per-second statistics
	done            []kvcache.Done // scratch of advance
}

// An offWorker is one worker's tiers and PCIe links.
type offWorker struct {
	o          *offload
	spec       *Offload // its pool's tiers (Options.Offload, or DecodeOffload)
	blockBytes int64    // bytes of one of its tier blocks
	node       int
	h2d, d2h   int
	tiers      [numTiers]*kvcache.Tier // nil: none
	loading    int                     // requests whose load is in flight
	skipped    []*reqState             // scratch of build: requests admission skipped
	storeTiers []int                   // tiers a computed block is written to
	ownOnly    bool                    // a decode worker: it writes to its own tiers alone (tiers)

	// HiCache (hicache.go): the L2 loads of the step being built, and
	// of the step in flight the loads left, its start and compute time.
	stepLoads   []*xfer
	stepLeft    int
	stepStart   trace.Time
	stepCompute time.Duration
	now         trace.Time  // the time of the step being built (write_back)
	wb          []uint64    // scratch of writeBack
	hits        []int32     // scratch: the slots hostRun or prefetch found (vLLM: lookup)
	unissued    []*reqState // HiCache L3: requests whose prefetch the next build issues (receive)
	queryFree   trace.Time  // HiCache L3: when the prefetch thread ends the queries issued so far
}

// An xfer is a transfer in flight: a load of blocks into a request's GPU
// blocks, or a store of blocks into a tier.
type xfer struct {
	w     *worker
	r     *reqState // load or prefetch: the request; nil for a store
	tier  int
	keys  []uint64 // (a vLLM load: none, its slots name its blocks)
	slots []int32  // each key's slot in the tier (a store: Tier.Store's; a load: the pinned blocks')
	kind  uint8    // xferStore, xferLoad, ... (hicache.go)
	// A store, after keys: runN private blocks of request owner from
	// its tier block runFirst on, held as one run (Tier.StoreRun).
	runFirst, runN int64
	owner          uint64
	run            kvcache.RunRef
}

// newOffload returns the offloading of workers, the first tiered of which
// get tiers, on nodes they fill in order (the prefill pool, when the
// decode pool has none: its workers have no links here, w.off nil). With
// decode (Options.DecodeOffload) the decode pool's workers, from
// e.prefillSlots on, have its tiers, links and nodes, the prefill pool's
// spec's.
func newOffload(e *engine, spec Offload, decode *Offload, bs int64, workers []*worker, tiered int) (*offload, error) {
	o := &offload{e: e, bs: bs, spec: spec, blockBytes: spec.BlockTokens * spec.KVBytesPerToken}
	if o.spec.WritePolicy == "" {
		o.spec.WritePolicy = WriteThrough
	}
	if spec.RemoteBlocks > 0 {
		o.remote = kvcache.NewTier("remote", spec.RemoteBlocks)
	}
	pools := []struct {
		spec  *Offload
		slots []*worker
	}{{&o.spec, workers[:tiered]}}
	if decode != nil {
		d := *decode
		d.WritePolicy = o.spec.WritePolicy
		pools = []struct {
			spec  *Offload
			slots []*worker
		}{{&o.spec, workers[:e.prefillSlots]}, {&d, workers[e.prefillSlots:tiered]}}
	}
	for _, p := range pools {
		if err := o.nodesFor(p.spec, p.slots); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// nodesFor gives workers the tiers of spec, and the PCIe links of its
// workers on nodes of its node that they fill in order.
func (o *offload) nodesFor(spec *Offload, workers []*worker) error {
	blockBytes := spec.BlockTokens * spec.KVBytesPerToken
	perNode := spec.Node.GPUs / spec.GPUsPerWorker
	n := spec.Node
	// A worker's GPUs move their KV shards in parallel, each over its
	// own PCIe link: one link of that many times the bandwidth.
	pcie := n.PCIe
	pcie.Bandwidth *= float64(spec.GPUsPerWorker)
	nvme := n.NVMe
	nvme.Bandwidth = nvme.EffectiveBandwidth(blockBytes)
	var node *offNode
	for i, w := range workers {
		if i%perNode == 0 {
			node = &offNode{f: kvcache.NewFabric(), queued: never}
			var err error
			for _, x := range []struct {
				l   model.Link
				dst *int
			}{{n.HostDRAM, &node.dram}, {nvme, &node.nvme}, {n.Network, &node.net}} {
				if *x.dst, err = node.f.AddLink(x.l); err != nil {
					return err
				}
			}
			o.nodes = append(o.nodes, node)
		}
		ow := &offWorker{o: o, spec: spec, blockBytes: blockBytes, node: len(o.nodes) - 1}
		h2d, d2h := pcie, pcie
		h2d.Name, d2h.Name = w.name+"-h2d", w.name+"-d2h"
		var err error
		if ow.h2d, err = node.f.AddLink(h2d); err != nil {
			return err
		}
		if ow.d2h, err = node.f.AddLink(d2h); err != nil {
			return err
		}
		o.tiers(ow, w)
	}
	return nil
}

// tiers gives worker w, whose links ow holds, its tiers: host and disk
// tiers of its own, empty, and the cluster's remote store; the tiers a
// computed block is written to; under HiCache's write_back, its radix
// cache's evictions bound to its L2. It sets w.off to ow.
//
// A decode worker (disaggregation.decode_kv_tiers) writes to its own
// tiers alone: its prompts' prefill workers wrote them to the remote
// store already, which takes no copy of what it holds (LMCache's store
// skips a key a backend contains), and a request's private blocks are
// offered to a tier once (kvcache.Tier.StoreRun).
func (o *offload) tiers(ow *offWorker, w *worker) {
	spec := ow.spec
	if spec.HostBlocks > 0 {
		ow.tiers[tierHost] = kvcache.NewTier(w.name+"-host", spec.HostBlocks)
	}
	if spec.DiskBlocks > 0 {
		ow.tiers[tierDisk] = kvcache.NewTier(w.name+"-disk", spec.DiskBlocks)
	}
	ow.tiers[tierRemote] = o.remote
	ow.ownOnly = o.e.pd != nil && w.id >= o.e.pd.prefill
	for t, tr := range ow.tiers {
		if ow.ownOnly && t == tierRemote {
			continue
		}
		if tr != nil && (spec.WritePolicy == WriteThrough || len(ow.storeTiers) == 0) {
			ow.storeTiers = append(ow.storeTiers, t)
		}
	}
	if spec.HiCache != nil {
		// L2 only: L3 takes what L2's writes complete (stored);
		// under write_back, what the radix cache evicts.
		ow.storeTiers = ow.storeTiers[:0]
		if spec.WritePolicy != WriteBack {
			ow.storeTiers = append(ow.storeTiers, tierHost)
		} else {
			w.s.(*sglang).tree.OnEvict = func(key []kvcache.Run, start int64) { o.writeBack(w, key, start) }
		}
	}
	w.off = ow
}

// evictionsStore reports whether evicting from a worker's GPU cache starts
// transfers (SGLang's HiCache under write_back: the radix cache's
// evictions go to L2), so that a step may only be built at an event's
// time.
func (o *offload) evictionsStore() bool {
	return o.spec.HiCache != nil && o.spec.WritePolicy == WriteBack
}

// fresh gives w, a worker that starts in the slot whose stopped worker had
// old (autoscaling), the slot's PCIe links and node and tiers of its own
// (tiers): host and disk tiers empty, as a new pod's LMCache (or SGLang's
// HiCache: its L2, and a file L3) starts with none, and the cluster's
// remote store as it is. Stores still on their way to old's tiers
// complete there, out of every worker's reach.
func (o *offload) fresh(old *offWorker, w *worker) {
	o.tiers(&offWorker{o: o, spec: old.spec, blockBytes: old.blockBytes, node: old.node, h2d: old.h2d, d2h: old.d2h}, w)
}

// path returns the links a transfer between worker ow's GPUs and tier t
// crosses. Data from NVMe or the network lands in host memory and crosses
// PCIe, unless GPUDirect Storage is set; a store to a lower tier when
// the worker has a host tier is written from host memory (the host copy
// crossed PCIe once, with its own store). It appends them to dst, which
// callers keep on their stack: a path made per transfer was most of a
// tiered replay's allocations.
func (o *offload) path(dst []int, ow *offWorker, t int, load bool) []int {
	n := o.nodes[ow.node]
	pcie := ow.d2h
	if load {
		pcie = ow.h2d
	}
	var dev int
	switch t {
	case tierHost:
		return append(dst, n.dram, pcie)
	case tierDisk:
		dev = n.nvme
	default:
		dev = n.net
	}
	if !load && ow.tiers[tierHost] != nil {
		return append(dst, n.dram, dev)
	}
	if ow.spec.Node.GPUDirectStorage {
		return append(dst, dev, pcie)
	}
	return append(dst, dev, n.dram, pcie)
}

// privateFrom returns the index of r's first private tier block: its
// content, and every later block's, no other request routed where the
// tiers are shared can have (kvcache.BlockHasher.Private; for HiCache's
// pages, those whose last token lies past r's shared trace blocks), so
// only r itself can ask for it, after a preemption.
func (o *offload) privateFrom(r *reqState) int64 {
	if o.spec.HiCache != nil {
		var shared int64
		if r.in != nil {
			if tb, ok := r.in.BlockSize.Get(); ok {
				shared = min(int64(r.shared)*tb, r.prompt)
			}
		}
		return shared / o.spec.BlockTokens
	}
	return r.hashChain(o.bs).Shared() / (o.spec.BlockTokens / o.bs)
}

// runs reports whether private blocks are stored as runs: not under
// write-back, which stores a tier's victims below by key.
func (o *offload) runs() bool { return o.spec.WritePolicy != WriteBack && !o.spec.blockByBlock }

// expose makes r's private blocks in w's tiers findable
// (kvcache.Tier.Promote) before r looks its prompt up: r is the only one
// that can, and only once it stored some (a preemption).
func (o *offload) expose(w *worker, r *reqState) {
	if !o.runs() || r.stored <= o.privateFrom(r) {
		return
	}
	keys := o.tierKeys(r, math.MaxInt64)
	for _, tr := range w.off.tiers {
		if tr != nil {
			tr.Promote(uint64(r.idx), keys)
		}
	}
}

// lookupBlocks is how many of r's tier keys its lookups need: none past
// its first private block, which no tier holds unless r stored it (then
// expose has made it findable) or, under write-back, a tier took it
// from the one above.
func (o *offload) lookupBlocks(r *reqState) int64 {
	if pf := o.privateFrom(r); o.runs() && r.stored <= pf {
		return pf
	}
	return math.MaxInt64
}

// tierKeys returns the keys of r's first m full prompt tier blocks (or
// more, or all there are, if fewer): the chained
// hash of each tier block's last KV block, so that equal prefixes have
// equal keys (vLLM's offloaded block hashes are every block_size_factor-th
// request block hash the same way), as kvcache.TierKey lays them out for
// the tiers' indexes.
//
// Note: a private block's key is needed only to look it up, which only
// its owner can and only after it stored the block, so the keys are
// computed up to the first private block (lookupBlocks, store) until
// then: they were most of the cost left of a block stored as a run.
func (o *offload) tierKeys(r *reqState, m int64) []uint64 {
	if o.spec.HiCache != nil {
		return o.pageKeys(o.e.workers[r.worker], r, m)
	}
	n := min(m, r.prompt/o.spec.BlockTokens)
	if int64(len(r.tierKeys)) >= n {
		return r.tierKeys
	}
	// The chain of r's engine blocks (vLLM's block size): the shared
	// blocks' hashes are the ones its scheduler commits, computed once.
	c := r.hashChain(o.bs)
	h, shared := c.Hasher(), c.Shared()
	f := o.spec.BlockTokens / o.bs
	keys := r.tierKeys[:0]
	group := uint64(0)
	lastTrace, lastPrivate := int64(-1), false
	for i := range n {
		// A tier block's key is its last engine block's hash; a
		// private hash depends on the request and the block alone.
		k := i*f + f - 1
		var x uint64
		private := k >= shared
		if private {
			x, _ = h.Hash(kvcache.Root, k)
		} else {
			x, _ = c.Hash(k)
		}
		// A key group (kvcache.TierKey) starts where two prompts
		// sharing the blocks before may part: at a trace block's
		// first tier block and at the first private one, besides
		// every GroupBlocks-th; else the groups of the prompts that
		// part within one would pile up in one bucket of the index.
		tb := int64(-1)
		if h.TraceBlock > 0 {
			tb = ((k+1)*o.bs - 1) / h.TraceBlock // of its last token
		}
		if i%kvcache.GroupBlocks == 0 || tb != lastTrace || private != lastPrivate {
			group = x
		}
		lastTrace, lastPrivate = tb, private
		keys = append(keys, kvcache.TierKey(x, group, i))
	}
	r.tierKeys = keys
	return keys
}

// lookup returns how many prompt tokens past the first done tokens r can
// load from w's tiers, and fills r.loadFrom with the tier of each tier
// block from the first one past done, and w.off.hits with its slot
// there: each block comes from the fastest tier that holds it, and the
// hit ends at the first block none holds. The hit leaves at least one
// prompt token to compute, and a hit that does not reach past done by a
// whole tier block loads nothing (vLLM's get_num_new_matched_tokens).
//
// Note: the slots spare admitLoad and startLoad a lookup of each block
// in its tier's index to check, pin and unpin it: nothing changes in the
// tiers between lookup and startLoad, and a pinned block keeps its slot.
func (o *offload) lookup(w *worker, r *reqState, done int64) int64 {
	ow := w.off
	T := o.spec.BlockTokens
	o.expose(w, r)
	keys := o.tierKeys(r, o.lookupBlocks(r))
	maxBlocks := min(int64(len(keys)), (r.numTokens()-1)/T)
	start := done / T
	from, slots := r.loadFrom[:0], ow.hits[:0]
	for b := start; b < maxBlocks; b++ {
		t, s := -1, int32(0)
		for i, tr := range ow.tiers {
			if tr == nil {
				continue
			}
			if x, ok := tr.Find(keys[b]); ok {
				t, s = i, x
				break
			}
		}
		if t < 0 {
			break
		}
		from, slots = append(from, int8(t)), append(slots, s)
	}
	r.loadFrom, ow.hits = from, slots
	got := (start+int64(len(from)))*T - done
	if got < T {
		r.loadFrom, ow.hits = from[:0], slots[:0]
		return 0
	}
	// Touch every held block of the prompt, as vLLM's lookup does.
	for i, t := range from {
		ow.tiers[t].TouchAt(slots[i])
	}
	return got
}

// startLoad starts the loads of r's tier blocks found by lookup, at now,
// one transfer per tier, and records its hit tokens by tier.
func (o *offload) startLoad(e *engine, w *worker, r *reqState, done int64, now trace.Time) error {
	T := o.spec.BlockTokens
	start := done / T
	first := true
	for t := range numTiers {
		var x *xfer
		var slots []int32
		for i, bt := range r.loadFrom {
			if int(bt) != t {
				continue
			}
			if x == nil {
				x = o.storeXfer(w, t)
				x.r, x.kind, slots = r, xferLoad, x.slots
			}
			s := w.off.hits[i]
			w.off.tiers[t].PinAt(s)
			slots = append(slots, s)
		}
		if x == nil {
			continue
		}
		x.slots = slots
		tokens := int64(len(slots)) * T
		if first {
			// The first block may be partly in GPU memory already.
			tokens -= done - start*T
			first = false
		}
		if !r.scheduled {
			r.tierHit[t] += tokens
		}
		var links [3]int
		if err := o.start(e, w, now, x, int64(len(slots))*w.off.blockBytes, o.path(links[:0], w.off, t, true)); err != nil {
			return err
		}
		r.loadLeft++
	}
	r.loadStart = now
	w.off.loading++
	return nil
}

// start starts transfer x of n bytes over path and queues the node's next
// transfer event.
func (o *offload) start(e *engine, w *worker, now trace.Time, x *xfer, n int64, path []int) error {
	return o.startAfter(e, w, now, 0, x, n, path)
}

// startAfter is start for a transfer decided at now whose bytes are sent
// from now+wait (HiCache's fetch after its storage query). Its bytes
// count in the second it is decided, as every transfer's count in one
// second whatever its length: a later second's row, made now, would take
// the tiers' occupancy of now.
func (o *offload) startAfter(e *engine, w *worker, now trace.Time, wait time.Duration, x *xfer, n int64, path []int) error {
	node := o.nodes[w.off.node]
	var slot int32
	if k := len(o.freeXfers); k > 0 {
		slot = o.freeXfers[k-1]
		o.freeXfers = o.freeXfers[:k-1]
		o.xfers[slot] = x
	} else {
		if len(o.xfers) == xferSlots {
			return fmt.Errorf("replay: more than %d transfers in flight", xferSlots)
		}
		slot = int32(len(o.xfers))
		o.xfers = append(o.xfers, x)
	}
	o.seq++
	o.nextID = o.seq*xferSlots + int64(slot)
	if s := e.sec; s != nil {
		row := s.at(now)
		switch x.kind {
		case xferStore:
			row.OffloadBytes += n
		case xferPrefetch:
			row.PrefetchBytes += n
		default:
			row.LoadBytes += n
		}
	}
	done, err := node.f.StartAfter(now, wait, o.nextID, n, path)
	if err != nil {
		return err
	}
	if len(done) > 0 {
		return fmt.Errorf("replay: internal error: transfers completed at %v before their event", done[0].At)
	}
	o.arm(e, w.off.node)
	return nil
}

// arm queues node i's next transfer event when it comes before the one
// queued.
func (o *offload) arm(e *engine, i int) {
	n := o.nodes[i]
	if at, ok := n.f.Next(); ok && at < n.queued {
		n.queued = at
		e.q.push(at, evTransfer, int32(i))
	}
}

// next returns the time of the first transfer event queued (never: none).
func (o *offload) next() trace.Time {
	b := never
	for _, n := range o.nodes {
		b = min(b, n.queued)
	}
	return b
}

// store writes the prompt tier blocks that r's computed tokens have
// filled since its last store to w's tiers, by the write policy, at now.
func (o *offload) store(e *engine, w *worker, r *reqState, now trace.Time) error {
	T := o.spec.BlockTokens
	full := min(r.computed, r.prompt) / T
	if full <= r.stored {
		return nil
	}
	if o.spec.WritePolicy == WriteThroughSelective && !(r.computed == r.numTokens() && r.out+1 == r.maxOut) {
		return nil // written when it finishes (hicache.go)
	}
	first := r.stored
	r.stored = full
	pf := full // blocks from pf on are stored as a run
	if o.runs() {
		pf = min(max(o.privateFrom(r), first), full)
	}
	var keys []uint64
	if pf > first {
		keys = o.tierKeys(r, pf)[first:pf]
	}
	for _, t := range w.off.storeTiers {
		if err := o.storeTo(e, w, t, keys, pf, full-pf, uint64(r.idx), now); err != nil {
			return err
		}
	}
	return nil
}

// storeTo reserves keys in tier t of w and starts their transfer; blocks
// the tier holds already are only touched, and blocks it has no room for
// are dropped. Under write-back, the host tier's evictions go to the next
// tier down. After keys come runN private blocks of request owner
// (privateFrom) from its block runFirst on, offered to the tier for the
// first time: one run.
func (o *offload) storeTo(e *engine, w *worker, t int, keys []uint64, runFirst, runN int64, owner uint64, now trace.Time) error {
	tr := w.off.tiers[t]
	var x *xfer
	var down []uint64
	// The store's slices are grown in locals and put back once: an
	// append to x's fields is a pointer write with a GC write barrier,
	// per block.
	var xkeys []uint64
	var xslots []int32
	for _, k := range keys {
		s, st, victim, evicted := tr.Store(k)
		if st != kvcache.StoreInserted {
			continue // held (touched) or dropped
		}
		if x == nil {
			x = o.storeXfer(w, t)
			xkeys, xslots = x.keys, x.slots
		}
		xkeys, xslots = append(xkeys, k), append(xslots, s)
		if evicted && o.spec.WritePolicy == WriteBack {
			down = append(down, victim)
		}
	}
	if run, n := tr.StoreRun(owner, runFirst, runN); n > 0 {
		if x == nil {
			x = o.storeXfer(w, t)
			xkeys, xslots = x.keys, x.slots
		}
		x.runFirst, x.runN, x.owner, x.run = runFirst, n, owner, run
	}
	if x != nil {
		x.keys, x.slots = xkeys, xslots
		var links [3]int
		if err := o.start(e, w, now, x, (int64(len(x.keys))+x.runN)*w.off.blockBytes, o.path(links[:0], w.off, t, false)); err != nil {
			return err
		}
	}
	if len(down) > 0 {
		for next := t + 1; next < numTiers; next++ {
			if w.off.tiers[next] != nil && !(w.off.ownOnly && next == tierRemote) {
				return o.storeTo(e, w, next, down, 0, 0, 0, now)
			}
		}
	}
	return nil
}

// storeXfer returns an empty store of w's blocks into tier t (or, made a
// load, a load from it): a completed one reused, with its slices, or a
// new one.
func (o *offload) storeXfer(w *worker, t int) *xfer {
	n := len(o.spare)
	if n == 0 {
		return &xfer{w: w, tier: t}
	}
	x := o.spare[n-1]
	o.spare = o.spare[:n-1]
	*x = xfer{w: w, tier: t, keys: x.keys[:0], slots: x.slots[:0]}
	return x
}

// transfer handles node i's transfer event at now: completed stores make
// their blocks hit, completed loads make their requests schedulable.
func (o *offload) transfer(e *engine, now trace.Time, i int) error {
	n := o.nodes[i]
	if now != n.queued {
		return nil // superseded by an earlier event
	}
	n.queued = never
	return o.advance(e, i, now)
}

// advance moves node i's fabric to now and handles the transfers that
// completed.
func (o *offload) advance(e *engine, i int, now trace.Time) error {
	n := o.nodes[i]
	// The completions go in the node's scratch; should handling one
	// advance the node again (hicache's prefetch may), that call gets
	// a slice of its own.
	done := n.f.AdvanceAppend(n.done[:0], now)
	n.done = nil
	defer func() { n.done = done[:0] }()
	for _, d := range done {
		slot := int32(d.ID % xferSlots)
		x := o.xfers[slot]
		o.xfers[slot] = nil
		o.freeXfers = append(o.freeXfers, slot)
		tr := x.w.off.tiers[x.tier]
		switch x.kind {
		case xferStore:
			if err := o.stored(e, x, now); err != nil {
				return err
			}
			o.spare = append(o.spare, x)
			continue
		case xferStepLoad:
			o.stepLoaded(e, x, d.At)
			continue
		case xferPrefetch:
			o.prefetched(e, x, d.ID, now)
			continue
		}
		for _, s := range x.slots {
			tr.UnpinAt(s)
		}
		w, r := x.w, x.r
		o.spare = append(o.spare, x)
		r.loadLeft--
		if r.loadLeft > 0 {
			continue
		}
		w.off.loading--
		if err := e.loaded(w, r, d.At, now); err != nil {
			return err
		}
	}
	o.arm(e, i)
	return nil
}

// admitLoad is vLLM's admission of waiting request r, at the front of
// w's queue, whose GPU prefix hit is hits (done tokens): when r's prompt
// continues in w's tiers it takes r out of the queue, gives it its hit
// blocks and fresh blocks for the tokens it will load, and starts the
// load; r waits, outside the queue, while other requests run, and comes
// back to its front when the load completes (engine.loaded), as vLLM's
// WAITING_FOR_REMOTE_KVS requests do.
func (v *vllm) admitLoad(w *worker, r *reqState, hits []int32, done int64, now trace.Time) loadState {
	ow := w.off
	o := ow.o
	load := o.lookup(w, r, done)
	if load == 0 {
		return loadNone
	}
	for i, t := range r.loadFrom {
		if ow.tiers[t].PinnedAt(ow.hits[i]) {
			// Another request is loading these blocks: r waits for
			// them to reach GPU memory, skipped for this step, as
			// vLLM delays a request whose hit blocks are being
			// loaded.
			return loadDelayed
		}
	}
	fresh := ceilDiv(done+load, v.bs) - int64(len(hits))
	// A free cached block leaves the free queue too.
	free := v.kv.NumFree()
	if n, _ := v.kv.FreeAmong(hits, free-fresh); fresh+n > free {
		return loadNoRoom
	}
	w.waiting.popFront()
	v.kv.AcquireAll(hits)
	r.blocks = append(r.blocks, hits...)
	if !v.allocate(r, fresh) {
		panic("replay: allocation failed after the free-block check")
	}
	r.computed = done
	r.loadTo = done + load
	if err := o.startLoad(o.e, w, r, done, now); err != nil {
		// Start fails only on an internal inconsistency (a time
		// before the fabric's clock); the engine reports it.
		o.err = err
	}
	return loadStarted
}

// What admitLoad did with a waiting request.
type loadState uint8

const (
	loadNone    loadState = iota // nothing to load: admit it as usual
	loadStarted                  // its load started: it left the queue
	loadDelayed                  // its blocks are being loaded by another: skip it
	loadNoRoom                   // its blocks do not fit: stop admission
)

// unskip puts the requests admission skipped back at the front of w's
// queue, in their order.
func (ow *offWorker) unskip(w *worker) {
	for i := len(ow.skipped) - 1; i >= 0; i-- {
		w.waiting.pushFront(ow.skipped[i])
		ow.skipped[i] = nil
	}
	ow.skipped = ow.skipped[:0]
}

// stores reports whether the step w built fills a prompt tier block, which
// its end offloads: such a step's end must be an event.
func (o *offload) stores(w *worker) bool {
	T := o.spec.BlockTokens
	for _, s := range w.sched {
		if r := s.r; min(r.computed, r.prompt)/T > r.stored {
			return true
		}
	}
	return false
}

// loaded ends r's load at at (the event's time now, rounded up): r's
// loaded tokens are computed, their blocks' hashes committed so that
// other requests hit them, and r goes back to the front of w's queue. A
// request whose client gave up meanwhile leaves.
//
// Only a load before r's first schedule is its KV fetch (kv_fetch_s,
// ready_s, out of queue_s): a reload after a preemption is time r spends
// preempted, after its GPU start, which no column of the record holds
// apart (it is in its prefill or decode time).
func (e *engine) loaded(w *worker, r *reqState, at, now trace.Time) error {
	if !r.scheduled {
		r.loadEnd = at
		r.kvWait += at.Sub(r.loadStart)
	}
	r.computed = r.loadTo
	if !w.s.(*vllm).grow(r, 0) {
		return fmt.Errorf("replay: internal error: loaded blocks of request %d missing", r.idx)
	}
	if r.aborted {
		w.s.leave(w, r, leaveWaiting)
		return e.timedOut(r, now)
	}
	r.holding = true
	w.waiting.pushFront(r)
	e.wake(now, w)
	return nil
}

// result adds r's tier figures to its record o: hit tokens per tier at
// its first schedule (SGLang's device, host and storage hits; the GPU's
// are those not loaded), the time it waited for loads (kv_fetch_s), and
// when its KV was ready.
func (o *offload) result(r *reqState, out *trace.Request) {
	var loaded int64
	for t, n := range r.tierHit {
		loaded += n
		if o.spec.has(t) {
			switch t {
			case tierHost:
				out.HostHitTokens = trace.Some(n)
			case tierDisk:
				out.StorageHitTokens = trace.Some(n)
			case tierRemote:
				out.RemoteHitTokens = trace.Some(n)
			}
		}
	}
	out.DeviceHitTokens = trace.Some(r.cached - loaded)
	out.KVFetchSec = trace.Some(r.kvWait.Seconds())
	// The parts of TTFT do not overlap: the wait for KV before the
	// first forward leaves the queue wait, the stall of a step waiting
	// for its loads (HiCache) leaves the prefill.
	if pre := r.kvWait - r.kvStall; pre > 0 {
		// A prefetch starts when r reaches the scheduler, before the
		// pass that queues it: that part of the KV wait is not queue.
		out.QueueSec = trace.Some(max(r.gpuStart.Sub(r.engineQueued)-pre, 0).Seconds())
	}
	if r.kvStall > 0 {
		out.PrefillSec = trace.Some((r.firstTok.Sub(r.gpuStart) - r.kvStall).Seconds())
	}
	if r.pfIO > 0 {
		out.StoragePrefetchIOSec = trace.Some(r.pfIO.Seconds())
	}
	if r.loadEnd > 0 && o.spec.HiCache == nil {
		// (HiCache loads during the step: its KV is ready layer by
		// layer after the GPU started.)
		out.Ready = trace.Some(r.loadEnd)
	}
}

// observe feeds the per-second statistics s: every link's carriage and
// capacity by class, and the tiers' occupancy.
func (o *offload) observe(s *seconds) {
	for _, w := range o.e.workers {
		ow := w.off
		if ow == nil {
			continue // a decode worker without tiers
		}
		n := o.nodes[ow.node]
		for len(n.class) <= max(ow.h2d, ow.d2h, n.dram, n.nvme, n.net) {
			n.class = append(n.class, -1)
		}
		n.class[ow.h2d], n.class[ow.d2h] = linkH2D, linkD2H
		n.class[n.dram], n.class[n.nvme], n.class[n.net] = linkDRAM, linkNVMe, linkNIC
	}
	for _, n := range o.nodes {
		for l, c := range n.class {
			s.linkCap[c] += n.f.Link(l).Bandwidth
		}
		n.f.Observe = func(from, to float64, rates []float64) {
			for l, r := range rates {
				if r > 0 {
					s.link(n.class[l], from, to, r)
				}
			}
		}
	}
	s.tierBytes = func() (b [numTiers]int64) {
		for i, w := range o.e.workers {
			if a := o.e.scale; a != nil && a.state[i] == slotOff || w.off == nil {
				continue // its tiers went with its worker (fresh), or it has none
			}
			for t, tr := range w.off.tiers[:tierRemote] {
				if tr != nil {
					b[t] += tr.Len() * w.off.blockBytes
				}
			}
		}
		if o.remote != nil {
			b[tierRemote] = o.remote.Len() * o.blockBytes
		}
		return b
	}
}

// CapacityBytes returns the capacities in bytes of the tiers of a
// cluster of workers: host and disk over all workers, the shared remote
// store once.
func (o *Offload) CapacityBytes(workers int) (host, disk, remote int64) {
	b := o.BlockTokens * o.KVBytesPerToken
	return o.HostBlocks * b * int64(workers), o.DiskBlocks * b * int64(workers), o.RemoteBlocks * b
}

// has reports whether the offload has tier t.
func (o *Offload) has(t int) bool {
	switch t {
	case tierHost:
		return o.HostBlocks > 0
	case tierDisk:
		return o.DiskBlocks > 0
	}
	return o.RemoteBlocks > 0
}
