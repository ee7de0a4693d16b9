package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// SGLang's HiCache defaults (hiradix_cache.py,
// _parse_storage_backend_extra_config).
const (
	hicachePrefetchThreshold      = 256  // tokens
	hicachePrefetchTimeoutBase    = 1.0  // s
	hicachePrefetchTimeoutPerKiTk = 0.25 // s per 1,024 tokens
)

// hicacheOf resolves SGLang's HiCache settings (enable_hierarchical_cache
// and the hicache_* keys) into the replay's Offload, for workers of
// deployment dep whose device pool holds kvTokens tokens.
//
// As SGLang's host pool (memory_pool_host.py): each GPU's L2 holds
// hicache_size GB (decimal) of KV, or else hicache_ratio times its
// device pool, in whole pages, and must be larger than the device pool.
// L3: mooncake and hf3fs are a store the workers share over the NIC, of
// kv_store_gib; file and nixl the node's NVMe, shared equally by its
// workers.
func hicacheOf(c Cluster, dep *model.Deployment, kvTokens int64) (*replay.Offload, error) {
	s := c.Scheduler
	g := s.SGLangConfig
	for _, k := range []string{"scheduler.kv_offloading_size", "scheduler.kv_offloading_backend", "scheduler.lmcache"} {
		if from, ok := c.given[k]; ok {
			return nil, c.bad(k, from, "", "vLLM's offloading; SGLang's tiers are its HiCache (enable_hierarchical_cache, hicache_*)")
		}
	}
	node, err := c.node(dep)
	if err != nil || !g.EnableHierarchicalCache {
		return nil, err
	}
	if g.HiCacheRatio == 0 && g.HiCacheSize == 0 {
		g.HiCacheRatio = 2 // SGLang's default
	}
	if g.HiCacheWritePolicy == "" {
		g.HiCacheWritePolicy = replay.WriteThrough
	}
	page := max(g.PageSize, 1)
	if ctx := dep.LLM.MaxPositionEmbeddings; ctx > 0 && page > ctx || page > kvTokens {
		return nil, c.bad("scheduler.page_size", c.given["scheduler.page_size"], strconv.FormatInt(page, 10),
			fmt.Sprintf("a page larger than what %s can use: its context is %d tokens and a worker's KV pool %d", dep.LLM.Name, dep.LLM.MaxPositionEmbeddings, kvTokens))
	}
	ranks := int64(dep.TP * max(dep.PP, 1))
	o := &replay.Offload{
		Node:            node,
		GPUsPerWorker:   int(ranks),
		KVBytesPerToken: dep.KVBytesPerTokenPerRank() * ranks,
		BlockTokens:     page,
		WritePolicy:     g.HiCacheWritePolicy,
		HiCache: &replay.HiCache{
			PrefetchPolicy:         g.HiCacheStoragePrefetchPolicy,
			PrefetchThreshold:      hicachePrefetchThreshold,
			PrefetchTimeoutBase:    time.Duration(hicachePrefetchTimeoutBase * 1e9),
			PrefetchTimeoutPerPage: time.Duration(math.Round(float64(page) / 1024 * hicachePrefetchTimeoutPerKiTk * 1e9)),
			Layers:                 max(dep.LLM.NumLayers/int64(max(dep.PP, 1)), 1),
		},
	}
	if o.HiCache.PrefetchPolicy == "" {
		o.HiCache.PrefetchPolicy = replay.PrefetchBestEffort
	}
	if o.GPUsPerWorker > node.GPUs {
		return nil, c.bad("tp", c.given["tp"], strconv.Itoa(o.GPUsPerWorker), fmt.Sprintf("a worker of %d GPUs does not fit node %s of %d GPUs", o.GPUsPerWorker, node.Name, node.GPUs))
	}
	if err := hicacheExtra(c, o); err != nil {
		return nil, err
	}
	if err := hicacheStorageQuery(c, o); err != nil {
		return nil, err
	}
	perNode := int64(min(c.Workers, node.GPUs/o.GPUsPerWorker))
	// The host pool, per worker (all its ranks).
	key, value := "scheduler.hicache_ratio", strconv.FormatFloat(g.HiCacheRatio, 'g', -1, 64)
	tokens := int64(g.HiCacheRatio * float64(kvTokens))
	if g.HiCacheSize > 0 {
		key, value = "scheduler.hicache_size", strconv.FormatFloat(g.HiCacheSize, 'g', -1, 64)
		tokens = int64(g.HiCacheSize * 1e9 / float64(dep.KVBytesPerTokenPerRank()))
	}
	tokens -= tokens % page
	if tokens <= kvTokens {
		return nil, c.bad(key, c.given[key], value, fmt.Sprintf("a host pool of %d tokens is not larger than the device pool of %d (SGLang requires it)", tokens, kvTokens))
	}
	if need := float64(tokens*o.KVBytesPerToken) * float64(perNode); need > float64(node.HostMemBytes) {
		return nil, c.bad(key, c.given[key], value, fmt.Sprintf("%d workers of node %s need %.4g GiB of host memory; it has %.4g GiB", perNode, node.Name, need/(1<<30), float64(node.HostMemBytes)/(1<<30)))
	}
	o.HostBlocks = tokens / page
	pageBytes := page * o.KVBytesPerToken
	switch local, ok := replay.HiCacheStorageBackends[g.HiCacheStorageBackend]; {
	case !ok:
	case local:
		o.DiskBlocks = node.NVMeBytes / perNode / pageBytes
		if o.DiskBlocks == 0 {
			return nil, c.bad("scheduler.hicache_storage_backend", c.given["scheduler.hicache_storage_backend"], g.HiCacheStorageBackend,
				fmt.Sprintf("node %s has no NVMe room for a page of %d bytes per worker", node.Name, pageBytes))
		}
	default:
		if c.KVStoreGiB == 0 {
			return nil, c.bad("scheduler.hicache_storage_backend", c.given["scheduler.hicache_storage_backend"], g.HiCacheStorageBackend, "a shared store needs its size, kv_store_gib")
		}
		o.RemoteBlocks = int64(c.KVStoreGiB * (1 << 30) / float64(pageBytes))
		if o.RemoteBlocks == 0 || o.RemoteBlocks > math.MaxInt32 {
			return nil, c.bad("kv_store_gib", c.given["kv_store_gib"], strconv.FormatFloat(c.KVStoreGiB, 'g', -1, 64), fmt.Sprintf("holds %d pages of %d bytes (want 1 to 2³¹−1)", o.RemoteBlocks, pageBytes))
		}
	}
	if o.HostBlocks > math.MaxInt32 || o.DiskBlocks > math.MaxInt32 {
		return nil, c.bad(key, c.given[key], value, "more pages than a tier holds (2³¹−1); raise page_size")
	}
	return o, o.Validate(1)
}

// hicacheStorageQuery sets o's storage query time from the cluster's
// hicache_storage_query_s (the simulator's coefficient, not an SGLang
// argument: see replay.SGLangConfig.HiCacheStorageQuerySec), which only
// an L3 tier has a use for.
func hicacheStorageQuery(c Cluster, o *replay.Offload) error {
	const key = "scheduler.hicache_storage_query_s"
	v := c.Scheduler.HiCacheStorageQuerySec
	from, given := c.given[key]
	if !given && v == 0 {
		return nil
	}
	text := strconv.FormatFloat(v, 'g', -1, 64)
	if !(v >= 0) || v > 3600 {
		return c.bad(key, from, text, "want a time in seconds from 0 to 3600")
	}
	if _, ok := replay.HiCacheStorageBackends[c.Scheduler.HiCacheStorageBackend]; !ok {
		return c.bad(key, from, text, "a storage query needs an L3 tier (hicache_storage_backend)")
	}
	o.HiCache.StorageQuery = time.Duration(math.Round(v * 1e9))
	return nil
}

// hicacheExtra reads the prefetch settings of SGLang's
// hicache_storage_backend_extra_config JSON into o.
func hicacheExtra(c Cluster, o *replay.Offload) error {
	const key = "scheduler.hicache_storage_backend_extra_config"
	text := c.Scheduler.HiCacheStorageBackendExtraConfig
	if text == "" {
		return nil
	}
	var x struct {
		Threshold *json.Number `json:"prefetch_threshold"`
		Base      *float64     `json:"prefetch_timeout_base"`
		PerKi     *float64     `json:"prefetch_timeout_per_ki_token"`
	}
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return c.bad(key, c.given[key], "", "not JSON: "+err.Error())
	}
	h := o.HiCache
	if x.Threshold != nil {
		n, err := x.Threshold.Int64()
		if err != nil || n < 0 {
			return c.bad(key, c.given[key], "", "prefetch_threshold: want a whole number of tokens ≥ 0 (SGLang requires an int)")
		}
		h.PrefetchThreshold = n
	}
	for _, v := range []struct {
		name string
		p    *float64
		set  func(float64)
	}{
		{"prefetch_timeout_base", x.Base, func(f float64) { h.PrefetchTimeoutBase = time.Duration(math.Round(f * 1e9)) }},
		{"prefetch_timeout_per_ki_token", x.PerKi, func(f float64) {
			h.PrefetchTimeoutPerPage = time.Duration(math.Round(float64(o.BlockTokens) / 1024 * f * 1e9))
		}},
	} {
		if v.p == nil {
			continue
		}
		if !(*v.p >= 0) || *v.p > 86400 {
			return c.bad(key, c.given[key], "", fmt.Sprintf("%s: %v is not a time in seconds in [0, 86400]", v.name, *v.p))
		}
		v.set(*v.p)
	}
	return nil
}
