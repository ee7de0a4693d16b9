package analyze

import (
	"container/list"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// bruteLRU simulates an LRU block cache of capacity blocks under the
// cache-curve rule and returns the block and token hits.
func bruteLRU(reqs []*trace.Request, capacity int, bs int64) (hitBlocks, hitTokens int64) {
	l := list.New()
	at := map[int64]*list.Element{}
	for _, r := range reqs {
		k := 0
		for k < len(r.HashIDs) && at[r.HashIDs[k]] != nil {
			k++
		}
		for j := range k {
			tok := bs
			if in, ok := r.InputTokens.Get(); ok {
				tok = min(bs, max(0, in-int64(j)*bs))
			}
			hitBlocks++
			hitTokens += tok
		}
		for _, h := range r.HashIDs {
			if e := at[h]; e != nil {
				l.MoveToFront(e)
				continue
			}
			at[h] = l.PushFront(h)
			if l.Len() > capacity {
				old := l.Back()
				l.Remove(old)
				delete(at, old.Value.(int64))
			}
		}
	}
	return hitBlocks, hitTokens
}

func checkAgainstBrute(t *testing.T, reqs []*trace.Request, capacities []int) *CacheCurve {
	t.Helper()
	c, err := ComputeCacheCurve(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, capacity := range capacities {
		wb, wt := bruteLRU(reqs, capacity, c.BlockSize)
		gb, gt := c.At(int64(capacity))
		if gb != wb || gt != wt {
			t.Errorf("capacity %d blocks: curve hits %d blocks / %d tokens, brute-force LRU %d / %d", capacity, gb, gt, wb, wt)
		}
	}
	return c
}

func loadMooncake(t *testing.T, rel string) []*trace.Request {
	t.Helper()
	path := shareddata.Path(t, rel)
	var reqs []*trace.Request
	_, _, err := ingest.Files([]string{path}, ingest.Options{Format: "mooncake", BlockSize: 512},
		func(r *trace.Request) error { reqs = append(reqs, r.Clone()); return nil },
		func(e *ingest.SyntaxError) { t.Errorf("%v", e) })
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestCacheCurveEqualsBruteForceLRUOnMooncake runs the one-pass curve and a
// brute-force LRU simulation on both real Mooncake traces at several
// capacities; the hits must be equal exactly, by blocks and by tokens.
func TestCacheCurveEqualsBruteForceLRUOnMooncake(t *testing.T) {
	for _, f := range []string{"traces/mooncake/conversation_trace.jsonl", "traces/mooncake/synthetic_trace.jsonl"} {
		t.Run(f, func(t *testing.T) {
			reqs := loadMooncake(t, f)
			c := checkAgainstBrute(t, reqs, []int{1, 2, 7, 100, 1000, 4096, 10000, 30000, 100000, 1 << 20})
			if c.Points[len(c.Points)-1].CapacityBlocks > c.Distinct {
				t.Errorf("a stack distance %d exceeds the %d distinct blocks", c.Points[len(c.Points)-1].CapacityBlocks, c.Distinct)
			}
			bb, bt := c.HitRate(c.Distinct)
			t.Logf("%d requests, %d lookups, %d distinct blocks; infinite cache hit rate %.4f by blocks, %.4f by tokens", c.Requests, c.Blocks, c.Distinct, bb, bt)
		})
	}
}

// TestCacheCurveRandomTraces checks the curve against brute force on
// random traces with heavy prefix sharing, repeated blocks inside a
// request, large and negative ids (the map path) and enough distinct
// blocks to force compactions of the Fenwick tree.
func TestCacheCurveRandomTraces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []*trace.Request
	next := int64(0)
	var prefixes [][]int64
	for i := range 30000 {
		var h []int64
		if len(prefixes) > 0 && rng.IntN(3) > 0 {
			p := prefixes[rng.IntN(len(prefixes))]
			h = append(h, p[:1+rng.IntN(len(p))]...)
		}
		for range 1 + rng.IntN(6) {
			id := next
			if rng.IntN(10) == 0 {
				id = -id - 1<<40 // map path
			}
			next++
			h = append(h, id)
		}
		if rng.IntN(50) == 0 && len(h) > 1 {
			h = append(h, h[0]) // a block repeated inside one request
		}
		prefixes = append(prefixes, h)
		reqs = append(reqs, &trace.Request{
			HashIDs: h, BlockSize: trace.Some[int64](16),
			InputTokens: trace.Some(int64(len(h))*16 - int64(rng.IntN(16))),
			Arrival:     trace.Some(trace.Time(i)),
		})
	}
	checkAgainstBrute(t, reqs, []int{1, 3, 10, 50, 500, 5000, 70000, 200000})
}

func TestCacheCurveNeedsHashIDs(t *testing.T) {
	if _, err := ComputeCacheCurve([]*trace.Request{{}}); err == nil {
		t.Error("no error for requests without hash_ids")
	}
}

// BenchmarkCacheCurve measures the one-pass curve over 1,000,000 requests
// of 30 blocks each with Mooncake-like reuse (about a third of lookups
// reuse an earlier prefix).
func BenchmarkCacheCurve(b *testing.B) {
	if os.Getenv("OPALTRACE_BENCH_SMALL") != "" {
		b.Skip()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const n, blocks = 1_000_000, 30
	reqs := make([]*trace.Request, n)
	next := int64(0)
	for i := range reqs {
		h := make([]int64, blocks)
		shared := 0
		if i > 0 && rng.IntN(2) == 0 {
			// Reuse the prefix of a recent request (Zipf-like recency).
			src := reqs[i-1-min(i-1, int(rng.ExpFloat64()*2000))].HashIDs
			shared = 1 + rng.IntN(blocks-1)
			copy(h, src[:shared])
		}
		for j := shared; j < blocks; j++ {
			h[j] = next
			next++
		}
		reqs[i] = &trace.Request{HashIDs: h, BlockSize: trace.Some[int64](512), Arrival: trace.Some(trace.Time(i))}
	}
	b.ResetTimer()
	for b.Loop() {
		c, err := ComputeCacheCurve(reqs)
		if err != nil {
			b.Fatal(err)
		}
		hb, _ := c.HitRate(c.Distinct)
		b.ReportMetric(hb, "hitrate")
		b.ReportMetric(float64(c.Distinct), "distinct")
	}
}
