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
// requestLen tokens. Prefixes are named by 16-token blocks of each
// client's own stream, so a round matches the last round's prompt and
// output.
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
type benchMultiTurn struct {
	clients, rounds, maxParallel int
	requestLen, outputLen        int64
	rate                         float64 // --request-rate, sends per second
	seed                         uint64  // --seed
	roundBarrier                 bool    // --enable-round-barrier
}

// benchPoll is how long bench_multiturn's sender sleeps while
// max_parallel requests are in flight.
const benchPoll = 50 * time.Millisecond

// prompt is the length of a client's round r prompt (r from 1).
func (b benchMultiTurn) prompt(r int) int64 {
	return int64(r)*b.requestLen + int64(r-1)*b.outputLen
}

// request is client c's round r request, sent at at.
func (b benchMultiTurn) request(c, r int, at trace.Time) *trace.Request {
	const block = 16
	prompt := b.prompt(r)
	ids := make([]int64, prompt/block)
	for k := range ids {
		ids[k] = int64(c)<<32 | int64(k)
	}
	return &trace.Request{
		RequestID: benchID(c, r), Source: "bench_multiturn", Status: trace.StatusOK,
		Arrival:     trace.Some(at),
		InputTokens: trace.Some(prompt), OutputTokens: trace.Some(b.outputLen),
		BlockSize: trace.Some(int64(block)), HashIDs: ids,
	}
}

func benchID(c, r int) string { return fmt.Sprintf("c%d-r%d", c, r) }

// A benchSend is one request the benchmark sends: client, round (from
// 1), when.
type benchSend struct {
	client, round int
	at            trace.Time
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
			s := benchSend{client: c, round: done[c] + 1, at: now}
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
		for _, x := range sends {
			reqs = append(reqs, b.request(x.client, x.round, x.at+offset))
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
// run before (its prompts are the same: numpy draws them from the same
// seed), then the benchmark's own flush_cache, which empties SGLang's
// radix tree and host pool (HiRadixCache.reset) and leaves the storage
// backend as it is.
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
func prepopulated(s *Setup, b benchMultiTurn, flushTokens int64) (*benchPrelude, error) {
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
	var reqs []*trace.Request
	for c := range b.clients {
		r := b.request(c, b.rounds, 0)
		r.RequestID = fmt.Sprintf("pre-run-c%d", c)
		reqs = append(reqs, r)
	}
	flushAt, err := end(reqs)
	if err != nil {
		return nil, err
	}
	last := b.prompt(b.rounds)
	for i := 0; int64(i)*last < flushTokens; i++ {
		r := b.request(b.clients+i, b.rounds, flushAt) // a client the benchmark has not
		r.RequestID = fmt.Sprintf("pre-flush-%d", i)
		reqs = append(reqs, r)
	}
	startAt, err := end(reqs)
	if err != nil {
		return nil, err
	}
	return &benchPrelude{reqs: reqs, start: startAt}, nil
}
