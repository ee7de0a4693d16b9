package replay

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// tileMooncake returns the Mooncake conversation trace replayed k times
// over, one copy after the other: copy c arrives c times the trace's
// span later, and its ids are its own (offset by c times one more than
// the trace's largest), but for the id 0 that starts most prompts,
// which all copies share as the trace's requests do. So a long replay
// sees the same mix of sharing throughout, for k times as long.
func tileMooncake(tb testing.TB, k int) []*trace.Request {
	tb.Helper()
	reqs := readMooncake(tb, shareddata.Path(tb, "traces/mooncake/conversation_trace.jsonl"))
	var last trace.Time
	var top int64
	for _, r := range reqs {
		last = max(last, r.Arrival.V)
		for _, id := range r.HashIDs {
			top = max(top, id)
		}
	}
	span := last.Sub(0) + time.Second
	out := make([]*trace.Request, 0, k*len(reqs))
	for c := range k {
		for _, r := range reqs {
			t := *r
			t.RequestID += "/" + strconv.Itoa(c)
			t.Arrival = trace.Some(r.Arrival.V.Add(span * time.Duration(c)))
			t.HashIDs = slices.Clone(r.HashIDs)
			for i, id := range t.HashIDs {
				if !(i == 0 && id == 0) {
					t.HashIDs[i] = id + int64(c)*(top+1)
				}
			}
			out = append(out, &t)
		}
	}
	return out
}

// TestLongReplayKeepsIDsConsecutive replays the Mooncake conversation
// trace four times over (48,124 requests) with llm_d on 16 workers, and
// checks that the GPU caches' hash index still holds many blocks an
// entry at the end, as it does after the trace once (some 20 to 30: a
// group of 32 blocks named on one line of ids is one entry). With the
// ids a request names taken from whatever range topped the stack of ids
// of no block, the ids scattered as the replay went on (a decode step's
// block gives one back alone): 10 to 12 blocks an entry after four
// copies, 1.4 after eighty, the engine 3.9 times round-robin's time
// (kvcache.Cache.takeIDs).
func TestLongReplayKeepsIDsConsecutive(t *testing.T) {
	reqs := tileMooncake(t, 4)
	cost, blocks := llama8BOnH100(t)
	var cached, entries int
	st, err := RunInputs(Config{Workers: 16, Router: RouterLLMD}, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil },
		Options{test: testSwitches{atEnd: func(e *engine) {
			for _, w := range e.workers {
				if v, ok := w.s.(*vllm); ok {
					cached += v.kv.NumCached()
					entries += v.kv.IndexEntries()
				}
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Requests != len(reqs) || entries == 0 {
		t.Fatalf("%d of %d requests replayed, %d index entries", st.Requests, len(reqs), entries)
	}
	per := float64(cached) / float64(entries)
	t.Logf("%d blocks indexed in %d entries at the end: %.1f an entry", cached, entries, per)
	if per < 16 {
		t.Errorf("%d blocks indexed in %d entries at the end, %.1f an entry: want 16 or more", cached, entries, per)
	}
}

// BenchmarkReplayMooncakeTiled is BenchmarkReplayMooncakeRouters's
// round-robin and llm_d on the trace replayed four times over
// (tileMooncake): a long replay's engine time, which the ids' scattering
// once made grow faster than its length.
func BenchmarkReplayMooncakeTiled(b *testing.B) {
	reqs := tileMooncake(b, 4)
	cost, blocks := llama8BOnH100(b)
	for _, name := range []string{RouterRoundRobin, RouterLLMD} {
		b.Run(name, func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := RunInputs(Config{Workers: 16, Router: name}, cost, blocks, Requests(reqs), func(*trace.Request) error { return nil }, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
