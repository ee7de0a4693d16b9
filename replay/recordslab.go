package replay

import (
	"sync"
	"unsafe"

	"github.com/opaltrace/opaltrace/internal/prefault"
	"github.com/opaltrace/opaltrace/trace"
)

// A recordSlab holds the records of a replay whose caller keeps them all
// (Options.KeepRecords), one per request index, and their ITL lists,
// each request's reserved at its place: in blocks of consecutive
// requests, each block allocated when its first request arrives, with
// the next one, whose memory the kernel maps meanwhile (prefault.Async),
// so that records and lists are written into mapped pages instead of
// faulting in one fresh page at a time.
//
// Note: a 4-worker replay of the Mooncake trace writes 34 MB of ITL gaps
// and 12 MB of records; on the VM it was measured on, their first writes
// cost about 11,000 of the command's 30,000 page faults (perf record -e
// page-faults), at 12–21 µs each. Blocks, rather than all of it at the
// start, keep the memory growing as the records do: the garbage collector
// paces itself on the live heap, and 46 MB live from the start let the
// rest of the heap grow by 19 MB more.
type recordSlab struct {
	// itlEnd[i] ends request i's ITL list in its block's (it starts at
	// the end of request i-1's, or at 0 for a block's first request).
	itlEnd []int64
	// start[b] is block b's first request; block b holds requests
	// start[b] up to start[b+1] (the last entry is the number of
	// requests).
	start []int32
	block []int32 // per request: its block

	mu     sync.Mutex // parts of a split replay share the slab
	blocks []*slabBlock
}

// A slabBlock holds the records and ITL lists of a block of requests.
type slabBlock struct {
	recs  []trace.Request
	taken []bool // recs[k] was handed out: a request is recorded once, a second record is allocated
	itl   []float64
}

// slabBlockBytes is about the size of a block: large enough that a block
// is a few allocations among thousands of records, small enough that the
// next block, mapped ahead, is not much memory early.
const slabBlockBytes = 4 << 20

// recordBytes is the size of a record.
const recordBytes = int64(unsafe.Sizeof(trace.Request{}))

// newRecordSlab reserves the records of e's requests and their ITL
// lists: as many gaps as emitTokens allocates, a stream of their
// requested output tokens at the stream interval having that many
// chunks after the first.
func newRecordSlab(e *engine) *recordSlab {
	n := e.reqs.Len()
	s := &recordSlab{itlEnd: make([]int64, n), block: make([]int32, n)}
	k := e.cfg.Scheduler.StreamInterval
	var scratch trace.Request
	var gaps, bytes int64
	for i := range n {
		var out int64
		if e.sh != nil {
			_, out, _ = e.sh.shape(i)
		} else {
			out = peek(e.reqs, i, &scratch).OutputTokens.V
		}
		if i == 0 || bytes >= slabBlockBytes {
			s.start = append(s.start, int32(i))
			gaps, bytes = 0, 0
		}
		if out > 1 {
			gaps += numChunks(out, k) - 1
		}
		bytes = gaps*8 + int64(i+1-int(s.start[len(s.start)-1]))*recordBytes
		s.itlEnd[i] = gaps
		s.block[i] = int32(len(s.start) - 1)
	}
	s.start = append(s.start, int32(n))
	s.blocks = make([]*slabBlock, len(s.start)-1)
	return s
}

// blockOf returns request i's block and its index there, allocating the
// block, and the next, when they are not yet.
func (s *recordSlab) blockOf(i int32) (*slabBlock, int32) {
	b := s.block[i]
	s.mu.Lock()
	blk := s.alloc(b)
	if int(b)+1 < len(s.blocks) {
		s.alloc(b + 1)
	}
	s.mu.Unlock()
	return blk, i - s.start[b]
}

// alloc returns block b, allocated and its mapping started if it was not.
func (s *recordSlab) alloc(b int32) *slabBlock {
	if blk := s.blocks[b]; blk != nil {
		return blk
	}
	first, end := s.start[b], s.start[b+1]
	blk := &slabBlock{recs: make([]trace.Request, end-first), taken: make([]bool, end-first), itl: prefault.MakeHuge[float64](int(s.itlEnd[end-1]))}
	s.blocks[b] = blk
	prefault.Async(prefault.Slice(blk.recs))
	prefault.Async(prefault.Slice(blk.itl))
	return blk
}

// record returns request i's record, nil when it was handed out before.
func (s *recordSlab) record(i int32) *trace.Request {
	blk, k := s.blockOf(i)
	if blk.taken[k] {
		return nil
	}
	blk.taken[k] = true
	return &blk.recs[k]
}

// itlList returns request i's reserved ITL list: empty, with the
// capacity reserved (appends beyond it reallocate, as any slice's).
func (s *recordSlab) itlList(i int32) []float64 {
	blk, k := s.blockOf(i)
	start := int64(0)
	if k > 0 {
		start = s.itlEnd[i-1]
	}
	return blk.itl[start:start:s.itlEnd[i]]
}
