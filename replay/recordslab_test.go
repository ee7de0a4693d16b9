package replay

import (
	"testing"
	"time"
	"unsafe"

	"github.com/opaltrace/opaltrace/trace"
)

// TestKeepRecordsSameResults: a replay whose records are kept in the slab
// (Options.KeepRecords) emits the same records as one that allocates each,
// in the one loop and split among goroutines, open, closed and sessions,
// with timeouts, rejections, a stream interval and SGLang's scheduler, from
// Columns and from requests; every record is its own, and no two ITL lists
// share memory.
func TestKeepRecordsSameResults(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(7, 1500, 400)
	for i, r := range reqs {
		r.Session, r.Turn = "s"+string(rune('a'+i%20)), trace.Some(int64(i/20))
		switch i % 97 {
		case 5:
			r.OutputTokens = trace.Some(int64(0)) // rejected
		case 6:
			r.OutputTokens = trace.Some(int64(1)) // no gap
		}
	}
	var cols Columns
	for _, r := range reqs {
		cols.Add(r)
	}
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}
	for i, cfg := range []Config{
		{Workers: 4},
		{Workers: 3, Scheduler: SchedulerConfig{StreamInterval: 4}, Client: ClientConfig{LatencySec: 0.003}},
		{Workers: 2, Scheduler: SchedulerConfig{MaxNumSeqs: 4}, Client: ClientConfig{TimeoutSec: 0.1, LatencySec: 0.002}},
		{Workers: 2, Client: ClientConfig{TimeoutSec: 0.3}, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 20}},
		{Workers: 2, Workload: WorkloadConfig{Mode: ModeSessions, Sessions: 6}},
		{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 8000, StreamInterval: 2}, Client: ClientConfig{TimeoutSec: 0.3, LatencySec: 0.001}},
	} {
		for _, in := range []Inputs{Requests(reqs), &cols} {
			// 0: as the replay splits itself (the open loop on 2 cores
			// or more); 2: split, where splitting is supported.
			for _, parts := range []int{0, 1, 2} {
				if parts == 2 && (cfg.Workload.Mode != "" || cfg.Client.TimeoutSec > 0) {
					continue
				}
				replay := func(keep bool) ([]*trace.Request, string) {
					var all []*trace.Request
					if _, err := RunInputs(cfg, cost, 80, in, func(r *trace.Request) error {
						all = append(all, r)
						return nil
					}, Options{KeepRecords: keep, test: testSwitches{parts: parts, partBatch: 7}}); err != nil {
						t.Fatal(err)
					}
					return all, dump(all)
				}
				_, want := replay(false)
				kept, got := replay(true)
				if got != want {
					t.Fatalf("config %d, %T, %d parts: records differ when kept in the slab", i, in, parts)
				}
				checkOwnMemory(t, kept)
			}
		}
	}
}

// checkOwnMemory fails when two records are one, or two ITL lists overlap.
func checkOwnMemory(t *testing.T, recs []*trace.Request) {
	t.Helper()
	seen := map[*trace.Request]bool{}
	type span struct{ lo, hi uintptr }
	var spans []span
	for _, r := range recs {
		if seen[r] {
			t.Fatal("a record was emitted twice")
		}
		seen[r] = true
		if cap(r.ITLSec) > 0 {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(r.ITLSec)))
			spans = append(spans, span{lo, lo + uintptr(cap(r.ITLSec))*8})
		}
	}
	for a := range spans {
		for b := a + 1; b < len(spans); b++ {
			if spans[a].lo < spans[b].hi && spans[b].lo < spans[a].hi {
				t.Fatal("two records' ITL lists share memory")
			}
		}
	}
}

// TestRecordSlabBlocks: the slab reserves each request's gaps in its
// block, blocks of about slabBlockBytes, and allocates a block with the
// next one only when a request of it is asked for.
func TestRecordSlabBlocks(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(3, 6000, 100)
	for i, r := range reqs {
		r.OutputTokens = trace.Some(int64(1 + i%700))
	}
	e := &engine{cfg: Config{Scheduler: SchedulerConfig{StreamInterval: 3}}, reqs: Requests(reqs)}
	s := newRecordSlab(e)
	if len(s.start) < 3 {
		t.Fatalf("%d blocks for %d requests", len(s.start)-1, len(reqs))
	}
	for b := 0; b+1 < len(s.start); b++ {
		first, end := s.start[b], s.start[b+1]
		gaps := int64(0)
		for i := first; i < end; i++ {
			if out := reqs[i].OutputTokens.V; out > 1 {
				gaps += numChunks(out, 3) - 1
			}
			if s.itlEnd[i] != gaps || s.block[i] != int32(b) {
				t.Fatalf("request %d: gaps end %d, block %d; want %d, %d", i, s.itlEnd[i], s.block[i], gaps, b)
			}
		}
		if bytes := gaps*8 + int64(end-first)*recordBytes; b+2 < len(s.start) && bytes < slabBlockBytes {
			t.Errorf("block %d: %d bytes, under %d", b, bytes, slabBlockBytes)
		}
	}
	last := int32(len(reqs) - 1)
	l := s.itlList(last)
	if len(l) != 0 || cap(l) != int(numChunks(reqs[last].OutputTokens.V, 3)-1) {
		t.Fatalf("request %d's list: len %d cap %d", last, len(l), cap(l))
	}
	for b, blk := range s.blocks {
		if want := b == len(s.blocks)-1; (blk != nil) != want {
			t.Errorf("block %d allocated: %v, want %v", b, blk != nil, want)
		}
	}
	if s.record(0) == nil || s.record(0) != nil {
		t.Error("request 0's record: not handed out exactly once")
	}
	if s.blocks[0] == nil || len(s.blocks) > 2 && s.blocks[1] == nil {
		t.Error("block 0 and the next not allocated when request 0's record was asked for")
	}
}
