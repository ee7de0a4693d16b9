package replay

import (
	"math"
	"math/bits"

	"github.com/opaltrace/opaltrace/replay/kvcache"
)

// Lazy indexing of shared prefix blocks, for routers that decide at
// arrival.
//
// onlineSharing says which of a request's blocks another request might
// share, and they get shared hashes; but in most replays hardly any of
// those sharers comes to the same worker (least_requests on Mooncake:
// indexing only the blocks truly shared would cost 1.00× round-robin,
// indexing every block that might be shared cost 1.7×). So a vLLM worker
// indexes a block only once a request that shares it has been routed to
// the worker, and holds the others anonymous, like private ones: a
// request's visible level (lazyReq.vis) is the blocks it shares with a
// request routed to its worker so far, and rises as sharers arrive
// (promotion): a running request names and commits the blocks it had
// held anonymous, a finished one's are promoted out of the run its
// anonymous blocks became (kvcache.Cache.Promote), a preempted one's all
// at once. Results are the same as indexing every shared block when it
// fills (TestOnlineSharingSameResults), because:
//   - Every two requests routed to a worker index their common blocks as
//     soon as the later of them is routed, before it can look them up or
//     commit copies of its own. Requests sorted by (block size, ids), as
//     onlineSharing sorts them, share with one routed to the same worker
//     at most what they share with their nearest such neighbour on that
//     side, and that neighbour shares as much with anything beyond, so
//     promoting the nearest neighbour on each side keeps it true for all.
//   - A block is looked up only by requests that share it, so one not
//     promoted yet is never asked for; and no copy of its hash can be
//     indexed before it is promoted, so lookups, which return the
//     earliest indexed copy, return the copy indexing at fill returns.
//   - Promotion keeps blocks where they were in the free queue, and a
//     block's id is no result.
type lazyIndex struct {
	o   *onlineSharing
	ids [][]int64
	bs  []int64
	req []lazyReq
	// sets holds, per worker slot, the places in o.order of the
	// requests routed to its current worker.
	sets []posSet
	// blockMin[k][b] is the least of o.lcp over the 2^k blocks of
	// lcpBlock places from block b on (a sparse table, for lcpMin).
	blockMin [][]int32
	scratch  []uint64

	// Blocks promoted of running requests, and out of runs (for tests).
	promotedHeld, promotedRuns int64
}

// A lazyReq is what lazy indexing knows of one request.
type lazyReq struct {
	r      *reqState // while it is on its worker
	prompt int64
	// vis is its leading blocks indexed once they fill, limit the
	// most it can be (its shared blocks, kvcache.Chain.Shared).
	vis, limit int32
	// Once it left unpreempted: the run of its anonymous blocks, the
	// first of them (run's cached blocks are j, j+1, …), and the hash
	// of the block before the first its run has not promoted.
	j    int32
	run  kvcache.FreeRun
	last uint64
}

func newLazyIndex(o *onlineSharing, ids [][]int64, bs []int64) *lazyIndex {
	x := &lazyIndex{o: o, ids: ids, bs: bs, req: make([]lazyReq, len(ids))}
	// Level 0: each block's least (the last block, partial, is only
	// ever taken whole by lcpMin when it is full).
	b0 := make([]int32, (len(o.lcp)+lcpBlock-1)/lcpBlock)
	for b := range b0 {
		m := int32(math.MaxInt32)
		for _, v := range o.lcp[lcpBlock*b : min(lcpBlock*b+lcpBlock, len(o.lcp))] {
			m = min(m, v)
		}
		b0[b] = m
	}
	x.blockMin = [][]int32{b0}
	for k := 1; 1<<k <= len(b0); k++ {
		prev, half := x.blockMin[k-1], 1<<(k-1)
		cur := make([]int32, len(b0)-1<<k+1)
		for b := range cur {
			cur[b] = min(prev[b], prev[b+half])
		}
		x.blockMin = append(x.blockMin, cur)
	}
	return x
}

// arrived sets r's shared ids once the router sent it to worker wi
// (onlineSharing.routed), and, on a vLLM worker with prefix caching,
// indexes lazily: r's visible level, and the promotion of its nearest
// neighbours there.
func (o *onlineSharing) arrived(e *engine, r *reqState, wi int) {
	r.shared = int(o.routed(r.idx, wi))
	v, ok := e.workers[wi].s.(*vllm)
	if !ok || !v.prefix || v.eager || e.off != nil {
		// KV tiers key the blocks they store by the hashes the
		// scheduler commits: every shared block is indexed.
		return
	}
	if o.lazy == nil {
		o.lazy = newLazyIndex(o, o.ids, o.bs)
	}
	v.lazy = o.lazy
	o.lazy.routed(v, r, wi)
}

// resetWorker forgets the requests of worker slot w, whose cache a new
// worker starts afresh.
func (o *onlineSharing) resetWorker(w int) {
	if o.lazy != nil && w < len(o.lazy.sets) {
		o.lazy.sets[w].clear()
	}
}

// routed records that r went to worker wi, served by v: it indexes what
// it shares with its nearest neighbours there, and they what they share
// with it.
func (x *lazyIndex) routed(v *vllm, r *reqState, wi int) {
	i := r.idx
	lr := &x.req[i]
	*lr = lazyReq{r: r, prompt: r.prompt}
	p := x.o.pos[i]
	if p < 0 {
		return // nothing to share
	}
	lr.limit = int32(min(int64(r.shared)*x.bs[i], r.prompt) / v.bs)
	for len(x.sets) <= wi {
		x.sets = append(x.sets, posSet{})
	}
	s := &x.sets[wi]
	if q, ok := s.pred(p); ok {
		n := x.lcpMin(q+1, p)
		k := x.blocks(i, int64(n), v.bs)
		x.raise(v, x.o.order[q], n, r, k)
		lr.vis = max(lr.vis, k)
	}
	if q, ok := s.succ(p); ok {
		n := x.lcpMin(p+1, q)
		k := x.blocks(i, int64(n), v.bs)
		x.raise(v, x.o.order[q], n, r, k)
		lr.vis = max(lr.vis, k)
	}
	if s.words == nil {
		*s = newPosSet(len(x.o.order))
	}
	s.add(p)
}

// blocks returns how many engine blocks of bs tokens request i's first
// n ids cover (as kvcache.Chain counts its shared blocks), at most its
// limit: n never exceeds its shared ids (onlineSharing.routed counts
// every request that may come to its worker), but a block past them has
// a private hash.
func (x *lazyIndex) blocks(i int32, n, bs int64) int32 {
	lr := &x.req[i]
	return min(int32(min(n*x.bs[i], lr.prompt)/bs), lr.limit)
}

// raise makes request i, on v's worker, index its first n ids' blocks,
// for request by, whose first byBlocks blocks they share.
func (x *lazyIndex) raise(v *vllm, i int32, n int32, by *reqState, byBlocks int32) {
	lr := &x.req[i]
	to := x.blocks(i, int64(n), v.bs)
	if to <= lr.vis {
		return
	}
	from := lr.vis
	lr.vis = to
	if r := lr.r; r != nil {
		if r.preemptions == 0 {
			x.promotedHeld += max(min(int64(to), r.hashed)-int64(from), 0)
			v.promote(r, int64(from), int64(to))
		}
		return
	}
	done, left, ok := v.kv.RunLeft(lr.run)
	if !ok {
		return // it left no cached anonymous blocks, or they are evicted
	}
	m := min(int64(to-lr.j), done+left) - done
	if m <= 0 {
		return
	}
	// The blocks by shares are hashed in its chain, where its prefix
	// match, which comes next, finds them; the others (by's prompt is
	// shorter) from i's ids.
	h := kvcache.BlockHasher{HashIDs: x.ids[i], TraceBlock: x.bs[i], PromptTokens: lr.prompt, EngineBlock: v.bs,
		Unique: uint64(i) + 1, SharedIDs: len(x.ids[i])}
	c := by.hashChain(v.bs)
	lo, hi := int64(lr.j)+done, int64(lr.j)+done+m
	hs := x.scratch[:0]
	if mid := min(hi, int64(byBlocks)); lo < mid {
		hs = append(hs, c.Hashes(lo, mid)...)
		lo = mid
	}
	prev := lr.last
	if len(hs) > 0 {
		prev = hs[len(hs)-1]
	}
	for k := lo; k < hi; k++ {
		prev, _ = h.Hash(prev, k)
		hs = append(hs, prev)
	}
	x.scratch = hs
	lr.last = prev
	v.kv.Promote(lr.run, hs)
	x.promotedRuns += m
}

// left records that r left its worker, v's, having released its blocks;
// run is the run its anonymous blocks became when it was never
// preempted.
func (x *lazyIndex) left(v *vllm, r *reqState, run kvcache.FreeRun, blocks int) {
	lr := &x.req[r.idx]
	lr.r = nil
	if r.preemptions > 0 {
		return
	}
	j := min(int64(lr.vis), int64(blocks))
	if j >= r.hashed {
		return // no cached block to promote
	}
	lr.run, lr.j, lr.last = run, int32(j), kvcache.Root
	if j > 0 {
		lr.last, _ = r.hashChain(v.bs).Hash(j - 1)
	}
}

// preempted records that r, on its first preemption, indexed every
// shared block.
func (x *lazyIndex) preempted(r *reqState, shared int64) {
	x.req[r.idx].vis = int32(shared)
}

// visible returns how many of r's leading blocks are indexed once they
// fill.
func (x *lazyIndex) visible(r *reqState) int64 { return int64(x.req[r.idx].vis) }

// lcpMin returns the least of o.lcp[lo … hi], the common leading ids of
// o.order[lo−1] and o.order[hi] (MaxInt32 when lo > hi).
//
// Note: the places at the ends, up to whole blocks of lcpBlock, one by
// one, and the whole blocks between by two entries of blockMin. With the
// least of each 64 places and a walk to them, the walk was 6.5 M
// instructions of BenchmarkReplayMooncakeRouters/llm_d (two calls a
// routed request, some 60 places each).
func (x *lazyIndex) lcpMin(lo, hi int32) int32 {
	lcp := x.o.lcp
	m := int32(math.MaxInt32)
	for ; lo <= hi && lo%lcpBlock != 0; lo++ {
		m = min(m, lcp[lo])
	}
	for ; hi >= lo && (hi+1)%lcpBlock != 0; hi-- {
		m = min(m, lcp[hi])
	}
	if lo <= hi {
		a, b := lo/lcpBlock, hi/lcpBlock // whole blocks a … b
		k := bits.Len32(uint32(b-a+1)) - 1
		m = min(m, x.blockMin[k][a], x.blockMin[k][b-1<<k+1])
	}
	return m
}

// lcpBlock is the number of places of o.lcp in a block of lcpMin.
const lcpBlock = 8

// A posSet is a set of places in [0, n): a bitset with a summary word
// per 64 words, for the nearest member on either side.
type posSet struct {
	words []uint64
	sum   []uint64 // bit k: words[k] is not 0
}

func newPosSet(n int) posSet {
	w := (n + 63) / 64
	return posSet{words: make([]uint64, w), sum: make([]uint64, (w+63)/64)}
}

func (s *posSet) add(p int32) {
	s.words[p/64] |= 1 << (p % 64)
	s.sum[p/4096] |= 1 << (p / 64 % 64)
}

func (s *posSet) clear() {
	clear(s.words)
	clear(s.sum)
}

// pred returns the greatest member below p.
func (s *posSet) pred(p int32) (int32, bool) {
	if s.words == nil {
		return 0, false
	}
	w := p / 64
	if m := s.words[w] & (1<<(p%64) - 1); m != 0 {
		return w*64 + 63 - int32(bits.LeadingZeros64(m)), true
	}
	// A word below w that is not empty.
	for k := w / 64; k >= 0; k-- {
		m := s.sum[k]
		if k == w/64 {
			m &= 1<<(w%64) - 1
		}
		if m != 0 {
			i := k*64 + 63 - int32(bits.LeadingZeros64(m))
			return i*64 + 63 - int32(bits.LeadingZeros64(s.words[i])), true
		}
	}
	return 0, false
}

// succ returns the least member above p.
func (s *posSet) succ(p int32) (int32, bool) {
	if s.words == nil {
		return 0, false
	}
	// (A shift by 64 gives 0: no bit is kept.)
	w := p / 64
	if m := s.words[w] &^ (1<<(p%64+1) - 1); m != 0 {
		return w*64 + int32(bits.TrailingZeros64(m)), true
	}
	for k := w / 64; k < int32(len(s.sum)); k++ {
		m := s.sum[k]
		if k == w/64 {
			m &^= 1<<(w%64+1) - 1
		}
		if m != 0 {
			i := k*64 + int32(bits.TrailingZeros64(m))
			return i*64 + int32(bits.TrailingZeros64(s.words[i])), true
		}
	}
	return 0, false
}
