package replay

import (
	"math"
	"math/bits"
	"slices"
)

// A prefixIndex is a router's record of which prefix blocks each worker
// holds, keyed by the trace's block ids (trace.Request.HashIDs, whose
// equal ids mean equal prefixes): an approximate radix tree per worker
// (SGLang's router, llm-d's approximate prefix scorer) when fed the
// requests the router sent, or a mirror of the workers' caches (Dynamo's
// KvIndexer, Opal's KVBM) when fed their KV events.
//
// Each worker's part is bounded, in tokens, least recently used blocks
// first; within one insertion the deeper blocks count as older, so a
// prefix is evicted from its end, as a radix tree evicts leaves first.
//
// Note: matching is at the trace's block granularity (Mooncake: 512
// tokens), coarser than SGLang's characters or Dynamo's 16-token blocks;
// a trace's block ids are all a router can know of the prompts.
type prefixIndex struct {
	workers   int
	capTokens int64 // per worker; 0: unbounded
	slots     slotTable
	// uses holds, per worker, in rows of useChunk slots, how many of
	// the worker's queue entries (lru) name each slot (0: the worker
	// does not hold it); unbounded, 1 for a slot held.
	uses []useRows
	// spare holds rows of zeros, given back when their worker held none
	// of their slots any more, for the next row a worker needs.
	spare []*useRow
	count []int64   // per worker: blocks held
	lru   []lruRing // per worker: the slots inserted, oldest first
	// holders16, holders32 and holders64 hold, per slot, a bit per
	// worker whose use count there is not 0, in the narrowest of the
	// three words that has a bit for each worker (the others nil);
	// all three are nil beyond 64 workers.
	holders16 []uint16
	holders32 []uint32
	holders64 []uint64
	// bitsOnly: the index is unbounded and keeps holders, so a use
	// count would only say what its holder bit says; there are none
	// (uses stays empty).
	bitsOnly bool
	slotBuf  []int32 // scratch: the slots of insertHeld's ids
}

// useChunk is how many slots' use counts one row holds: they are made a
// row at a time, never copied, where one growing slice copied them all
// again at each growth (about 7 % of the cache-aware routers' CPU on the
// Mooncake trace's 183,000 blocks, by pprof). With rows given back and
// taken again (useRows), the llm_d replay allocated 98.0 MB with rows of
// 256 slots, 100.1 with 1,024 and 103.0 with 4,096
// (BenchmarkReplayMooncakeRouters/llm_d, -benchmem).
//
// Note: a worker's counts are its own rows, an array each, so that a
// slot's count is two indexings, the second by a masked slot the
// compiler checks no bound of; one chunk held every worker's (slot·workers
// + worker), and finding a count there was some 15 instructions, 7 M of
// BenchmarkReplayMooncakeRouters/llm_d's inserts and evictions.
const useChunk = 1024

// A useRow is one worker's use counts of useChunk slots, a byte each:
// a count that would pass useMax stays at useMax and its worker's over
// map holds the rest.
//
// Note: a byte, where a count was 4, because a worker holds a sixteenth
// of the slots of its rows or less (16 workers; the slots are numbered
// as ids arrive, whoever holds them), so that nearly every count the
// router read or wrote was a cache line of its own: with bytes, four
// times as many of a row's counts share a line. Few counts pass useMax
// (on the Mooncake trace with 16 workers llm_d's highest count is 319,
// and 2,304 of its 288,000 uses are past 255; dynamo_kv's highest is 85,
// max_prefix's 77). CPU time against 4-byte counts (`scripts/enginework
// --time 10 --against b466379`): llm_d median 0.965×, least 0.989×;
// dynamo_kv 0.978×, 0.970×; max_prefix 0.963×, 0.960×; allocated
// (-benchmem) 100.1 → 95.6 MB, 94.7 → 92.7, 95.3 → 94.1.
type useRow [useChunk]uint8

// useMax is the count a useRow holds at most.
const useMax = 255

// useRows is one worker's use counts: a row per useChunk slots, nil while
// the worker holds none of them, and per row how many of its slots the
// worker holds.
//
// Note: a row is made when its worker first holds one of its slots and
// given back (spare) when it holds none any more, so a bounded index
// keeps rows for what its workers hold now, not for every slot each
// worker ever held: a row per worker and row of all the slots made was
// 11.7 MB of the 16-worker llm_d replay of the Mooncake trace's 183,000
// ids, fresh memory faulted in page by page; with the holder bits
// doubled as they grow, that replay allocates 100.1 MB where it
// allocated 110.5 (dynamo_kv 108.5 → 94.7, max_prefix 110.1 → 95.3;
// BenchmarkReplayMooncakeRouters, -benchmem), for 5–7 million more
// instructions (the rows' nil tests and counts) and no CPU time that
// fifteen rounds could tell. The rows grew with workers × ids: `opaltrace
// replay` of the trace with llm_d on 128 workers peaked at 338–342 MB
// where it peaked at 403–416, in 0.43 s of user time where it took
// 0.58–0.61 (64 workers: 266–278 MB against 302–308; /usr/bin/time -v).
type useRows struct {
	rows []*useRow
	live []int32 // per row: its slots whose count is not 0
	// over holds, per slot whose count in its row is useMax, how far
	// the count is above it (nil until a count first passes it).
	over map[int32]uint32
}

func newPrefixIndex(workers int, capTokens int64) *prefixIndex {
	return &prefixIndex{
		workers: workers, capTokens: capTokens,
		uses:  make([]useRows, workers),
		count: make([]int64, workers), lru: make([]lruRing, workers),
		bitsOnly: capTokens == 0 && workers <= 64,
	}
}

// matchAll sets n[w] to the number of leading ids that worker w holds.
//
// Note: with at most 64 workers it goes by the slots' holder bits, a
// word per id, not a stamp per worker and id: the loop over the workers
// was most of matchAll's 19 million instructions on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware (16 workers).
func (x *prefixIndex) matchAll(ids []int64, n []int) {
	clear(n)
	switch {
	case x.workers <= 16:
		matchBits(x, x.holders16, ids, n)
	case x.workers <= 32:
		matchBits(x, x.holders32, ids, n)
	case x.workers <= 64:
		matchBits(x, x.holders64, ids, n)
	default:
		x.matchUses(ids, n)
	}
}

// A holderWord is a word of holder bits, a bit per worker.
//
// Note: the narrowest word the workers fit, because the holder bits are
// read at every id a router matches or inserts and written at every
// slot a worker comes to hold or stops holding, all over the slots:
// words of 64 bits were 1.46 MB for the Mooncake trace's 183,000 ids,
// larger than this machine's 1 MB second-level cache, words of 16 bits
// 366 KB. On BenchmarkReplayMooncakeRouters/llm_d (16 workers) the
// router's loops missed a simulated 1 MB cache 79,000 times fewer
// (cachegrind --LL=1048576,8,64: useSlots, evictUses and matchBits
// −34,000, the growth's copies and zeroing −67,000) and allocated 2.5 MB
// less (95.6 → 93.1 MB; dynamo_kv 92.7 → 90.2, max_prefix 94.1 → 91.6,
// sglang_cache_aware 95.2 → 92.7); CPU time moved by less than the
// noise (`scripts/enginework --time 10 --against 82e0d73`, medians:
// llm_d 0.960×, max_prefix 0.961×, dynamo_kv 0.990×,
// sglang_cache_aware 1.010×).
type holderWord interface{ uint16 | uint32 | uint64 }

// matchUses is matchAll by the use counts.
func (x *prefixIndex) matchUses(ids []int64, n []int) {
	for j, id := range ids {
		s, ok := x.slots.get(id)
		if !ok {
			return
		}
		c, o := uint32(s)/useChunk, uint32(s)%useChunk
		alive := 0 // workers still matching every id so far
		for w, u := range x.uses {
			if r := u.rows[c]; r != nil && r[o] != 0 && n[w] == j {
				n[w]++
				alive++
			}
		}
		if alive == 0 {
			return
		}
	}
}

// matchBits is matchAll by the holder bits: a worker's count is the
// first id it does not hold, or where the walk stopped.
func matchBits[H holderWord](x *prefixIndex, holders []H, ids []int64, n []int) {
	alive := ^uint64(0) >> (64 - x.workers) // every worker matches so far
	// slotTable.get written out for ids that are their own slots, its
	// fields in locals: the loop stores to n.
	t := &x.slots
	table, seen, given := t.table, t.seen, uint64(t.n)
	j := 0
	for ; j < len(ids); j++ {
		var s int32
		if id := uint64(ids[j]); !table {
			if !seenID(seen, given, id) {
				break
			}
			s = int32(id)
		} else {
			var ok bool
			if s, ok = t.getNumbered(int64(id)); !ok {
				break
			}
		}
		h := uint64(holders[s])
		for gone := alive &^ h; gone != 0; gone &= gone - 1 {
			n[bits.TrailingZeros64(gone)] = j
		}
		if alive &= h; alive == 0 {
			return
		}
	}
	for ; alive != 0; alive &= alive - 1 {
		n[bits.TrailingZeros64(alive)] = j
	}
}

// matchShared sets n[w] to what llm-d's prefix-cache-scorer counts for
// worker w (matchLongestPrefix): the walk goes over ids until one that no
// worker holds, and each worker gets the weight of every id on the way
// that it holds, whether or not it holds those before.
func (x *prefixIndex) matchShared(ids, weights []int64, n []int) {
	clear(n)
	switch {
	case x.workers <= 16:
		matchSharedBits(x, x.holders16, ids, weights, n)
	case x.workers <= 32:
		matchSharedBits(x, x.holders32, ids, weights, n)
	case x.workers <= 64:
		matchSharedBits(x, x.holders64, ids, weights, n)
	default:
		x.matchSharedUses(ids, weights, n)
	}
}

// matchSharedUses is matchShared by the use counts (matchUses' twin), for
// n cleared.
func (x *prefixIndex) matchSharedUses(ids, weights []int64, n []int) {
	for j, id := range ids {
		s, ok := x.slots.get(id)
		if !ok {
			return
		}
		c, o := uint32(s)/useChunk, uint32(s)%useChunk
		held := false
		for w, u := range x.uses {
			if r := u.rows[c]; r != nil && r[o] != 0 {
				n[w] += int(weights[j])
				held = true
			}
		}
		if !held {
			return
		}
	}
}

// matchSharedBits is matchShared by the holder bits.
func matchSharedBits[H holderWord](x *prefixIndex, holders []H, ids, weights []int64, n []int) {
	for j, id := range ids {
		s, ok := x.slots.get(id)
		if !ok {
			return
		}
		h := uint64(holders[s])
		if h == 0 {
			return
		}
		for ; h != 0; h &= h - 1 {
			n[bits.TrailingZeros64(h)] += int(weights[j])
		}
	}
}

// insert records that worker w holds ids, blockSize tokens each, and
// evicts its least recently used blocks beyond the capacity. It returns
// the ids' slots, in order (x.slotBuf: valid until the next insertion).
func (x *prefixIndex) insert(w int, ids []int64, blockSize int64) []int32 {
	x.insertHeld(w, ids, blockSize, 0) // held 0: every id gets its slot
	return x.slotBuf
}

// insertHeld is insert for a w that holds ids' first held already
// (matchAll's count for w).
//
// Note: an unbounded index evicts nothing, so a use count says only
// whether its worker holds the slot: the ids w holds
// already need no work, and are left out. SGLang's router sends a
// request where its longest prefix is, which it then inserts again whole:
// the prefix was most of prefixIndex.insert's 32 million instructions on
// BenchmarkReplayMooncakeRouters/sglang_cache_aware.
func (x *prefixIndex) insertHeld(w int, ids []int64, blockSize int64, held int) {
	bounded := x.capTokens > 0 && blockSize > 0
	if !bounded {
		ids = ids[min(held, len(ids)):]
	}
	// The ids not in the index get their slots first, deepest first as
	// they are used, so that the loop that counts them makes no call:
	// one loop that called to add slots and to grow the counts, holders
	// and queue kept its state on the stack for those calls and loaded
	// it back at every id (insertHeld and slotTable.add 55.6 M
	// instructions on BenchmarkReplayMooncakeRouters/dynamo_kv, 47.8 M
	// with newSlot in two passes).
	slots := x.slotsOf(ids) // used deepest first: evicted first
	switch {
	case x.workers <= 16:
		insertSlots(x, x.holders16, w, slots, blockSize, bounded)
	case x.workers <= 32:
		insertSlots(x, x.holders32, w, slots, blockSize, bounded)
	case x.workers <= 64:
		insertSlots(x, x.holders64, w, slots, blockSize, bounded)
	default:
		insertSlots[uint64](x, nil, w, slots, blockSize, bounded)
	}
}

// insertSlots is insertHeld for the slots of its ids, with holders the
// holder bits (nil: none kept).
func insertSlots[H holderWord](x *prefixIndex, holders []H, w int, slots []int32, blockSize int64, bounded bool) {
	if x.bitsOnly {
		insertBits(x, holders, w, slots)
		return
	}
	u, bit := &x.uses[w], H(1)<<(w&63)
	if !bounded {
		x.count[w] += holdSlots(slots, u.rows, u.live, &x.spare, holders, bit)
		return
	}
	// The deepest ids' entries go where the ring has room up to its
	// end, the others from its start.
	ring := &x.lru[w]
	a, b := ring.room(len(slots))
	deep := len(slots) - len(a)
	added := useSlots(slots[deep:], u, &x.spare, holders, bit, a)
	if deep > 0 {
		added += useSlots(slots[:deep], u, &x.spare, holders, bit, b)
	}
	// The queue is by insertion; a block inserted again has a newer
	// entry, and its older ones are stale and skipped.
	count, limit := x.count[w]+added, x.capTokens/blockSize
	a, b = ring.live()
	head, count := evictUses(a, u, &x.spare, holders, bit, count, limit)
	if head == len(a) && count > limit {
		var more int
		more, count = evictUses(b, u, &x.spare, holders, bit, count, limit)
		head += more
	}
	ring.pop(head)
	x.count[w] = count
}

// An lruRing is a worker's queue of insertions in a ring buffer: it
// grows to the longest the queue has been and allocates nothing after.
//
// Note: a slice that grew at its end and was resliced at its start
// allocated again as often as the queue's length in insertions (52.6 MB
// in four llm_d replays of the Mooncake trace, by the memory profile, a
// ninth of what the replay allocated).
type lruRing struct {
	e       []int32 // slots; a power of two long, or empty
	head, n int     // the oldest entry's place; entries
}

// room adds k entries at the queue's end and returns them, in order, as
// one or two slices (the second empty unless they wrap round).
func (r *lruRing) room(k int) (a, b []int32) {
	if r.n+k > len(r.e) {
		r.grow(r.n + k)
	}
	t := (r.head + r.n) & (len(r.e) - 1)
	r.n += k
	if t+k <= len(r.e) {
		return r.e[t : t+k], nil
	}
	return r.e[t:], r.e[:t+k-len(r.e)]
}

// live returns the entries, oldest first, as one or two slices.
func (r *lruRing) live() (a, b []int32) {
	if r.head+r.n <= len(r.e) {
		return r.e[r.head : r.head+r.n], nil
	}
	return r.e[r.head:], r.e[:r.head+r.n-len(r.e)]
}

// pop removes the k oldest entries.
func (r *lruRing) pop(k int) {
	if r.n -= k; r.n == 0 {
		r.head = 0
		return
	}
	r.head = (r.head + k) & (len(r.e) - 1)
}

// grow makes room for n entries, the queue kept in order from place 0.
func (r *lruRing) grow(n int) {
	size := max(64, len(r.e))
	for size < n {
		size *= 2
	}
	e := make([]int32, size)
	a, b := r.live()
	copy(e[copy(e, a):], b)
	r.e, r.head = e, 0
}

// useSlots records a use of each of slots, from the last to the first
// (slotsOf's order: the deepest id first), in q (as long) and in the
// slots' use counts, and sets the holder bits (holders nil: none kept)
// of those that had none; it returns how many had none.
//
// Note: a slot's queue entries are counted, not stamped: an entry is a
// slot's last when its count falls to 0 as it is popped, so an entry is
// the slot alone (4 bytes, where a stamp made it 16) and a count a byte
// (a stamp 8: 23 MB of stamps on 16 workers for the Mooncake trace's
// 183,000 ids).
//
// Note: in insertHeld's body, with the index's other values live, this
// loop and the eviction loop kept their state on the stack and reloaded
// it at every id: 23.6 million instructions for a pass over the Mooncake
// trace's 288,500 ids (BenchmarkPrefixIndexInsert, callgrind), 19.1 as
// two functions not inlined (inlined, 24.6). On
// BenchmarkReplayMooncakeRouters: max_prefix −3.2 M, dynamo_kv −2.7 M,
// llm_d −1.7 M.
//
//go:noinline
func useSlots[H holderWord](slots []int32, u *useRows, spare *[]*useRow, holders []H, bit H, q []int32) int64 {
	q = q[:len(slots)]
	var added int64
	for {
		a, i := useRun(slots, u.rows, u.live, spare, holders, bit, q)
		added += a
		if i == len(q) {
			return added
		}
		// Slot q[i]'s count is at useMax.
		s := slots[len(slots)-1-i]
		u.overUse(s)
		q[i] = s
		slots, q = slots[:len(slots)-1-i], q[i+1:]
	}
}

// useRun is useSlots up to the first slot whose count is at useMax: it
// returns how many had none and where it stopped (len(q): at the end).
//
// Note: it returns at such a slot, as evictRun does, where the loops
// called to count past useMax, rarely, but with the loops' state kept
// for the call: useSlots and evictUses were 30.0 million instructions a
// pass of BenchmarkPrefixIndexInsert, 27.2 with the calls out of the
// loops (callgrind; 23.3 with 4-byte counts, which have no useMax).
//
//go:noinline
func useRun[H holderWord](slots []int32, rows []*useRow, live []int32, spare *[]*useRow, holders []H, bit H, q []int32) (int64, int) {
	q = q[:len(slots)]
	live = live[:len(rows)]
	var added int64
	for i := range q {
		s := slots[len(slots)-1-i]
		c := uint32(s) / useChunk
		p := &rowAt(rows, c, spare)[uint32(s)%useChunk]
		switch *p {
		case 0:
			added++
			live[c]++
			if holders != nil {
				holders[s] |= bit
			}
		case useMax:
			return added, i
		}
		*p++
		q[i] = s
	}
	return added, len(q)
}

// overUse counts a use of slot s beyond useMax.
//
//go:noinline
func (u *useRows) overUse(s int32) {
	if u.over == nil {
		u.over = map[int32]uint32{}
	}
	u.over[s]++
}

// overDrop takes a use of slot s back from those beyond useMax, if it
// has any.
//
//go:noinline
func (u *useRows) overDrop(s int32) bool {
	k, ok := u.over[s]
	switch {
	case !ok:
		return false
	case k == 1:
		delete(u.over, s)
	default:
		u.over[s] = k - 1
	}
	return true
}

// rowAt returns row c, taking one (takeRow) if it is nil.
func rowAt(rows []*useRow, c uint32, spare *[]*useRow) *useRow {
	r := rows[c]
	if r == nil {
		r = takeRow(spare)
		rows[c] = r
	}
	return r
}

// takeRow returns a row of zeros: a spare one, or a new one.
func takeRow(spare *[]*useRow) *useRow {
	if n := len(*spare); n > 0 {
		r := (*spare)[n-1]
		*spare = (*spare)[:n-1]
		return r
	}
	return new(useRow)
}

// holdSlots is useSlots for an unbounded index, which keeps no queue: a
// count is 1 for a slot held.
func holdSlots[H holderWord](slots []int32, rows []*useRow, live []int32, spare *[]*useRow, holders []H, bit H) int64 {
	live = live[:len(rows)]
	var added int64
	for _, s := range slots {
		c := uint32(s) / useChunk
		if p := &rowAt(rows, c, spare)[uint32(s)%useChunk]; *p == 0 {
			*p = 1
			added++
			live[c]++
			if holders != nil {
				holders[s] |= bit
			}
		}
	}
	return added
}

// evictUses pops q's oldest entries while more than limit slots are held
// (count): each lowers its slot's use count, and the slot whose count
// falls to 0 (the entry was its last use) is evicted, with its holder bit
// (holders nil: none kept). It returns how many entries it popped and the
// count left.
//
//go:noinline
func evictUses[H holderWord](q []int32, u *useRows, spare *[]*useRow, holders []H, bit H, count, limit int64) (int, int64) {
	head := 0
	for {
		var stop bool
		head, count, stop = evictRun(q, head, u.rows, u.live, spare, holders, bit, count, limit)
		if !stop {
			return head, count
		}
		// Slot q[head]'s count is at useMax: one of its uses past
		// that goes, or the count falls below it.
		s := q[head]
		if !u.overDrop(s) {
			u.rows[uint32(s)/useChunk][uint32(s)%useChunk]--
		}
		head++
	}
}

// evictRun is evictUses from q[head] up to the first slot whose count is
// at useMax: it returns where it stopped, the count left, and whether it
// stopped at such a slot (as useRun, for the loop's state).
//
//go:noinline
func evictRun[H holderWord](q []int32, head int, rows []*useRow, live []int32, spare *[]*useRow, holders []H, bit H, count, limit int64) (int, int64, bool) {
	live = live[:len(rows)]
	for ; count > limit && head < len(q); head++ {
		s := q[head]
		c := uint32(s) / useChunk
		r := rows[c]
		p := &r[uint32(s)%useChunk]
		if *p == useMax {
			return head, count, true
		}
		if *p--; *p == 0 {
			count--
			if holders != nil {
				holders[s] &^= bit
			}
			if live[c]--; live[c] == 0 {
				// All zeros: spare.
				*spare = append(*spare, r)
				rows[c] = nil
			}
		}
	}
	return head, count, false
}

// slotsOf returns the slots of ids (in x.slotBuf), giving those not in
// the index the next slots, deepest first, with their use counts and,
// with at most 64 workers, their holder bits.
//
// Note: a call per new id (newSlot, then slotTable.add) that grew the
// holder bits by one and looked whether the counts needed a chunk was
// some 65 instructions an id, and most of a Mooncake request's ids are
// new (183,000 of the 288,000 llm_d inserts): 12 M instructions of each
// router with an index. The dense table's lookup, and its common
// addition (the id within it and within its bound, no id in the map),
// are slotTable's get and add written out; the counts and holder bits
// grow once, after.
func (x *prefixIndex) slotsOf(ids []int64) []int32 {
	slots := slices.Grow(x.slotBuf[:0], len(ids))[:len(ids)]
	t := &x.slots
	j := len(ids) - 1
	if !t.table {
		j = t.own(ids, slots)
	}
	n, dense, sparse := t.n, t.dense, len(t.sparse) > 0
	for ; j >= 0; j-- {
		id := ids[j]
		if uint64(id) < uint64(len(dense)) {
			if v := dense[id]; v != 0 {
				slots[j] = v - 1
				continue
			}
			if !sparse && nearSlots(id, int64(n)+1) { // add's test, t.n being n+1
				dense[id] = n + 1
				slots[j] = n
				n++
				continue
			}
		}
		t.n = n
		s, ok := t.get(id)
		if !ok {
			s = t.add(id)
		}
		slots[j] = s
		n, dense, sparse = t.n, t.dense, len(t.sparse) > 0
	}
	t.n = n
	x.slotBuf = slots
	switch {
	case x.workers <= 16:
		x.holders16 = growHolders(x.holders16, int(n))
	case x.workers <= 32:
		x.holders32 = growHolders(x.holders32, int(n))
	case x.workers <= 64:
		x.holders64 = growHolders(x.holders64, int(n))
	}
	if !x.bitsOnly && len(x.uses) > 0 && len(x.uses[0].rows)*useChunk < int(n) { // every worker has as many rows
		rows := (int(n) + useChunk - 1) / useChunk
		for w := range x.uses {
			u := &x.uses[w]
			u.rows = append(u.rows, make([]*useRow, rows-len(u.rows))...)
			u.live = append(u.live, make([]int32, rows-len(u.live))...)
		}
	}
	return slots
}

// growHolders returns h with room for n slots' holder bits.
//
// Note: doubled, where append grows a large slice by a quarter: the
// copies were 6 MB of fresh memory a 16-worker replay of the Mooncake
// trace. Never shrunk, so its room is zeros.
func growHolders[H holderWord](h []H, n int) []H {
	if len(h) >= n {
		return h
	}
	if cap(h) < n {
		h = slices.Grow(h, max(n, 2*cap(h))-len(h))
	}
	return h[:n]
}

// insertBits is insertSlots for an index without use counts (bitsOnly).
//
// Note: an unbounded index's stamps only said whether their worker held
// the slot, which its holder bit says too: SGLang's router wrote a
// stamp and its bit for each id it inserted, and made a chunk of 16,384
// stamps (128 KiB) per 1,024 slots, 22 MiB zeroed on the Mooncake
// trace's 180,000 ids.
func insertBits[H holderWord](x *prefixIndex, holders []H, w int, slots []int32) {
	count, bit := x.count[w], H(1)<<w
	for j := len(slots) - 1; j >= 0; j-- { // as insertHeld, deepest first
		s := slots[j]
		if h := holders[s]; h&bit == 0 {
			holders[s] = h | bit
			count++
		}
	}
	x.count[w] = count
}

// holds reports whether worker w holds slot s.
func (x *prefixIndex) holds(w int, s int32) bool {
	if x.workers <= 64 {
		return x.holderBits(s)>>w&1 != 0
	}
	u := &x.uses[w]
	c := uint32(s) / useChunk
	return int(c) < len(u.rows) && u.rows[c] != nil && u.rows[c][uint32(s)%useChunk] != 0
}

// holderBits returns slot s's holder bits, a bit per worker (at most 64
// workers).
func (x *prefixIndex) holderBits(s int32) uint64 {
	switch {
	case x.workers <= 16:
		if int(s) < len(x.holders16) {
			return uint64(x.holders16[s])
		}
	case x.workers <= 32:
		if int(s) < len(x.holders32) {
			return uint64(x.holders32[s])
		}
	default:
		if int(s) < len(x.holders64) {
			return x.holders64[s]
		}
	}
	return 0
}

// dropWorker forgets everything worker w held: it was started afresh.
func (x *prefixIndex) dropWorker(w int) {
	u := &x.uses[w]
	for c, r := range u.rows {
		if r != nil {
			clear(r[:])
			x.spare = append(x.spare, r)
			u.rows[c] = nil
		}
	}
	clear(u.live)
	u.over = nil
	dropBits(x.holders16, w)
	dropBits(x.holders32, w)
	dropBits(x.holders64, w)
	x.count[w] = 0
	x.lru[w].head, x.lru[w].n = 0, 0
}

// dropBits clears worker w's holder bit in every slot.
func dropBits[H holderWord](holders []H, w int) {
	for s := range holders {
		holders[s] &^= H(1) << w
	}
}

// A slotTable gives block ids slots: while every id so far is a small
// counter, its own (a trace's counters, as Mooncake's: 0 to 182,789), and
// from the first id that is not (a hash, a negative id, a counter far
// ahead of those seen), numbers: each id seen keeps its slot, and later
// ones get n, n+1, … in their order of arrival. Numbered ids that
// are small and dense are looked up in a slice, cheaper than hashing
// them into a map (a Go map lookup was about 5 % of those routers'
// CPU); any other id (a hash) goes in a map.
//
// Note: an id is its own slot so that a router's match and insertion
// look up no slot for it: the dense slice, 4 bytes an id, was a lookup
// at a place of its own for every id a router matched or inserted, as
// far apart as the holder bits' (ids arrive as counters, mostly, and
// are numbered in order), and it grew by copies (1.9 MB allocated a
// replay of the Mooncake trace); seen is a bit an id. With the
// use-count loops' own change (useRun), CPU time against e4af489
// (`scripts/enginework --time 10 --against e4af489`, medians): llm_d
// 0.990×, dynamo_kv 0.985×, max_prefix 0.982×, sglang_cache_aware
// 0.961×; each allocates 1.9 MB less.
type slotTable struct {
	// table: ids are numbered (dense and sparse); else every id so far
	// is its own slot, seen has a bit for each, and n is one past the
	// largest.
	table  bool
	seen   []uint64
	ids    int32   // ids seen, while not table
	dense  []int32 // id → slot+1; 0: not here
	sparse map[int64]int32
	n      int32 // slots given: 0 … n−1
}

// own gives ids their own slots in slots (as long), from the last to the
// first, while they are small (add's test); it returns the place of the
// first it cannot give one, which ended t's own slots (t.table), or −1.
func (t *slotTable) own(ids []int64, slots []int32) int {
	slots = slots[:len(ids)]
	// In locals: the loop stores to slots, which the compiler cannot
	// tell from t's fields.
	n, seen, given := uint64(t.n), t.seen, uint64(t.ids)
	for j := len(ids) - 1; j >= 0; j-- {
		id := uint64(ids[j])
		w, bit := id>>6, uint64(1)<<(id&63)
		if w < uint64(len(seen)) && nearSlots(int64(id), int64(given)+1) { // ownNew's test, but for its room
			if seen[w]&bit == 0 {
				seen[w] |= bit
				given++
				n = max(n, id+1)
			}
			slots[j] = int32(id)
			continue
		}
		t.n, t.ids = int32(n), int32(given)
		if !t.ownNew(int64(id)) {
			return j
		}
		slots[j] = int32(id)
		n, seen, given = uint64(t.n), t.seen, uint64(t.ids)
	}
	t.n, t.ids = int32(n), int32(given)
	return -1
}

// ownNew gives id, not seen yet, its own slot, if it is small enough:
// within a few times the ids seen (plus a page), as the dense part
// grows, so that counters far apart cannot blow up what is kept a slot;
// if not, it numbers the ids (t.table) and reports false.
func (t *slotTable) ownNew(id int64) bool {
	if !nearSlots(id, int64(t.ids)+1) || id >= math.MaxInt32 {
		t.number()
		return false
	}
	if w := int(id >> 6); w >= len(t.seen) {
		// Doubled, but to no id as large as math.MaxInt32 (own
		// takes an id within seen's words for one below it).
		k := min(max(w+1, 2*len(t.seen)), math.MaxInt32>>6)
		t.seen = slices.Grow(t.seen, k-len(t.seen))[:k]
	}
	t.seen[id>>6] |= 1 << (id & 63)
	t.ids++
	t.n = max(t.n, int32(id)+1)
	return true
}

// number ends ids being their own slots: each id seen keeps its slot, in
// the dense part, and later ids are numbered from n (an id below n not
// seen too: its own slot stays empty).
func (t *slotTable) number() {
	t.table = true
	t.dense = make([]int32, t.n)
	for i := range t.dense {
		if seenID(t.seen, uint64(t.n), uint64(i)) {
			t.dense[i] = int32(i) + 1
		}
	}
	t.seen = nil
}

func (t *slotTable) get(id int64) (int32, bool) {
	if t.table {
		return t.getNumbered(id)
	}
	return int32(id), seenID(t.seen, uint64(t.n), uint64(id))
}

// seenID reports whether id, an own slot below n, was seen (its bit in
// seen is set).
func seenID(seen []uint64, n, id uint64) bool {
	return id < n && seen[id>>6]&(1<<(id&63)) != 0
}

// nearSlots is the test an id passes to be its own slot, or to have a
// place in the dense part: at least 0 and below four times k (the ids
// seen, or the slots given) plus a page, so that ids far apart (hashes)
// cannot blow up what is kept a slot.
func nearSlots(id, k int64) bool { return id >= 0 && id < 4*k+4096 }

// getNumbered is get for numbered ids (t.table), which matchBits calls
// where the ids are not their own slots.
func (t *slotTable) getNumbered(id int64) (int32, bool) {
	if uint64(id) < uint64(len(t.dense)) {
		if v := t.dense[id]; v != 0 {
			return v - 1, true
		}
	}
	if len(t.sparse) == 0 {
		return 0, false
	}
	s, ok := t.sparse[id]
	return s, ok
}

// add gives id, not in t yet, the next slot. The dense part grows to
// reach id only while it stays within a few times the slots given (plus
// a page), so hashes cannot blow it up; an id the dense part did not
// reach stays in the map, where get still finds it.
func (t *slotTable) add(id int64) int32 {
	if !t.table && t.ownNew(id) {
		return int32(id)
	}
	s := t.n
	t.n++
	if nearSlots(id, int64(t.n)) {
		if id >= int64(len(t.dense)) {
			n := max(2*len(t.dense), int(id)+1)
			t.dense = append(t.dense, make([]int32, n-len(t.dense))...)
		}
		t.dense[id] = s + 1
		return s
	}
	if t.sparse == nil {
		t.sparse = map[int64]int32{}
	}
	t.sparse[id] = s
	return s
}
