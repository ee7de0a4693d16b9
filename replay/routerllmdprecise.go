package replay

import "math/rand/v2"

// llmdPrecise is llm-d's inference scheduler with its
// precise-prefix-cache-scorer in place of the approximate one
// (router_config.prefix_scorer: precise), as llm-d's router and its KV
// cache library (llm-d-kv-cache: kvcache.Indexer, LongestPrefixScorer)
// have it in their 2026 releases:
//   - the prompt is cut into whole blocks of prefix_block_tokens, a key
//     each (the trailing partial block dropped), to be looked up in an
//     index of which pods hold which keys, fed by the pods' KV events
//     (vLLM's BlockStored and BlockRemoved) rather than by the requests
//     the router sent;
//   - a pod's match is the keys it holds from the first on, until one it
//     does not (LongestPrefixScorer; GPU blocks weigh 1);
//   - its score is that match over the prompt's keys, at most 1 (the
//     absolute normalization llm-d adopted in May 2026; earlier
//     releases scaled the matches to their minimum and maximum);
//   - the queue and kv-cache-utilization scorers and the max-score
//     picker are llmD's, with the weights of llm-d's deployment of the
//     precise scorer (2, 1, 1) unless set.
//
// Its score is the chosen worker's weighted total.
//
// Note: the index is dynamoKV's: it takes the workers' stored events, as
// the engine reports a computed prompt, delivered on the view's ticks,
// at the trace's block granularity (a trace block stands for the keys
// that end in it, so a pod holds a key when it holds the trace block of
// the key's last token), and mirrors each worker's KV capacity, least
// recently used first, for the removal events the engine's caches do not
// report (on the Mooncake conversation trace with 16 workers, what it
// says the chosen worker holds is what the worker's cache gives for
// 11,963 of the 12,031 requests: TestKVEventMirrorMatchesEngine).
// lru_capacity_tokens and
// max_prefix_blocks, the approximate index's capacity and reach, do not
// apply.
//
// Not modelled: llm-d's in-memory index keeps at most ten pods a key
// (podCacheSize), the ten whose BlockStored events for it came last, and
// a pod missing from a key's list matches none of the keys after it. A
// prefix that more than ten workers hold is then matched on ten of them
// only; on the Mooncake conversation trace with 16 workers the first
// trace block of 12,005 of the 12,031 prompts is held by more than ten
// at the request's routing (TestLLMDPreciseKeysOverTenPods), so under
// llm-d's default six of the sixteen workers would score no prefix for
// nearly every request, where this model scores every holder. Modelling
// it needs the events to say which blocks a prompt computed anew (vLLM
// stores no event for a hit), which they do not.
type llmdPrecise struct {
	llm *llmD // weights, picker scratch, the index
}

func newLLMDPrecise(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	rc := cfg.RouterConfig
	return &llmdPrecise{llm: &llmD{
		wp: *rc.PrefixWeight, wq: *rc.QueueWeight, wk: *rc.KVUsageWeight,
		index: newPrefixIndex(slots, kvTokens), rng: rng,
		hashTokens: max(rc.PrefixBlockTokens, 1),
		match:      make([]int, slots), prefix: make([]float64, slots),
	}}
}

func (r *llmdPrecise) resetWorker(w int) { r.llm.index.dropWorker(w) }

func (r *llmdPrecise) kvStored(w int, ids []int64, blockSize int64) {
	r.llm.index.insert(w, ids, blockSize)
}

// Route scores the ready workers as llmD.Route does (pick), the prefix
// score a worker's leading keys held over the prompt's keys.
//
// Note: with trace blocks of whole keys (Mooncake's 512 tokens, keys of
// 16) a worker holding m trace blocks holds min(m·tb/g, keys) keys, with
// no division per worker; and the score is never above 1 (the keys held
// are the prompt's), so llm-d's clip is not taken.
func (r *llmdPrecise) Route(q *Routed, c Cluster) int {
	l := r.llm
	ready := c.Ready()
	g, tb, prompt := l.hashTokens, q.BlockSize, q.Prompt
	keys := prompt / g
	l.index.matchAll(q.HashIDs, l.match)
	prefix, match := l.prefix, l.match[:len(l.prefix)]
	// The keys whose last token lies in the trace blocks held, the
	// prompt's at most, over the prompt's.
	switch n := float64(keys); {
	case keys == 0:
		for _, w := range ready {
			prefix[w] = 0
		}
	case tb > 0 && tb%g == 0:
		per := tb / g // keys per trace block
		for _, w := range ready {
			prefix[w] = float64(min(int64(match[w])*per, keys)) / n
		}
	default:
		for _, w := range ready {
			prefix[w] = float64(min(int64(match[w])*tb, prompt)/g) / n
		}
	}
	return l.pick(q, ready, c.Loads())
}
