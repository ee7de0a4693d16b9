package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// fakeCluster is a Cluster whose state a test sets.
type fakeCluster struct {
	loads []WorkerLoad
	out   []Outstanding
}

func (f *fakeCluster) NumWorkers() int            { return len(f.out) }
func (f *fakeCluster) Load(i int) WorkerLoad      { return f.loads[i] }
func (f *fakeCluster) Loads() []WorkerLoad        { return f.loads }
func (f *fakeCluster) Outstanding() []Outstanding { return f.out }
func (f *fakeCluster) Ready() []int {
	var r []int
	for i := range f.out {
		r = append(r, i)
	}
	return r
}

func newFake(n int) *fakeCluster {
	f := &fakeCluster{loads: make([]WorkerLoad, n), out: make([]Outstanding, n)}
	for i := range f.loads {
		f.loads[i].TotalBlocks = 100
		f.loads[i].FreeBlocks = 100
	}
	return f
}

func build(t *testing.T, name string, workers int, rc RouterConfig) Router {
	t.Helper()
	cfg := Config{Workers: workers, Router: name, RouterConfig: rc}.Effective(1000)
	r, err := newRouter(&cfg, workers, 1000*16, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLoadRouters(t *testing.T) {
	f := newFake(4)
	f.out[0].Requests, f.out[1].Requests, f.out[2].Requests, f.out[3].Requests = 3, 1, 2, 1
	f.out[0].Tokens, f.out[1].Tokens, f.out[2].Tokens, f.out[3].Tokens = 10, 500, 20, 400
	if w := build(t, RouterLeastRequests, 4, RouterConfig{}).Route(&Routed{}, f); w != 1 {
		t.Errorf("least_requests chose %d, want 1 (first of the least loaded after the last)", w)
	}
	q := &Routed{}
	if w := build(t, RouterLeastTokens, 4, RouterConfig{}).Route(q, f); w != 0 || q.Score != 10 {
		t.Errorf("least_tokens chose %d (score %v), want 0 (10)", w, q.Score)
	}
	p2 := build(t, RouterPowerOfTwo, 4, RouterConfig{})
	for range 100 {
		if w := p2.Route(&Routed{}, f); w == 0 {
			t.Fatal("power_of_two chose the most loaded worker, which loses every pair")
		}
	}
}

func TestSessionAffinity(t *testing.T) {
	f := newFake(4)
	r := build(t, RouterSession, 4, RouterConfig{})
	home := r.Route(&Routed{Session: "s1"}, f)
	for range 5 {
		if w := r.Route(&Routed{Session: "s1"}, f); w != home {
			t.Fatalf("session s1 moved from %d to %d", home, w)
		}
	}
	// Overload the home worker: ⌈1.25·(10+1)/4⌉ = 4 outstanding is the bound.
	f.out[home].Requests = 10
	q := &Routed{Session: "s1"}
	if w := r.Route(q, f); w != (home+1)%4 || q.Score != 1 {
		t.Errorf("overloaded home %d: chose %d (spilled %v), want %d (1)", home, w, q.Score, (home+1)%4)
	}
}

func TestSGLangCacheAware(t *testing.T) {
	f := newFake(3)
	r := build(t, RouterSGLang, 3, RouterConfig{})
	a := &Routed{HashIDs: []int64{1, 2, 3, 4}, BlockSize: 16}
	first := r.Route(a, f)
	// The same conversation, grown: more than 0.3 matched goes where its
	// prefix went.
	b := &Routed{HashIDs: []int64{1, 2, 3, 4, 5}, BlockSize: 16}
	if w := r.Route(b, f); w != first || b.Score != 0.8 {
		t.Errorf("grown prompt went to %d (match %v), want %d (0.8)", w, b.Score, first)
	}
	// Unrelated: to the smallest tree, not the one that holds blocks.
	if w := r.Route(&Routed{HashIDs: []int64{9}, BlockSize: 16}, f); w == first {
		t.Errorf("an unmatched request went to the largest tree")
	}
	// Imbalanced (spread > 64 and max > 1.5·min): the least loaded wins
	// whatever it holds.
	f.out[first].Requests = 100
	f.out[(first+1)%3].Requests = 20
	f.out[(first+2)%3].Requests = 30
	if w := r.Route(&Routed{HashIDs: []int64{1, 2, 3, 4, 5, 6}, BlockSize: 16}, f); w != (first+1)%3 {
		t.Errorf("imbalanced cluster: chose %d, want the least loaded %d", w, (first+1)%3)
	}
}

func TestLLMD(t *testing.T) {
	f := newFake(3)
	r := build(t, RouterLLMD, 3, RouterConfig{})
	first := r.Route(&Routed{Prompt: 32, HashIDs: []int64{1, 2}, BlockSize: 16}, f)
	q := &Routed{Prompt: 32, HashIDs: []int64{1, 2}, BlockSize: 16}
	if w := r.Route(q, f); w != first || q.Score != 3+2+2 {
		t.Errorf("repeat went to %d (score %v), want %d (7)", w, q.Score, first)
	}
	// A long queue and a full KV cache there outweigh the prefix:
	// 3·1 + 2·0 + 2·0 = 3 against 3·0 + 2·1 + 2·1 = 4 elsewhere.
	f.loads[first].Waiting = 10
	f.loads[first].FreeBlocks = 0
	if w := r.Route(&Routed{Prompt: 32, HashIDs: []int64{1, 2}, BlockSize: 16}, f); w == first {
		t.Errorf("a full, queued worker still won on its prefix")
	}
}

// llm-d hashes a prompt's whole blocks of prefix_block_tokens, at most
// max_prefix_blocks of them, and knows each by the trace block it ends in.
func TestLLMDHashedBlocks(t *testing.T) {
	for _, c := range []struct {
		hashTokens, maxBlocks, prompt, traceBlock int64
		ids                                       []int64
		wantIDs, wantWeights                      []int64
		wantTotal                                 int64
	}{
		// Two hash blocks in each trace block, four at most.
		{16, 4, 100, 32, []int64{10, 20, 30, 40}, []int64{10, 20}, []int64{2, 2}, 4},
		// Trace blocks of 24 tokens: the hash blocks end at 16, 32, …,
		// 96, in trace blocks 0, 1, 1, 2, 3, 3.
		{16, 256, 100, 24, []int64{10, 20, 30, 40, 50}, []int64{10, 20, 30, 40}, []int64{1, 2, 1, 2}, 6},
		// Hash blocks longer than trace blocks: ends at 16 and 32, in
		// trace blocks 1 and 3; the others stand for no hash block.
		{16, 256, 40, 8, []int64{1, 2, 3, 4, 5}, []int64{2, 4}, []int64{1, 1}, 2},
		// Shorter than a hash block: nothing hashed.
		{16, 256, 15, 16, []int64{1}, nil, nil, 0},
	} {
		r := build(t, RouterLLMD, 2, RouterConfig{PrefixBlockTokens: c.hashTokens, MaxPrefixBlocks: c.maxBlocks}).(*llmD)
		total := r.hashed(&Routed{Prompt: c.prompt, HashIDs: c.ids, BlockSize: c.traceBlock})
		if total != c.wantTotal || !slices.Equal(r.ids, c.wantIDs) || !slices.Equal(r.weights, c.wantWeights) {
			t.Errorf("%+v: %d blocks, ids %v weights %v; want %d, %v, %v", c, total, r.ids, r.weights, c.wantTotal, c.wantIDs, c.wantWeights)
		}
	}
}

// hashed's common case (trace blocks whole hash blocks long) gives what
// hashedAny gives.
func TestLLMDHashedWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		g := int64(1 + rng.IntN(32))
		tb := g * int64(1+rng.IntN(8))
		r := build(t, RouterLLMD, 1, RouterConfig{PrefixBlockTokens: g, MaxPrefixBlocks: int64(1 + rng.IntN(40))}).(*llmD)
		ids := make([]int64, rng.IntN(12))
		for j := range ids {
			ids[j] = int64(j)
		}
		q := &Routed{Prompt: int64(rng.IntN(400)), HashIDs: ids, BlockSize: tb}
		n := r.hashed(q)
		got, gotW := slices.Clone(r.ids), slices.Clone(r.weights)
		r.ids, r.weights = r.ids[:0], r.weights[:0]
		r.hashedAny(ids, g, tb, n)
		if !slices.Equal(got, r.ids) || !slices.Equal(gotW, r.weights) {
			t.Fatalf("g %d, trace block %d, %d blocks of %d ids: ids %v weights %v, hashedAny %v %v", g, tb, n, len(ids), got, gotW, r.ids, r.weights)
		}
	}
}

// llm-d's LRU takes a request's blocks in prompt order, so the first is
// evicted first; and a server's match counts the blocks it holds along
// the prefix that some server holds, held in a row or not.
func TestLLMDEvictsFirstAndMatchesShared(t *testing.T) {
	f := newFake(2)
	// Three blocks of 16 tokens per server; hash blocks as the trace's.
	r := build(t, RouterLLMD, 2, RouterConfig{LRUCapacityTokens: 3 * 16, PrefixBlockTokens: 16}).(*llmD)
	to := func(w int, q *Routed) {
		t.Helper()
		f.loads[w].Waiting, f.loads[1-w].Waiting = 0, 10
		if got := r.Route(q, f); got != w {
			t.Fatalf("%v went to %d, want %d", q.HashIDs, got, w)
		}
	}
	to(0, &Routed{Prompt: 48, HashIDs: []int64{1, 2, 3}, BlockSize: 16})
	to(0, &Routed{Prompt: 16, HashIDs: []int64{9}, BlockSize: 16}) // block 1 goes
	to(1, &Routed{Prompt: 16, HashIDs: []int64{1}, BlockSize: 16})
	q := &Routed{Prompt: 48, HashIDs: []int64{1, 2, 3}, BlockSize: 16}
	r.hashed(q)
	r.index.matchShared(r.ids, r.weights, r.match)
	if !slices.Equal(r.match, []int{2, 1}) {
		t.Errorf("matches %v, want [2 1]: worker 0 holds blocks 2 and 3, worker 1 block 1", r.match)
	}
	f.loads[0].Waiting, f.loads[1].Waiting = 0, 0
	if w := r.Route(q, f); w != 0 || q.Score != 3*(2.0/3)+2+2 {
		t.Errorf("went to %d (score %v), want 0 (%v)", w, q.Score, 3*(2.0/3)+2+2)
	}
}

func TestDynamoKV(t *testing.T) {
	f := newFake(2)
	r := build(t, RouterDynamo, 2, RouterConfig{}).(*dynamoKV)
	r.kvStored(1, []int64{1, 2, 3, 4}, 16, 0) // worker 1 holds 64 tokens of the prefix
	route := func(idx int, ids []int64, want int, cost float64, why string) {
		t.Helper()
		q := &Routed{Index: idx, Prompt: 80, Out: 1000, HashIDs: ids, BlockSize: 16, SharedIDs: len(ids)}
		if w := r.Route(q, f); w != want || q.Score != cost {
			t.Errorf("request %d went to %d (logit %v), want %d (%v): %s", idx, w, q.Score, want, cost, why)
		}
	}
	route(0, []int64{1, 2, 3, 4, 5}, 1, 6, "worker 0: 80/16 prefill blocks + 5 new blocks; worker 1: 16/16 + 5 (no output counted)")
	route(1, []int64{1, 2, 3, 4, 5}, 1, 7, "worker 1: (16 active + 16)/16 + 5 active blocks, the same five (worker 0: 10)")
	r.prefillDone(0)
	route(2, []int64{9, 8, 7, 6, 5}, 0, 10, "worker 0: 5 + 5; worker 1: (16 + 80)/16 + 5 + 5 = 16")
	r.freed(0)
	r.freed(1)
	r.freed(1) // once is enough
	if a := r.active; a.tokens[1] != 0 || a.blocks[1] != 0 || a.tokens[0] != 80 || a.blocks[0] != 5 {
		t.Errorf("after two ended: prefill tokens %v, blocks %v; want [80 0] and [5 0]", a.tokens, a.blocks)
	}
	route(3, []int64{1, 2, 3, 4, 5}, 1, 6, "as the first again")

	// Trace blocks of 20 tokens, engine blocks of 16: worker 1's match
	// of two ids (40 tokens) is two whole engine blocks, 32 tokens.
	r = build(t, RouterDynamo, 2, RouterConfig{}).(*dynamoKV)
	r.kvStored(1, []int64{7, 8}, 20, 0)
	q := &Routed{Index: 0, Prompt: 100, HashIDs: []int64{7, 8, 9}, BlockSize: 20, SharedIDs: 3}
	if w := r.Route(q, f); w != 1 || q.Score != 68.0/16+6 {
		t.Errorf("trace blocks of 20: went to %d (logit %v), want 1 (%v = (100 − 32)/16 + 6)", w, q.Score, 68.0/16+6)
	}
}

// Disaggregated, Dynamo's router routes the prefill pool with active
// blocks untracked, as Dynamo's prefill router: a worker's logit is its
// prefill term alone, active prefill tokens included.
func TestDynamoKVPrefillRouter(t *testing.T) {
	f := newFake(2)
	cfg := Config{Workers: 3, Router: RouterDynamo, Disaggregation: DisaggregationConfig{PrefillWorkers: 2}}.Effective(1000)
	rt, err := newRouter(&cfg, 3, 1000*16, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	r := rt.(*dynamoKV)
	r.kvStored(1, []int64{1, 2, 3, 4}, 16, 0)
	q := &Routed{Index: 0, Prompt: 80, HashIDs: []int64{1, 2, 3, 4, 5}, BlockSize: 16, SharedIDs: 5}
	if w := r.Route(q, f); w != 1 || q.Score != 1 {
		t.Errorf("went to %d (logit %v), want 1 (16/16: no blocks term)", w, q.Score)
	}
	q = &Routed{Index: 1, Prompt: 80, HashIDs: []int64{9, 8, 7, 6, 5}, BlockSize: 16, SharedIDs: 5}
	if w := r.Route(q, f); w != 0 || q.Score != 5 {
		t.Errorf("went to %d (logit %v), want 0 (80/16; worker 1: (16 + 80)/16)", w, q.Score)
	}
	if a := r.active; a.blocks[0] != 0 || a.blocks[1] != 0 || a.tokens[0] != 80 || a.tokens[1] != 16 {
		t.Errorf("blocks %v, prefill tokens %v; want none, and [80 16]", a.blocks, a.tokens)
	}
}

// Dynamo's softmax_sample above temperature 0: probabilities of a
// softmax of the negated logits over their range, by the temperature,
// drawn by cumulative sums; equal logits uniform.
func TestDynamoSoftmaxPick(t *testing.T) {
	logits := []float64{3, 5, 7}
	// Scaled: −3/4, −5/4, −7/4 at temperature 1; weights e^0, e^−0.5, e^−1.
	w := []float64{1, math.Exp(-0.5), math.Exp(-1)}
	sum := w[0] + w[1] + w[2]
	p0, p1 := w[0]/sum, w[1]/sum
	for _, c := range []struct {
		u    float64
		want int
	}{{0, 0}, {p0 - 1e-9, 0}, {p0 + 1e-9, 1}, {p0 + p1 - 1e-9, 1}, {p0 + p1 + 1e-9, 2}, {0.999999, 2}} {
		if got := softmaxPick(logits, 1, c.u); got != c.want {
			t.Errorf("u %v: picked %d, want %d (probabilities %.4f %.4f %.4f)", c.u, got, c.want, p0, p1, 1-p0-p1)
		}
	}
	// Hotter is flatter: at temperature 100 each is about a third likely
	// (at 1, u 0.4 picks the best).
	if got := softmaxPick(logits, 100, 0.4); got != 1 {
		t.Errorf("temperature 100, u 0.4: picked %d, want 1 (about a third each)", got)
	}
	// A cumulative sum reached exactly is taken (Dynamo's sample <= cumsum).
	for u, want := range map[float64]int{0.2: 0, 1.0 / 3: 0, 0.5: 1, 0.9: 2} {
		if got := softmaxPick([]float64{4, 4, 4}, 1, u); got != want {
			t.Errorf("equal logits, u %v: picked %d, want %d", u, got, want)
		}
	}
	// In a router: a temperature spreads requests a cold router sends to
	// one worker; the score stays the chosen worker's logit.
	f := newFake(2)
	r := build(t, RouterDynamo, 2, RouterConfig{RouterTemperature: 1}).(*dynamoKV)
	r.kvStored(1, []int64{1, 2, 3, 4}, 16, 0)
	seen := map[int]int{}
	for i := range 400 {
		q := &Routed{Index: i, Prompt: 80, HashIDs: []int64{1, 2, 3, 4, 5}, BlockSize: 16, SharedIDs: 5}
		w := r.Route(q, f)
		seen[w]++
		r.freed(i)
		if want := []float64{10, 6}[w]; q.Score != want {
			t.Fatalf("request %d went to %d with logit %v, want %v", i, w, q.Score, want)
		}
	}
	// Logits 10 and 6: probabilities 1/(1+e) and e/(1+e), 0.27 and 0.73.
	if seen[0] < 70 || seen[0] > 150 {
		t.Errorf("at temperature 1, %d of 400 went to worker 0, want about 108", seen[0])
	}
}

func TestMaxPrefix(t *testing.T) {
	f := newFake(3)
	r := build(t, RouterMaxPrefix, 3, RouterConfig{}).(*maxPrefix)
	r.kvStored(2, []int64{7, 8}, 16, 0)
	q := &Routed{HashIDs: []int64{7, 8, 9, 10}, BlockSize: 16}
	if w := r.Route(q, f); w != 2 || q.Score != 0.5 {
		t.Errorf("chose %d (score %v), want 2 (0.5)", w, q.Score)
	}
	seen := map[int]bool{}
	for range 50 {
		seen[r.Route(&Routed{HashIDs: []int64{99}, BlockSize: 16}, f)] = true
	}
	if len(seen) != 3 {
		t.Errorf("unmatched requests went to %v, want a random worker", seen)
	}
}

func TestPrefixIndexEvictsDeepestFirst(t *testing.T) {
	x := newPrefixIndex(1, 3*16)
	x.insert(0, []int64{1, 2, 3}, 16)
	x.insert(0, []int64{1, 2, 4}, 16) // 4 blocks: 3, the deepest of the older prefix, goes
	n := make([]int, 1)
	if x.matchAll([]int64{1, 2, 3}, n); n[0] != 2 {
		t.Errorf("after eviction, prefix 1,2,3 matches %d blocks, want 2", n[0])
	}
	if x.matchAll([]int64{1, 2, 4}, n); n[0] != 3 {
		t.Errorf("the newer prefix matches %d blocks, want 3", n[0])
	}
}

// The holder bits say what the use counts say: matchBits and matchUses
// agree after random insertions (with evictions at a small capacity),
// matches and workers dropped, for worker counts up to 64 (words of 16,
// 32 and 64 holder bits).
func TestPrefixIndexHolderBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, workers := range []int{1, 3, 16, 17, 32, 33, 64} {
		x := newPrefixIndex(workers, 40*16)
		a, b := make([]int, workers), make([]int, workers)
		ids := func() []int64 {
			q := make([]int64, 1+rng.IntN(12))
			for j := range q {
				// A few short common prefixes, then other ids.
				if j < 3 {
					q[j] = int64(rng.IntN(3))
				} else {
					q[j] = int64(rng.IntN(200))
				}
			}
			return q
		}
		for op := range 5000 {
			switch k := rng.IntN(20); {
			case k == 0:
				x.dropWorker(rng.IntN(workers))
			case k < 10:
				x.insert(rng.IntN(workers), ids(), 16)
			default:
				q := ids()
				x.matchAll(q, a) // by the holder bits, with at most 64 workers
				clear(b)
				x.matchUses(q, b)
				for w := range a {
					if a[w] != b[w] {
						t.Fatalf("%d workers, op %d: %v matches %v by holder bits, %v by stamps", workers, op, q, a, b)
					}
				}
				// llm-d's count, by the holder bits and by the use
				// counts, with weights 1 … len(q).
				weights := make([]int64, len(q))
				for j := range weights {
					weights[j] = int64(j + 1)
				}
				x.matchShared(q, weights, a) // by the holder bits
				clear(b)
				x.matchSharedUses(q, weights, b)
				if !slices.Equal(a, b) {
					t.Fatalf("%d workers, op %d: %v: llm-d's matches %v by holder bits, %v by use counts", workers, op, q, a, b)
				}
			}
		}
	}
}

// TestInsertHeldMatchesInsert drives two prefix indexes through the same
// random insertions, dropped workers and matches, one inserting every id
// (insert), the other leaving out the prefix that matchAll says the
// worker holds (insertHeld, as SGLang's router inserts). Unbounded, the
// one that leaves the prefix out must match every query as a plain set
// of ids per worker does, and count what the set holds; bounded (LRU),
// insertHeld must insert every id, and the two match and evict alike.
// For more than 64 workers the use counts themselves say who holds a slot
// (matchUses).
func TestInsertHeldMatchesInsert(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, workers := range []int{1, 3, 16, 65} {
		for _, capTokens := range []int64{0, 40 * 16} {
			x, y := newPrefixIndex(workers, capTokens), newPrefixIndex(workers, capTokens)
			a, b := make([]int, workers), make([]int, workers)
			held := make([]map[int64]bool, workers) // the reference, unbounded
			for w := range held {
				held[w] = map[int64]bool{}
			}
			ids := func() []int64 {
				q := make([]int64, 1+rng.IntN(12))
				for j := range q {
					// A few common prefixes, some long, then other ids.
					if j < 3+rng.IntN(6) {
						q[j] = int64(j*10 + rng.IntN(2))
					} else {
						q[j] = int64(100 + rng.IntN(200))
					}
				}
				return q
			}
			for op := range 5000 {
				q := ids()
				x.matchAll(q, a)
				y.matchAll(q, b)
				for w := range a {
					want := a[w]
					if capTokens == 0 {
						want = 0
						for want < len(q) && held[w][q[want]] {
							want++
						}
					}
					if b[w] != want || a[w] != want {
						t.Fatalf("%d workers, capacity %d, op %d: %v matches worker %d to %d inserting all, %d leaving out what is held, %d by the reference", workers, capTokens, op, q, w, a[w], b[w], want)
					}
				}
				switch k := rng.IntN(20); {
				case k == 0:
					w := rng.IntN(workers)
					x.dropWorker(w)
					y.dropWorker(w)
					clear(held[w])
				case k < 12:
					w := rng.IntN(workers)
					x.insert(w, q, 16)
					y.insertHeld(w, q, 16, b[w])
					for _, id := range q {
						held[w][id] = true
					}
				}
				for w := range workers {
					if x.count[w] != y.count[w] || capTokens == 0 && y.count[w] != int64(len(held[w])) {
						t.Fatalf("%d workers, capacity %d, op %d: worker %d holds %d blocks inserting all, %d leaving out what is held, %d by the reference", workers, capTokens, op, w, x.count[w], y.count[w], len(held[w]))
					}
				}
			}
		}
	}
}

// A slotTable gives small counters their own slots, through slotsOf's
// loop (own) and add alike, until an id that is not small, from which it
// numbers them: every id keeps the slot it was given, no two ids share
// one (an id below n never seen gets a new one), get finds every id given
// one and no other; and counters far ahead (each four times the last)
// end the own slots before they blow up what is kept a slot.
func TestSlotTableOwnSlots(t *testing.T) {
	x := newPrefixIndex(2, 0)
	tab := &x.slots
	want := map[int64]int32{}
	owner := map[int32]int64{}
	rng := rand.New(rand.NewPCG(7, 8))
	give := func(step int, ids []int64) {
		t.Helper()
		if step%2 == 0 {
			for j, s := range x.slotsOf(ids) {
				if w, ok := want[ids[j]]; ok && w != s {
					t.Fatalf("step %d: id %d moved from slot %d to %d", step, ids[j], w, s)
				}
				want[ids[j]] = s
			}
		} else {
			for _, id := range ids {
				if _, ok := tab.get(id); !ok {
					want[id] = tab.add(id)
				}
			}
		}
		for _, id := range ids {
			s := want[id]
			if o, ok := owner[s]; ok && o != id {
				t.Fatalf("step %d: ids %d and %d share slot %d", step, o, id, s)
			}
			owner[s] = id
			if !tab.table && s != int32(id) {
				t.Fatalf("step %d: id %d has slot %d, not its own", step, id, s)
			}
		}
	}
	check := func(step int) {
		t.Helper()
		for k := range 50 {
			id := int64(rng.IntN(4000)) - 10
			if k == 0 {
				id = int64(rng.Uint64())
			}
			s, ok := tab.get(id)
			w, wok := want[id]
			if ok != wok || (ok && s != w) {
				t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", step, id, s, ok, w, wok)
			}
		}
	}
	for step := range 300 { // counters with gaps, repeats and a few out of order
		ids := make([]int64, 1+rng.IntN(8))
		for j := range ids {
			ids[j] = int64(step*10 + rng.IntN(12) - 1)
			if ids[j] < 0 {
				ids[j] = 0
			}
		}
		give(step, ids)
		check(step)
	}
	if tab.table {
		t.Fatal("counters were numbered: the test does not exercise ids as their own slots")
	}
	n := tab.n
	give(300, []int64{5, -1 << 40, 2999, 3000 + 4*int64(n)}) // a hash ends the own slots
	if !tab.table {
		t.Fatal("a hash did not end the own slots")
	}
	for step := 301; step < 600; step++ { // below the old n, unseen ones too, and on
		ids := make([]int64, 1+rng.IntN(8))
		for j := range ids {
			ids[j] = int64(rng.IntN(int(n) + 2000))
		}
		give(step, ids)
		check(step)
	}
	y := newPrefixIndex(2, 0)
	for id := int64(0); !y.slots.table; id = 4*id + 4096 {
		if id > 1<<20 {
			t.Fatalf("counters four times apart reached %d without being numbered", id)
		}
		y.slotsOf([]int64{id})
	}
}

// A slotTable gives each id one slot, whether it lands in the dense part
// (small counters) or the map (hashes, negative ids, and counters too far
// ahead when they came, which the dense part may reach later), and every
// slot stays findable after the dense part grows over it; checked
// against a plain map.
func TestSlotTableMatchesMap(t *testing.T) {
	var tab slotTable
	want := map[int64]int32{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		var id int64
		switch i % 4 {
		case 0:
			id = int64(i) // dense counter
		case 1:
			id = int64(rng.Uint64()) // hash, possibly negative
		case 2:
			id = int64(rng.IntN(8 * (i + 1))) // ahead of the counter, often beyond the dense part
		case 3:
			id = int64(rng.IntN(i + 1)) // seen before, often
		}
		s, ok := tab.get(id)
		w, wok := want[id]
		if ok != wok || (ok && s != w) {
			t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", i, id, s, ok, w, wok)
		}
		if !ok {
			want[id] = tab.add(id)
			if want[id] != int32(len(want)-1) {
				t.Fatalf("step %d: add(%d) gave slot %d, want %d", i, id, want[id], len(want)-1)
			}
		}
	}
	if len(tab.sparse) == 0 || len(tab.dense) == 0 {
		t.Fatalf("dense %d, sparse %d ids: both parts should be exercised", len(tab.dense), len(tab.sparse))
	}
	for id, w := range want {
		if s, ok := tab.get(id); !ok || s != w {
			t.Fatalf("get(%d) = %d, %v at the end; want %d", id, s, ok, w)
		}
	}
}

// Every router replays a small trace to completion, deterministically,
// under the validator, with a stale view too; prefix routers record a
// score per request.
func TestRoutersReplay(t *testing.T) {
	reqs := randomTrace(7, 300, 40)
	for i, r := range reqs {
		r.Session = []string{"a", "b", "c", ""}[i%4]
	}
	for _, s := range routers {
		reqs := reqs
		if s.name == RouterRecorded {
			reqs = withWorkers(reqs, 3)
		}
		for _, view := range []float64{0, 0.5} {
			cfg := Config{Workers: 3, Router: s.name, RouterConfig: RouterConfig{ViewIntervalSec: view}}
			_, all, st := replay(t, cfg, linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}, 400, reqs)
			_, again, _ := replay(t, cfg, linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}, 400, reqs)
			if dump(all) != dump(again) {
				t.Errorf("%s view %g: two replays differ", s.name, view)
			}
			if st.Completed != len(reqs) {
				t.Errorf("%s: %d of %d completed", s.name, st.Completed, len(reqs))
			}
			eff := cfg.Effective(400)
			_, blind := must(newRouter(&eff, 3, 0, rand.New(rand.NewPCG(0, 0)))).(loadBlind)
			for _, r := range all {
				if r.RouterScore.OK == blind && s.name != RouterRecorded { // recorded scores nothing
					t.Errorf("%s: request %s has router score %v", s.name, r.RequestID, r.RouterScore)
					break
				}
				if s.name == RouterRecorded && r.RouterScore.OK {
					t.Errorf("%s: request %s has router score %v", s.name, r.RequestID, r.RouterScore)
					break
				}
				if err := r.Validate(); err != nil {
					t.Errorf("%s: %v", s.name, err)
					break
				}
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPrefixIndexLRUReference drives a bounded prefix index and a
// reference (a map of last uses per worker; each insertion uses its ids
// deepest first, and the least recently used go while more than the
// capacity remain) through the same random insertions, and compares
// every worker's match and count, with holder bits (16 workers) and
// without (65), with the ids small counters (their own slots) and hashes
// (numbered slots).
func TestPrefixIndexLRUReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, hashed := range []bool{false, true} {
		id := func(k int) int64 {
			if hashed {
				return int64(uint64(k+1) * 0x9e3779b97f4a7c15)
			}
			return int64(k)
		}
		for _, workers := range []int{16, 65} {
			const capBlocks = 30
			x := newPrefixIndex(workers, capBlocks*16)
			ref := newLRURef(workers, capBlocks)
			for op := range 4000 {
				q := make([]int64, 1+rng.IntN(10))
				for j := range q {
					q[j] = id(j*7 + rng.IntN(6))
				}
				w := rng.IntN(workers)
				x.insert(w, q, 16)
				ref.insert(w, q)
				p := make([]int64, 1+rng.IntN(10))
				for j := range p {
					p[j] = id(j*7 + rng.IntN(6))
				}
				ref.check(t, x, p, fmt.Sprintf("%d workers, hashed %v, op %d", workers, hashed, op))
			}
			if x.slots.table != hashed {
				t.Errorf("%d workers, hashed %v: slots numbered %v", workers, hashed, x.slots.table)
			}
		}
	}
}

// An lruRef is the reference of a bounded prefix index: per worker, each
// id's last use (a clock), an insertion using its ids deepest first, and
// the least recently used going while more than capBlocks remain.
type lruRef struct {
	held      []map[int64]uint64
	clock     uint64
	capBlocks int
}

func newLRURef(workers, capBlocks int) *lruRef {
	r := &lruRef{held: make([]map[int64]uint64, workers), capBlocks: capBlocks}
	for w := range r.held {
		r.held[w] = map[int64]uint64{}
	}
	return r
}

// insert records that worker w was sent ids q.
func (r *lruRef) insert(w int, q []int64) {
	h := r.held[w]
	for j := len(q) - 1; j >= 0; j-- {
		r.clock++
		h[q[j]] = r.clock
	}
	for len(h) > r.capBlocks {
		var oldest int64
		least := uint64(math.MaxUint64)
		for id, c := range h {
			if c < least {
				oldest, least = id, c
			}
		}
		delete(h, oldest)
	}
}

// check compares x's match of p and count with the reference's, worker
// by worker; at says where, for the failure.
func (r *lruRef) check(t *testing.T, x *prefixIndex, p []int64, at string) {
	t.Helper()
	n := make([]int, len(r.held))
	x.matchAll(p, n)
	for v, h := range r.held {
		want := 0
		for want < len(p) && h[p[want]] != 0 {
			want++
		}
		if n[v] != want || x.count[v] != int64(len(h)) {
			t.Fatalf("%s: worker %d matches %v to %d holding %d, reference %d holding %d", at, v, p, n[v], x.count[v], want, len(h))
		}
	}
}

// TestPrefixIndexRowsRecycled drives a bounded index whose workers' ids
// move on through many rows of use counts (a trace's new prompts), with a
// few old ids kept (a shared system prompt) and workers dropped, against
// the reference LRU (lruRef): the rows a worker
// stops using are given back and taken again by others, so a row given
// back while still named, or not cleared, shows as a wrong match or
// count. It checks too that each row's count of held slots is right,
// that the spare rows are zeros, and that rows were taken again.
func TestPrefixIndexRowsRecycled(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const workers, capBlocks = 5, 40
	x := newPrefixIndex(workers, capBlocks*16)
	ref := newLRURef(workers, capBlocks)
	ids := func(op int) []int64 {
		q := make([]int64, 1+rng.IntN(12))
		base := int64(op) * 5 // on through some 20 rows
		for j := range q {
			if j == 0 && rng.IntN(3) == 0 {
				q[j] = int64(rng.IntN(3)) // an old shared id
			} else {
				q[j] = base + int64(j*3+rng.IntN(3))
			}
		}
		return q
	}
	reused := 0
	for op := range 4000 {
		w := rng.IntN(workers)
		if rng.IntN(50) == 0 {
			x.dropWorker(w)
			clear(ref.held[w])
			continue
		}
		spare := len(x.spare)
		q := ids(op)
		x.insert(w, q, 16)
		if len(x.spare) < spare {
			reused++
		}
		ref.insert(w, q)
		ref.check(t, x, ids(op-rng.IntN(20)), fmt.Sprintf("op %d", op))
		checkUseRows(t, x, op)
	}
	if reused < 100 {
		t.Errorf("rows taken again from the spares %d times, want at least 100: the test does not recycle rows", reused)
	}
}

// TestPrefixIndexCountsPastUseMax drives a bounded index in which one
// worker is sent one id far more than useMax times while the others fit
// its capacity (nothing is evicted, so its queue keeps every use), then
// other ids until that one is evicted, against the reference LRU: a use
// past useMax not counted (the over map) evicts it as soon as the queue
// reaches its last useMax uses, one counted wrongly keeps it too long.
func TestPrefixIndexCountsPastUseMax(t *testing.T) {
	const capBlocks = 40
	x := newPrefixIndex(2, capBlocks*16)
	ref := newLRURef(2, capBlocks)
	hot := []int64{7}
	for op := range 3 * useMax {
		q := hot
		if op%50 == 0 {
			q = []int64{7, int64(100 + op/50)} // a few others too
		}
		x.insert(0, q, 16)
		ref.insert(0, q)
		ref.check(t, x, hot, fmt.Sprintf("op %d", op))
	}
	if len(x.uses[0].over) == 0 {
		t.Fatalf("no count passed %d: the test does not reach the over map", useMax)
	}
	for op := range 4 * useMax {
		q := []int64{int64(1000 + op)}
		x.insert(0, q, 16)
		ref.insert(0, q)
		ref.check(t, x, hot, fmt.Sprintf("after, op %d", op))
		ref.check(t, x, q, fmt.Sprintf("after, op %d", op))
	}
	if len(x.uses[0].over) != 0 || ref.held[0][7] != 0 {
		t.Errorf("the hot id is still held (over map %v): the test did not evict it", x.uses[0].over)
	}
}

// TestPrefixIndexRunsReference drives a bounded index with prompts made
// of runs of consecutive ids, as a trace's are (a conversation's prompt
// runs on from the last one's ids: the Mooncake conversation trace's
// 288,500 ids are 33,391 runs), against the reference LRU (lruRef):
// a hot run that crosses a row's end and is sent often enough that its
// counts pass useMax, old runs extended, and new ones, so that the
// queue's runs are popped in part, whole, across rows and through counts
// at useMax; with ids their own slots and with hashed ids numbered.
func TestPrefixIndexRunsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, hashed := range []bool{false, true} {
		id := func(k int64) int64 {
			if hashed {
				return int64(uint64(k+1) * 0x9e3779b97f4a7c15)
			}
			return k
		}
		const workers, capBlocks = 3, 700
		x := newPrefixIndex(workers, capBlocks*16)
		ref := newLRURef(workers, capBlocks)
		next := int64(useChunk + 40)       // new ids from here on
		starts := make([][]int64, workers) // per worker, the starts of runs sent there
		prompt := func(w int) []int64 {
			var q []int64
			if rng.IntN(16) != 0 {
				for k := range int64(12) { // the hot run, over a row's end
					q = append(q, id(useChunk-6+k))
				}
			}
			for range 1 + rng.IntN(3) {
				var start, n int64
				switch {
				case len(starts[w]) > 0 && rng.IntN(8) != 0: // a recent run, its start again
					s := starts[w]
					start, n = s[len(s)-1-rng.IntN(min(len(s), 6))], 1+rng.Int64N(30)
				default:
					start, n = next, 1+rng.Int64N(40)
					next += n
					starts[w] = append(starts[w], start)
				}
				for k := range n {
					q = append(q, id(start+k))
				}
			}
			return q
		}
		passed := false
		for op := range 6000 {
			w := rng.IntN(workers)
			if w == 2 && rng.IntN(40) == 0 {
				x.dropWorker(w)
				clear(ref.held[w])
				starts[w] = nil
				continue
			}
			q := prompt(w)
			if op >= 1000 && op < 1400 {
				// A spell of the hot run alone to worker 0: its counts
				// pass useMax, and are popped back through it after.
				w, q = 0, q[:0]
				for k := range int64(12) {
					q = append(q, id(useChunk-6+k))
				}
			}
			x.insert(w, q, 16)
			ref.insert(w, q)
			ref.check(t, x, q, fmt.Sprintf("hashed %v, op %d", hashed, op))
			ref.check(t, x, prompt(rng.IntN(workers)), fmt.Sprintf("hashed %v, op %d", hashed, op))
			checkUseRows(t, x, op)
			for _, u := range x.uses {
				passed = passed || len(u.over) > 0
			}
		}
		if !passed {
			t.Errorf("hashed %v: no count passed %d: the test does not reach the over map", hashed, useMax)
		}
		if next < 2*useChunk {
			t.Errorf("hashed %v: ids up to %d: the test's runs do not run over rows", hashed, next)
		}
	}
}

// checkUseRows checks that each worker's row counts the slots it holds
// there and that the spare rows are zeros.
func checkUseRows(t *testing.T, x *prefixIndex, op int) {
	t.Helper()
	for w, u := range x.uses {
		for c, r := range u.rows {
			held := int32(0)
			if r != nil {
				for _, k := range r {
					if k != 0 {
						held++
					}
				}
				if held == 0 {
					t.Fatalf("op %d: worker %d keeps row %d, where it holds no slot", op, w, c)
				}
			}
			if u.live[c] != held {
				t.Fatalf("op %d: worker %d holds %d slots of row %d, counted %d", op, w, held, c, u.live[c])
			}
		}
	}
	for i, r := range x.spare {
		if *r != (useRow{}) {
			t.Fatalf("op %d: spare row %d is not zeros", op, i)
		}
	}
}

// BenchmarkPrefixIndexInsert inserts the Mooncake conversation trace's
// requests into a bounded index of 16 workers (llm-d's default capacity,
// 2,000,000 tokens a worker), round-robin, again and again.
func BenchmarkPrefixIndexInsert(b *testing.B) {
	ids, bs, _ := mooncakeIDs(b)
	x := newPrefixIndex(16, 2000000)
	for b.Loop() {
		for i := range ids {
			x.insert(i%16, ids[i], bs[i])
		}
	}
}
