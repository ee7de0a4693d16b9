package replay

import (
	"math/bits"
	"math/rand/v2"
	"slices"
)

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
// Note: the index is dynamoKV's mirror with lists on it (below): the
// mirror takes the workers' stored events, as
// the engine reports a computed prompt, delivered on the view's ticks,
// at the trace's block granularity (a trace block stands for the keys
// that end in it, so a pod holds a key when it holds the trace block of
// the key's last token), and mirrors each worker's KV capacity, least
// recently used first, for the removal events the engine's caches do not
// report (on the Mooncake conversation trace with 16 workers, what it
// says the chosen worker holds, the lists aside, is what the worker's
// cache gives for 11,963 of the 12,031 requests:
// TestKVEventMirrorMatchesEngine). lru_capacity_tokens and
// max_prefix_blocks, the approximate index's capacity and reach, do not
// apply.
//
// llm-d's in-memory index keeps at most pod_cache_size pods a key (its
// podCacheSize, 10): the ones whose BlockStored events for it came last
// (an event for a pod it lists moves the pod to the front; a removal
// drops it), and a pod missing from a key's list matches none of the keys
// after it. So a worker stores a key when it computes the trace block
// (the events' ids past those its prompt hit), not when it hits it, and
// the lists hold workers, most recent first (podLists). This matters: on
// the Mooncake conversation trace with 16 workers the first trace block
// of 12,005 of the 12,031 prompts is held by more than ten workers when
// the request is routed, and six of them, unlisted for it, match no
// prompt that starts with it; the hit rate is 0.1921 where an index
// listing every holder gives 0.2467 (TestLLMDPreciseKeysOverTenPods).
type llmdPrecise struct {
	llm    *llmD // weights, picker scratch, the index
	pods   podLists
	active []uint16 // scratch: the workers still matching, in Route
}

func newLLMDPrecise(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	rc := cfg.RouterConfig
	return &llmdPrecise{llm: newLLMDScorer(rc, slots, kvTokens, rng), pods: podLists{max: min(rc.PodCacheSize, slots)}}
}

func (r *llmdPrecise) resetWorker(w int) {
	r.llm.index.dropWorker(w)
	r.pods.dropWorker(w)
}

// kvStored mirrors the worker's cache with every id, and lists the
// worker first for the ids it computed.
func (r *llmdPrecise) kvStored(w int, ids []int64, blockSize int64, fresh int) {
	x := r.llm.index
	for _, s := range x.insert(w, ids, blockSize)[fresh:] {
		r.pods.store(x, s, w)
	}
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
	r.longestPrefix(q.HashIDs, l.match)
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

// longestPrefix sets n[w] to the leading ids worker w matches as llm-d's
// LongestPrefixScorer counts them: the workers listed for the first id
// (and holding it still: the mirror's evictions stand for removal
// events), then at each id those of them listed again, until none is.
func (r *llmdPrecise) longestPrefix(ids []int64, n []int) {
	if r.llm.index.workers <= 64 {
		r.longestPrefixBits(ids, n)
		return
	}
	r.longestPrefixLists(ids, n)
}

// longestPrefixLists is longestPrefix for any number of workers: the
// workers still matching in a slice, each tested against the lists.
func (r *llmdPrecise) longestPrefixLists(ids []int64, n []int) {
	clear(n)
	x := r.llm.index
	active := r.active[:0]
	for j, id := range ids {
		s, ok := x.slots.get(id)
		if !ok {
			break
		}
		if j == 0 {
			for _, w := range r.pods.of(s) {
				if x.holds(int(w), s) {
					active = append(active, w)
				}
			}
		} else {
			kept := active[:0]
			for _, w := range active {
				if r.pods.has(s, w) && x.holds(int(w), s) {
					kept = append(kept, w)
				}
			}
			active = kept
		}
		if len(active) == 0 {
			break
		}
		for _, w := range active {
			n[w]++
		}
	}
	r.active = active
}

// longestPrefixBits is longestPrefix with a bit per worker: the workers
// still matching are a word, and a worker's count is set once, where it
// drops out.
//
// Note: a worker's list membership tested id by id (podLists.has, ten
// entries) for each worker still matching was some 30 M instructions of
// BenchmarkReplayMooncakeRouters/llm_d_precise.
func (r *llmdPrecise) longestPrefixBits(ids []int64, n []int) {
	clear(n)
	x := r.llm.index
	var active uint64
	j := 0
	for ; j < len(ids); j++ {
		s, ok := x.slots.get(ids[j])
		if !ok {
			break
		}
		var listed uint64
		for _, w := range r.pods.of(s) {
			listed |= 1 << uint(w)
		}
		held := listed & x.holderBits(s)
		if j > 0 {
			held &= active
		}
		for gone := active &^ held; gone != 0; gone &= gone - 1 {
			n[bits.TrailingZeros64(gone)] = j
		}
		if active = held; active == 0 {
			return
		}
	}
	for ; active != 0; active &= active - 1 {
		n[bits.TrailingZeros64(active)] = j
	}
}

// podLists holds, per slot, the workers llm-d's index lists for the key,
// most recently stored first, at most max (a removal event's worker may
// stay listed until the next store purges it: a worker counts only while
// the mirror says it holds the slot).
//
// Note: in chunks of listSlots slots, made as stores reach them and never
// copied, a worker a uint16: one slice of int32 lists doubled as slots
// came was 28 MB more allocated a replay of the Mooncake trace on 16
// workers (-benchmem, 107.5 against 79.6 MB without the lists) and 1.45×
// round-robin's CPU time against 1.22× (scripts/enginework --time 10).
type podLists struct {
	max    int
	chunks []*listChunk
	buf    []uint16 // scratch: a list being rebuilt
}

// A listChunk holds the lists of listSlots slots: slot i's in ents[i·max:]
// [:n[i]].
type listChunk struct {
	n    [listSlots]uint16
	ents []uint16
}

const listSlots = 1024

// maxListedWorkers is the most workers podLists can name.
const maxListedWorkers = 1<<16 - 1

func (p *podLists) of(s int32) []uint16 {
	c := int(s) / listSlots
	if c >= len(p.chunks) || p.chunks[c] == nil {
		return nil
	}
	k, i := p.chunks[c], int(s)%listSlots
	at := i * p.max
	return k.ents[at : at+int(k.n[i])]
}

// has reports whether slot s lists worker w.
func (p *podLists) has(s int32, w uint16) bool {
	for _, v := range p.of(s) {
		if v == w {
			return true
		}
	}
	return false
}

// store lists worker w first for slot s: the workers the mirror no longer
// says hold it go (their removal events), w moves to the front or comes
// in there, and the last goes when there are more than max.
func (p *podLists) store(x *prefixIndex, s int32, w int) {
	c := int(s) / listSlots
	for c >= len(p.chunks) {
		p.chunks = append(p.chunks, nil)
	}
	k := p.chunks[c]
	if k == nil {
		k = &listChunk{ents: make([]uint16, listSlots*p.max)}
		p.chunks[c] = k
	}
	i := int(s) % listSlots
	at := i * p.max
	buf := append(p.buf[:0], uint16(w))
	for _, v := range k.ents[at : at+int(k.n[i])] {
		if len(buf) == p.max {
			break
		}
		if int(v) != w && x.holds(int(v), s) {
			buf = append(buf, v)
		}
	}
	copy(k.ents[at:at+p.max], buf)
	k.n[i] = uint16(len(buf))
	p.buf = buf
}

// dropWorker unlists worker w everywhere: it was started afresh.
func (p *podLists) dropWorker(w int) {
	for _, k := range p.chunks {
		if k == nil {
			continue
		}
		for i := range k.n {
			l := k.ents[i*p.max : i*p.max+int(k.n[i])]
			k.n[i] = uint16(len(slices.DeleteFunc(l, func(v uint16) bool { return int(v) == w })))
		}
	}
}
