package replay

import "math"

// A RouterConfig holds the routers' settings, each named as its project
// names it (Config.Router picks the router; the others' keys are
// ignored). Zero means the router's own default, which Effective fills in
// for the chosen router only.
type RouterConfig struct {
	// ViewIntervalSec is how stale the router's view of the workers is:
	// scraped state (WorkerLoad: llm-d's queue and KV-usage scorers) is
	// refreshed, and KV events (Dynamo's indexer, Opal's KVBM) are
	// delivered, on ticks of this interval (0: an oracle that sees every
	// change at once). Real deployments: llm-d refreshes metrics every
	// 50 ms, Opal coalesces KV events over 30 s.
	//
	// Note: a tick takes effect at the first routing decision at or after
	// it and sees the workers as of that decision: between arrivals the
	// engine fast-forwards workers and their state at an earlier instant
	// is not kept. What the router counts itself (Outstanding: requests
	// and tokens it sent; Dynamo's active requests) is always exact, as a
	// proxy's is.
	ViewIntervalSec float64 `yaml:"view_interval_s,omitempty"`

	// SGLang router, cache_aware policy (sgl-router's command-line
	// defaults: 0.3, 64, 1.5). The tree is the router's own, built from
	// the requests it routed, at the trace's block granularity.
	CacheThreshold      float64 `yaml:"cache_threshold,omitempty"`
	BalanceAbsThreshold int     `yaml:"balance_abs_threshold,omitempty"`
	BalanceRelThreshold float64 `yaml:"balance_rel_threshold,omitempty"`
	// MaxTreeTokens bounds each worker's part of the tree, least
	// recently used blocks first (0: unbounded, as sgl-router's default
	// max_tree_size of 2^26 characters is beyond any worker's KV).
	MaxTreeTokens int64 `yaml:"max_tree_tokens,omitempty"`

	// llm-d inference scheduler: the weights of its prefix-cache, queue
	// and kv-cache-utilization scorers (its default profile: 3, 2, 2),
	// and its prefix-cache-scorer's settings (the Gateway API inference
	// extension's, with autoTune on, its default): the approximate
	// index's capacity per server in tokens (lruCapacityPerServer blocks
	// of the hash block; default: the worker's KV capacity, as autoTune
	// takes vLLM's num_gpu_blocks), the hash block in tokens
	// (blockSizeTokens; default: the worker's KV block, as autoTune takes
	// vLLM's block size) and the most blocks of a prompt it hashes
	// (maxPrefixBlocksToMatch, 256).
	//
	// PrefixScorer picks llm-d's prefix scorer: "approximate" (the
	// default, above) or "precise", its precise-prefix-cache-scorer fed
	// by the workers' KV events (llmdPrecise), whose weights default to
	// llm-d's deployment of it (epp-precise-prefix-cache-config: 2, 1,
	// 1) and whose key block is prefix_block_tokens (default: the
	// worker's KV block, as its events' keys must be);
	// lru_capacity_tokens and max_prefix_blocks are the approximate
	// scorer's alone. PodCacheSize is the precise scorer's index's most
	// pods a key (llm-d's podCacheSize, 10).
	PrefixScorer      string   `yaml:"prefix_scorer,omitempty"`
	PodCacheSize      int      `yaml:"pod_cache_size,omitempty"`
	PrefixWeight      *float64 `yaml:"prefix_weight,omitempty"`
	QueueWeight       *float64 `yaml:"queue_weight,omitempty"`
	KVUsageWeight     *float64 `yaml:"kv_usage_weight,omitempty"`
	LRUCapacityTokens int64    `yaml:"lru_capacity_tokens,omitempty"`
	PrefixBlockTokens int64    `yaml:"prefix_block_tokens,omitempty"`
	MaxPrefixBlocks   int64    `yaml:"max_prefix_blocks,omitempty"`

	// OverlapScoreWeight is Dynamo's --kv-overlap-score-weight: the
	// weight of prefill blocks against active blocks in its cost (1).
	// RouterTemperature is its --router-temperature: 0 takes the least
	// logit (ties at random), more samples a softmax of the logits
	// scaled to their range, the lower the likelier.
	OverlapScoreWeight *float64 `yaml:"overlap_score_weight,omitempty"`
	RouterTemperature  float64  `yaml:"router_temperature,omitempty"`

	// HashBalanceFactor bounds session affinity's load: a worker with
	// more outstanding requests than this factor times the mean (plus
	// one) is overloaded and the session spills to the next worker
	// (consistent hashing with bounded loads; Envoy's hash_balance_factor
	// as a ratio; default 1.25).
	HashBalanceFactor float64 `yaml:"hash_balance_factor,omitempty"`

	// StatsUpdateIntervalMs is how often vLLM's DP coordinator publishes
	// the engine cores' request counts to the front end (vllm_dp; 100, its
	// min_stats_update_interval_ms; 0: every decision sees them live).
	StatsUpdateIntervalMs *int `yaml:"stats_update_interval_ms,omitempty"`
}

// llm-d's prefix scorers (RouterConfig.PrefixScorer).
const (
	LLMDApproximate = "approximate"
	LLMDPrecise     = "precise"
)

// Defaults of the routers' settings.
const (
	sglangCacheThreshold      = 0.3
	sglangBalanceAbsThreshold = 64
	sglangBalanceRelThreshold = 1.5
	llmdPrefixWeight          = 3
	llmdQueueWeight           = 2
	llmdKVUsageWeight         = 2
	llmdMaxPrefixBlocks       = 256
	llmdPrecisePrefixWeight   = 2
	llmdPreciseQueueWeight    = 1
	llmdPreciseKVUsageWeight  = 1
	llmdPodCacheSize          = 10
	dynamoOverlapScoreWeight  = 1
	sessionHashBalanceFactor  = 1.25
)

func ptr(v float64) *float64 { return &v }

// withDefaults fills the chosen router's zero settings; kvTokens and
// blockSize are a worker's KV capacity and block, in tokens.
func (c RouterConfig) withDefaults(router string, kvTokens, blockSize int64) RouterConfig {
	switch router {
	case RouterSGLang:
		if c.CacheThreshold == 0 {
			c.CacheThreshold = sglangCacheThreshold
		}
		if c.BalanceAbsThreshold == 0 {
			c.BalanceAbsThreshold = sglangBalanceAbsThreshold
		}
		if c.BalanceRelThreshold == 0 {
			c.BalanceRelThreshold = sglangBalanceRelThreshold
		}
	case RouterLLMD:
		wp, wq, wk := float64(llmdPrefixWeight), float64(llmdQueueWeight), float64(llmdKVUsageWeight)
		if c.PrefixScorer == "" {
			c.PrefixScorer = LLMDApproximate
		}
		if c.PrefixScorer == LLMDPrecise {
			wp, wq, wk = llmdPrecisePrefixWeight, llmdPreciseQueueWeight, llmdPreciseKVUsageWeight
			if c.PodCacheSize == 0 {
				c.PodCacheSize = llmdPodCacheSize
			}
		}
		if c.PrefixWeight == nil {
			c.PrefixWeight = ptr(wp)
		}
		if c.QueueWeight == nil {
			c.QueueWeight = ptr(wq)
		}
		if c.KVUsageWeight == nil {
			c.KVUsageWeight = ptr(wk)
		}
		if c.LRUCapacityTokens == 0 {
			c.LRUCapacityTokens = kvTokens
		}
		if c.PrefixBlockTokens == 0 {
			c.PrefixBlockTokens = blockSize
		}
		if c.MaxPrefixBlocks == 0 {
			c.MaxPrefixBlocks = llmdMaxPrefixBlocks
		}
	case RouterDynamo:
		if c.OverlapScoreWeight == nil {
			c.OverlapScoreWeight = ptr(dynamoOverlapScoreWeight)
		}
	case RouterSession:
		if c.HashBalanceFactor == 0 {
			c.HashBalanceFactor = sessionHashBalanceFactor
		}
	case RouterVLLMDP:
		if c.StatsUpdateIntervalMs == nil {
			v := vllmDPStatsIntervalMs
			c.StatsUpdateIntervalMs = &v
		}
	}
	return c
}

// validate reports the settings out of range.
func (c RouterConfig) validate(bad func(field, format string, args ...any)) {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if v := c.ViewIntervalSec; !(v >= 0) || v > 86400 {
		bad("router_config.view_interval_s", "%v is not a number of seconds in [0, 86400]", v)
	}
	if v := c.CacheThreshold; !(v >= 0 && v <= 1) {
		bad("router_config.cache_threshold", "%v is not in [0, 1]", v)
	}
	if c.BalanceAbsThreshold < 0 {
		bad("router_config.balance_abs_threshold", "negative (%d)", c.BalanceAbsThreshold)
	}
	if v := c.BalanceRelThreshold; !(v >= 0) || !finite(v) {
		bad("router_config.balance_rel_threshold", "%v is not a non-negative number", v)
	}
	if c.MaxTreeTokens < 0 {
		bad("router_config.max_tree_tokens", "negative (%d)", c.MaxTreeTokens)
	}
	if c.LRUCapacityTokens < 0 {
		bad("router_config.lru_capacity_tokens", "negative (%d)", c.LRUCapacityTokens)
	}
	if c.PrefixBlockTokens < 0 {
		bad("router_config.prefix_block_tokens", "negative (%d)", c.PrefixBlockTokens)
	}
	if v := c.PrefixScorer; v != "" && v != LLMDApproximate && v != LLMDPrecise {
		bad("router_config.prefix_scorer", "%q is not %s or %s", v, LLMDApproximate, LLMDPrecise)
	}
	if c.PodCacheSize < 0 {
		bad("router_config.pod_cache_size", "negative (%d)", c.PodCacheSize)
	}
	if c.MaxPrefixBlocks < 0 {
		bad("router_config.max_prefix_blocks", "negative (%d)", c.MaxPrefixBlocks)
	}
	for _, w := range []struct {
		name string
		v    *float64
	}{{"prefix_weight", c.PrefixWeight}, {"queue_weight", c.QueueWeight}, {"kv_usage_weight", c.KVUsageWeight}, {"overlap_score_weight", c.OverlapScoreWeight}} {
		if w.v != nil && (!(*w.v >= 0) || !finite(*w.v)) {
			bad("router_config."+w.name, "%v is not a non-negative number", *w.v)
		}
	}
	if v := c.RouterTemperature; !(v >= 0) || !finite(v) {
		bad("router_config.router_temperature", "%v is not a non-negative number", v)
	}
	if v := c.StatsUpdateIntervalMs; v != nil && (*v < 0 || *v > 86400e3) {
		bad("router_config.stats_update_interval_ms", "%d is not a number of milliseconds in [0, 86400000]", *v)
	}
	if v := c.HashBalanceFactor; v != 0 && (!(v >= 1) || !finite(v)) {
		bad("router_config.hash_balance_factor", "%v is not a number ≥ 1", v)
	}
}
