package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// activeRef is activeSeqs the plain way: every full block of every active
// prompt named by its prompt's ids up to the trace block its last token
// lies in, and its index (a request's own past its ids), counted per
// worker.
type activeRef struct {
	held    []map[string]int // per slot: block name → requests holding it
	tokens  []int64
	reqs    map[int]refReq
	bs      int64
	prefill map[int]bool
}

type refReq struct {
	slot   int
	names  []string
	tokens int64
}

func blockNames(idx int, q *Routed, bs int64) []string {
	var names []string
	for k := range q.Prompt / bs {
		j := -1
		if q.BlockSize > 0 {
			j = int(((k+1)*bs - 1) / q.BlockSize)
		}
		if j >= 0 && j < len(q.HashIDs) {
			names = append(names, fmt.Sprintf("%d/%v/%d", q.BlockSize, q.HashIDs[:j+1], k))
		} else {
			names = append(names, fmt.Sprintf("own %d/%d", idx, k))
		}
	}
	return names
}

func (r *activeRef) newBlocks(names []string, w int) int64 {
	n := int64(0)
	for _, s := range names {
		if r.held[w][s] == 0 {
			n++
		}
	}
	return n
}

// Random prompts over a few shared id prefixes, trace and engine blocks of
// every relation (a multiple, a divisor, neither), prompts ending anywhere
// and ids covering less than the prompt, Routed.SharedIDs told or not,
// and ids that break the data model (one id after different prefixes):
// activeSeqs' blocks, new blocks and prefill tokens are the plain count's
// after every add, first token and free.
func TestActiveSeqsMatchesPlainCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sizes := range [][3]int64{{16, 16, 3}, {512, 16, 3}, {16, 64, 3}, {48, 32, 3}, {100, 16, 3}, {7, 3, 3}, {512, 16, 70}} {
		tbs, bs, slots := sizes[0], sizes[1], int(sizes[2])
		a := newActiveSeqs(slots, bs)
		ref := &activeRef{tokens: make([]int64, slots), reqs: map[int]refReq{}, bs: bs, prefill: map[int]bool{}}
		for range slots {
			ref.held = append(ref.held, map[string]int{})
		}
		var live []int
		fresh := int64(1000) // past the tree's codes
		for idx := range 3000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(live) == 0:
				q := &Routed{Index: idx}
				if rng.IntN(8) > 0 {
					// Ids as the data model has them (equal ids,
					// equal prefixes): up to four leading ids from a
					// binary tree of shared prefixes, then ids of
					// the request's own.
					q.BlockSize = tbs
					q.HashIDs = make([]int64, 1+rng.IntN(8))
					code, shared := int64(1), true
					for j := range q.HashIDs {
						if shared = shared && j < 4 && rng.IntN(4) > 0; shared {
							code = 2*code + int64(rng.IntN(2))
							q.HashIDs[j] = code
							q.SharedIDs = j + 1
						} else {
							fresh++
							q.HashIDs[j] = fresh
						}
					}
				}
				if q.BlockSize > 0 && rng.IntN(3) == 0 {
					// Many requests ending within one of two nodes,
					// at different places.
					q.HashIDs = []int64{2, 5}[:1+rng.IntN(2)]
					q.SharedIDs = len(q.HashIDs)
				}
				if q.BlockSize > 0 && rng.IntN(5) == 0 {
					// Ids that break the data model (an id after
					// different prefixes): told apart by prefix.
					q.HashIDs = make([]int64, 1+rng.IntN(5))
					for j := range q.HashIDs {
						q.HashIDs[j] = int64(3 + rng.IntN(3))
					}
					q.SharedIDs = len(q.HashIDs)
				}
				if rng.IntN(2) == 0 {
					// No other request has an id past the tree's,
					// but a router need not be told.
					q.SharedIDs = len(q.HashIDs)
				}
				covered := int64(len(q.HashIDs)) * max(q.BlockSize, 1)
				q.Prompt = max(0, covered-int64(rng.IntN(int(max(q.BlockSize, 1))+1))+int64(rng.IntN(3))*bs)
				if rng.IntN(6) == 0 {
					q.Prompt += int64(rng.IntN(200)) // past its ids
				}
				a.plan(q)
				names := blockNames(idx, q, bs)
				for w := range slots {
					if got, want := a.newb[w], ref.newBlocks(names, w); got != want {
						t.Fatalf("tb %d bs %d request %d (prompt %d, ids %v): slot %d new blocks %d, want %d", tbs, bs, idx, q.Prompt, q.HashIDs, w, got, want)
					}
				}
				w := rng.IntN(slots)
				tokens := int64(rng.IntN(100))
				a.add(idx, w, tokens)
				for _, s := range names {
					ref.held[w][s]++
				}
				ref.tokens[w] += tokens
				ref.reqs[idx] = refReq{slot: w, names: names, tokens: tokens}
				ref.prefill[idx] = true
				live = append(live, idx)
			case op < 7:
				idx := live[rng.IntN(len(live))]
				a.prefilled(idx)
				if ref.prefill[idx] {
					ref.tokens[ref.reqs[idx].slot] -= ref.reqs[idx].tokens
					ref.prefill[idx] = false
				}
			default:
				i := rng.IntN(len(live))
				idx := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				a.free(idx)
				a.free(idx) // a second free is no business of it
				q := ref.reqs[idx]
				for _, s := range q.names {
					if ref.held[q.slot][s]--; ref.held[q.slot][s] == 0 {
						delete(ref.held[q.slot], s)
					}
				}
				if ref.prefill[idx] {
					ref.tokens[q.slot] -= q.tokens
				}
				delete(ref.reqs, idx)
			}
			for w := range slots {
				if a.blocks[w] != int64(len(ref.held[w])) || a.tokens[w] != ref.tokens[w] {
					t.Fatalf("tb %d bs %d after request %d: slot %d holds %d blocks and %d prefill tokens, want %d and %d",
						tbs, bs, idx, w, a.blocks[w], a.tokens[w], len(ref.held[w]), ref.tokens[w])
				}
			}
		}
		for _, idx := range live {
			a.free(idx)
		}
		if a.inUse() != 0 || len(a.part) != 0 || len(a.other) != 0 || slices.Max(a.blocks) != 0 {
			t.Errorf("tb %d bs %d: all freed, %d entries, %d partial lists and %v blocks left", tbs, bs, a.inUse(), len(a.part), a.blocks)
		}
	}
}

// Every request Dynamo's router sent is freed by the replay's end, its
// first token seen first or not at all (a timeout), on a fixed fleet and
// an autoscaled one: nothing stays active.
func TestDynamoKVFreesEveryRequest(t *testing.T) {
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:1500]
	cost, blocks := llama8BOnH100(t)
	for name, cfg := range map[string]Config{
		"4 workers, 2 s timeout": {Workers: 4, Router: RouterDynamo, Client: ClientConfig{TimeoutSec: 2}},
		"autoscaled":             {Workers: 1, Router: RouterDynamo, Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 2, MaxReplicas: 4, SyncPeriodSec: 1, ScaleDownStabilizationSec: ptr(10.0)}},
	} {
		var r *dynamoKV
		st, err := RunInputs(cfg, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil },
			Options{test: testSwitches{atEnd: func(e *engine) { r = e.router.(*dynamoKV) }}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r == nil {
			t.Fatalf("%s: the replay did not end", name)
		}
		a := r.active
		live := 0
		for _, rec := range a.at {
			if rec != 0 {
				live++
			}
		}
		if live != 0 || a.inUse() != 0 || len(a.part) != 0 {
			t.Errorf("%s: %d requests, %d nodes, %d partial lists still active", name, live, a.inUse(), len(a.part))
		}
		for w := range a.tokens {
			if a.tokens[w] != 0 || a.blocks[w] != 0 {
				t.Errorf("%s: worker %d keeps %d prefill tokens and %d blocks", name, w, a.tokens[w], a.blocks[w])
			}
		}
		if len(a.recs) == 0 {
			t.Errorf("%s: the router recorded no request", name)
		}
		if a.firsts < int64(st.Completed) {
			t.Errorf("%s: the router heard %d first tokens of %d completed requests", name, a.firsts, st.Completed)
		}
		t.Logf("%s: %d completed, %d timed out, %d first tokens", name, st.Completed, st.TimedOut, a.firsts)
	}
}
