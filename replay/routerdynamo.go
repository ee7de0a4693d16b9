package replay

import (
	"math"
	"math/rand/v2"
)

// dynamoKV is NVIDIA Dynamo's KV router, as its KvScheduler prices a
// worker (lib/llm/src/kv_router: the DefaultWorkerSelector's logit over
// ActiveSequences' potential blocks and tokens, as of its 2025 releases;
// the logit keeps this form in the lib/kv-router crate of 2026):
//
//	logit = overlap_score_weight · prefill_tokens / block_size + decode_blocks
//
// prefill_tokens is what the worker would have to compute were the request
// sent there: the prompt's tokens past the cached blocks it matches there
// (Dynamo's new_tokens: prompt − overlap blocks · block size), plus the
// active prefill tokens of the requests the router sent there whose first
// token has not come back. decode_blocks is what the worker's active
// requests hold, plus what this one would add: the distinct full blocks of
// their prompts (block hashes counted once however many requests hold
// them; activeSeqs). At router_temperature 0, its default, the lowest
// logit wins, ties at random; above it, a worker is drawn with the
// probabilities of a softmax of the negated logits over their range,
// divided by the temperature (softmaxPick). The score is the chosen
// worker's logit.
//
// The cached prefix comes from the workers' KV events (a stored event when
// a prompt is computed), delivered on the view's ticks, into an index that
// mirrors each worker's KV capacity, least recently used blocks evicted
// first; the active requests are the router's own, exact at once (the
// first token as the worker sends it, the end as the request completes or
// is aborted). Block size is the engine's.
//
// Note: the events carry no removals (the engine's caches do not report
// evictions yet): the mirror evicts by its own LRU at the worker's
// capacity. It stands in for them: on the Mooncake conversation trace
// with 16 workers, what it says the chosen worker holds of a prompt is
// what the worker's cache gives for 11,995 of the 12,031 requests, the
// mirror's 29.98 M tokens against 29.88 M cached
// (TestKVEventMirrorMatchesEngine). A request's blocks are its prompt's, as ActiveSequences
// counts them by default (router_assume_kv_reuse on, block hashes counted
// once; router_track_output_blocks off, later versions' option to count
// the output's blocks as they are generated), never the output length
// requested, which the router does not know.
//
// Disaggregated, it routes the prefill pool as Dynamo's prefill router
// does: with router_track_active_blocks off (as Dynamo forces it for
// prefill workers, which do not decode), so a worker's logit is its
// prefill term alone. The decode pool's router is then Dynamo's decode
// router by default (DecodeDynamo).
type dynamoKV struct {
	weight float64
	bs     int64 // engine tokens per block
	index  *prefixIndex
	active *activeSeqs
	rng    *rand.Rand
	match  []int
	ties   []int
	chosen []int64   // per slot: the prefill tokens q would bring there
	costs  []float64 // per slot: q's logit there
	// prefillOnly: no active blocks tracked (Dynamo's prefill router).
	prefillOnly bool
	temperature float64
	logits      []float64 // per ready worker, when sampled
}

func newDynamoKV(cfg *Config, slots int, kvTokens int64, rng *rand.Rand) Router {
	bs := cfg.Scheduler.BlockSize
	return &dynamoKV{
		weight: *cfg.RouterConfig.OverlapScoreWeight, bs: bs,
		index: newPrefixIndex(slots, kvTokens), active: newActiveSeqs(slots, bs), rng: rng,
		match: make([]int, slots), chosen: make([]int64, slots), costs: make([]float64, slots),
		prefillOnly: cfg.Disaggregation.on(), temperature: cfg.RouterConfig.RouterTemperature,
	}
}

func (r *dynamoKV) resetWorker(w int) {
	r.index.dropWorker(w)
	r.active.dropWorker(w)
}

func (r *dynamoKV) kvStored(w int, ids []int64, blockSize int64, _ int) {
	r.index.insert(w, ids, blockSize)
}

func (r *dynamoKV) prefillDone(idx int) { r.active.prefilled(idx) }

func (r *dynamoKV) freed(idx int) { r.active.free(idx) }

// Route prices the ready workers, keeps those tied for the least (pickTie
// picks one), and records the request as active on the chosen one.
func (r *dynamoKV) Route(q *Routed, c Cluster) int {
	ready := c.Ready()
	r.index.matchAll(q.HashIDs, r.match)
	a := r.active
	if r.prefillOnly {
		a.planNone()
	} else {
		a.plan(q)
	}
	match, prompt, tb, bs, weight := r.match, q.Prompt, q.BlockSize, r.bs, r.weight
	// Whole blocks of the matched tokens, as Dynamo's overlap counts
	// engine blocks: a match of whole trace blocks of whole engine
	// blocks is whole, short of the prompt's end.
	whole, all := tb%bs == 0, prompt/bs*bs
	ties, best := r.ties[:0], 0.0
	// In locals: the loop stores to chosen, costs and ties, which the
	// compiler cannot tell from r's and a's fields.
	chosen, costs, active, blocks, newb := r.chosen, r.costs, a.tokens, a.blocks, a.newb
	for _, w := range ready {
		overlap := int64(match[w]) * tb
		switch {
		case overlap >= prompt:
			overlap = all
		case !whole:
			overlap = overlap / bs * bs
		}
		prefill := prompt - overlap
		chosen[w] = prefill
		tokens := float64(active[w]+prefill) / float64(bs)
		cost := weight*tokens + float64(blocks[w]+newb[w])
		costs[w] = cost
		switch {
		case len(ties) == 0 || cost < best:
			ties, best = append(ties[:0], w), cost
		case cost == best:
			ties = append(ties, w)
		}
	}
	r.ties = ties
	var w int
	if r.temperature > 0 {
		logits := r.logits[:0]
		for _, w := range ready {
			logits = append(logits, costs[w])
		}
		r.logits = logits
		w = ready[softmaxPick(logits, r.temperature, r.rng.Float64())]
		best = costs[w]
	} else {
		w = pickTie(ties, r.rng)
	}
	a.add(q.Index, w, r.chosen[w])
	q.Score, q.Scored = best, true
	return w
}

// softmaxPick is Dynamo's softmax_sample at a temperature above 0: the
// logits (lower is better) are divided by their range and negated, then
// divided by the temperature, and a softmax of them is sampled at u in
// [0, 1): the first whose cumulative probability reaches u, the last if
// rounding leaves none. Equal logits are equally likely.
func softmaxPick(logits []float64, temperature, u float64) int {
	lo, hi := logits[0], logits[0]
	for _, v := range logits[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	n := len(logits)
	scaled := func(v float64) float64 { return -(v / (hi - lo)) / temperature }
	top, sum := math.Inf(-1), 0.0
	if lo != hi {
		for _, v := range logits {
			top = max(top, scaled(v))
		}
		for _, v := range logits {
			sum += math.Exp(scaled(v) - top)
		}
	}
	var cum float64
	for i, v := range logits {
		if lo == hi {
			cum += 1 / float64(n) // all alike: uniform
		} else {
			cum += math.Exp(scaled(v)-top) / sum
		}
		if u <= cum {
			return i
		}
	}
	return n - 1
}
