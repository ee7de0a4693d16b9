package deploy

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// LMCache's defaults (lmcache/v1/config.py).
const (
	lmcacheChunkSize       = 256
	lmcacheMaxLocalCPUSize = 5.0 // GiB
)

// offloadOf resolves the KV tiers c's engine options describe into the
// replay's Offload, on c's node, for workers of deployment dep; nil when
// no tier is configured. Its errors name the key and where it was given:
// a tier larger than the node's memory or disk, a chunk the KV block
// cannot tile, a node link of zero bandwidth.
//
// vLLM's native offloading (kv_offloading_size) is one CPU tier whose
// blocks are the scheduler's; LMCache's (kv_offloading_backend: lmcache)
// has chunks of chunk_size tokens in a CPU tier of max_local_cpu_size
// (kv_offloading_size, when given, sets it, as vLLM passes it to
// LMCache), a disk tier when local_disk is set, and the cluster's shared
// store (kv_store_gib) when remote_url is.
func offloadOf(c Cluster, dep *model.Deployment, kvTokens int64) (*replay.Offload, error) {
	if EngineName(c.Config) == replay.EngineSGLang {
		return hicacheOf(c, dep, kvTokens)
	}
	for _, k := range []string{"scheduler.enable_hierarchical_cache", "scheduler.hicache_ratio", "scheduler.hicache_size", "scheduler.hicache_write_policy",
		"scheduler.hicache_storage_backend", "scheduler.hicache_storage_prefetch_policy", "scheduler.hicache_storage_backend_extra_config", "scheduler.hicache_storage_query_s"} {
		if from, ok := c.given[k]; ok {
			return nil, c.bad(k, from, "", "SGLang's HiCache needs engine: sglang (vLLM's tiers: kv_offloading_size, kv_offloading_backend)")
		}
	}
	s := c.Scheduler
	lm := s.KVOffloadingBackend == replay.OffloadLMCache
	if !lm && s.LMCache != nil {
		return nil, c.bad("scheduler.lmcache", c.given["scheduler.lmcache"], "", "LMCache's settings need kv_offloading_backend: lmcache")
	}
	if s.KVOffloadingSize == 0 && !lm {
		if c.Node != "" || c.NodeOverride != nil {
			_, err := c.node(dep)
			return nil, err
		}
		return nil, nil
	}
	node, err := c.node(dep)
	if err != nil {
		return nil, err
	}
	ranks := int64(dep.TP * max(dep.PP, 1))
	o := &replay.Offload{
		Node:            node,
		GPUsPerWorker:   int(ranks),
		KVBytesPerToken: dep.KVBytesPerTokenPerRank() * ranks,
		BlockTokens:     s.BlockSize,
		WritePolicy:     replay.WriteThrough,
	}
	if o.GPUsPerWorker > node.GPUs {
		return nil, c.bad("tp", c.given["tp"], strconv.Itoa(o.GPUsPerWorker), fmt.Sprintf("a worker of %d GPUs does not fit node %s of %d GPUs", o.GPUsPerWorker, node.Name, node.GPUs))
	}
	perNode := int64(min(c.Workers, node.GPUs/o.GPUsPerWorker))
	hostKey, hostGiB := "scheduler.kv_offloading_size", s.KVOffloadingSize
	var diskKey string
	var diskGiB float64
	if lm {
		l := s.LMCache
		if l == nil {
			l = &replay.LMCacheConfig{}
		}
		o.BlockTokens = lmcacheChunkSize
		if l.ChunkSize > 0 {
			o.BlockTokens = l.ChunkSize
		}
		if o.BlockTokens%s.BlockSize != 0 {
			key := "scheduler.lmcache.chunk_size"
			return nil, c.bad(key, c.given[key], strconv.FormatInt(o.BlockTokens, 10), fmt.Sprintf("a chunk must be whole KV blocks of %d tokens (scheduler.block_size)", s.BlockSize))
		}
		if hostGiB == 0 {
			hostKey, hostGiB = "scheduler.lmcache.max_local_cpu_size", lmcacheMaxLocalCPUSize
			if l.MaxLocalCPUSize > 0 {
				hostGiB = l.MaxLocalCPUSize
			}
		}
		if l.LocalDisk != "" {
			diskKey, diskGiB = "scheduler.lmcache.max_local_disk_size", l.MaxLocalDiskSize
			if diskGiB == 0 {
				return nil, c.bad("scheduler.lmcache.local_disk", c.given["scheduler.lmcache.local_disk"], "", "a disk tier needs max_local_disk_size (GiB)")
			}
		}
		if l.RemoteURL != "" {
			if c.KVStoreGiB == 0 {
				return nil, c.bad("scheduler.lmcache.remote_url", c.given["scheduler.lmcache.remote_url"], "", "a remote tier needs the store's size, kv_store_gib")
			}
			o.RemoteBlocks = blocksOf(c.KVStoreGiB, o)
		}
	}
	o.HostBlocks = blocksOf(hostGiB, o)
	o.DiskBlocks = blocksOf(diskGiB, o)
	var errs []error
	if need := hostGiB * (1 << 30) * float64(perNode); need > float64(node.HostMemBytes) {
		errs = append(errs, c.bad(hostKey, c.given[hostKey], strconv.FormatFloat(hostGiB, 'g', -1, 64),
			fmt.Sprintf("%d workers of node %s need %.4g GiB of host memory; it has %.4g GiB", perNode, node.Name, need/(1<<30), float64(node.HostMemBytes)/(1<<30))))
	}
	if need := diskGiB * (1 << 30) * float64(perNode); need > float64(node.NVMeBytes) {
		errs = append(errs, c.bad(diskKey, c.given[diskKey], strconv.FormatFloat(diskGiB, 'g', -1, 64),
			fmt.Sprintf("%d workers of node %s need %.4g GiB of NVMe; it has %.4g GiB", perNode, node.Name, need/(1<<30), float64(node.NVMeBytes)/(1<<30))))
	}
	for _, x := range []struct {
		key    string
		gib    float64
		blocks int64
	}{{hostKey, hostGiB, o.HostBlocks}, {diskKey, diskGiB, o.DiskBlocks}, {"kv_store_gib", c.KVStoreGiB, o.RemoteBlocks}} {
		if x.gib > 0 && x.blocks == 0 {
			errs = append(errs, c.bad(x.key, c.given[x.key], strconv.FormatFloat(x.gib, 'g', -1, 64), fmt.Sprintf("holds no block of %d tokens (%d bytes)", o.BlockTokens, o.BlockTokens*o.KVBytesPerToken)))
		}
		if x.blocks > math.MaxInt32 {
			errs = append(errs, c.bad(x.key, c.given[x.key], strconv.FormatFloat(x.gib, 'g', -1, 64), "more blocks than a tier holds (2³¹−1)"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, o.Validate(s.BlockSize)
}

// blocksOf is the number of o's tier blocks in gib GiB.
func blocksOf(gib float64, o *replay.Offload) int64 {
	return int64(gib * (1 << 30) / float64(o.BlockTokens*o.KVBytesPerToken))
}

// WorkerNode returns the node c's workers run on, as the replay's tiers see
// it, and the GPUs and KV bytes per token of one worker (all its ranks):
// what a link fit's keys are relative to (calibrate.LinkNodeSpec).
func (c Cluster) WorkerNode(dep *model.Deployment) (n model.Node, gpusPerWorker int, kvBytesPerToken int64, err error) {
	ranks := int64(dep.TP * max(dep.PP, 1))
	n, err = c.node(dep)
	return n, int(ranks), dep.KVBytesPerTokenPerRank() * ranks, err
}

// node returns the node c's workers run on: the named preset, or the
// GPU's, with node_override applied; an override's bad value is an error
// naming its key and line.
func (c Cluster) node(dep *model.Deployment) (model.Node, error) {
	n := model.NodeFor(dep.Hardware)
	if c.Node != "" {
		var err error
		if n, err = model.NodeByName(c.Node); err != nil {
			return n, c.bad("node", c.given["node"], "", err.Error())
		}
	}
	if c.links != nil {
		c.links.ApplyNode(&n, dep.TP*max(dep.PP, 1))
	}
	if c.NodeOverride != nil {
		m, err := n.With(*c.NodeOverride)
		var se *model.NodeSpecError
		if errors.As(err, &se) {
			key := "node_override." + se.Key
			return n, c.bad(key, c.given[key], "", se.Msg)
		}
		if err != nil {
			return n, err
		}
		n = m
	}
	if err := n.Validate(); err != nil {
		return n, c.bad("node", c.given["node"], "", err.Error())
	}
	return n, nil
}
