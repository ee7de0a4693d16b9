package replay

import (
	"math/bits"

	"github.com/opaltrace/opaltrace/replay/kvcache"
)

// activeSeqs is Dynamo's ActiveSequences, the KV router's own record of
// the requests it sent to each worker and that have not completed, kept
// for every worker slot at once: per worker its active prefill tokens
// (each request's prompt less the cached blocks it matched there, until
// its first token comes back) and its active blocks (the distinct full KV
// blocks of their prompts); and what a request would add to each worker's
// blocks (Dynamo's new_blocks).
//
// Blocks are told apart as Dynamo's sequence hashes tell them: a prompt's
// block k is another's when the two prompts agree up to its last token.
// From a trace's hash ids that is when their ids agree up to the trace
// block its last token lies in, its node: node j holds the engine blocks
// whose last tokens lie in trace block j, ⌊(j+1)·tb/bs⌋ − ⌊j·tb/bs⌋ of
// them, and a prompt of K full blocks covers a leading part of each node
// it reaches (all of it but at its end). So the blocks a worker's requests
// hold of node j are the most any one of them covers: per node and worker
// the table keeps how many requests cover it whole and the most a request
// covering part of it covers (with each such request's coverage, for when
// it goes). Blocks past the ids another request starts with too
// (Routed.SharedIDs), and every block of a request without ids, are the
// request's own: no other request has them.
//
// A node no active request holds has no entry, and a request that holds
// node j holds every node before it whole: a walk along a prompt's nodes
// stops at the first without an entry, and each worker's at the first it
// does not hold whole. A request's nodes past the first no other active
// request holds get no entries (its tail, counted in closed form): the
// first has one, which names the request, and a later request whose walk
// reaches it and goes on along the same ids enters them one by one
// (fromTail).
//
// Note: on Mooncake's conversation trace a request has 11.5 nodes in ids
// that another request shares, and another active request holds few of
// them: entering all of them, a request's nodes cost some 250
// instructions each to enter, find and free (dynamo_kv's replay 720 M
// instructions against 544 M for round-robin's, `scripts/enginework`);
// with tails, 658 M.
type activeSeqs struct {
	slots int
	bs    int64 // the engine's tokens per block

	tabs  []nodeTable // per trace block size
	ents  []actEntry
	spare []int32 // free entries
	// Per row of an entry that several workers hold, per slot: the
	// requests covering it whole, and the most one covering part of it
	// covers.
	wideFull, widePmax []int32
	spareRows          []int32
	part               map[partKey][]int32 // per entry and slot: the coverages of requests covering part of it
	other              map[otherKey]int32  // nodes whose slot holds another's (nodeTable)

	tokens []int64 // per slot, active prefill tokens
	blocks []int64 // per slot, active blocks

	// The active requests' records, and by request index its record
	// + 1 (0: none). Records are reused, with their node lists.
	recs      []activeReq
	at        []int32
	spareRecs []int32

	// What plan found for the request being routed: its table, prompt
	// blocks, trace block and the ids of its nodes (shared ids it has
	// blocks in), its own blocks; the nodes with entries, leading, and
	// the slot of the next's id (−1: none); and per slot the blocks it
	// would add.
	tab      int
	k, tb    int64
	ids      []int64
	own      int64
	nodes    []nodeRef
	nextSlot int32
	newb     []int64

	firsts int64 // first tokens heard of active requests (for tests)
}

// An actEntry is one node some active request holds.
//
// Note: most nodes are held on one worker at a time (a cache-aware router
// sends requests that share a prefix to one worker), so the counts are
// the entry's own, and a row of every slot's only once a second worker
// holds it: a plan then looks at that one worker, not at every slot.
type actEntry struct {
	holders int32 // requests holding it, on any worker
	parent  int32 // the entry of the node before it (−1: the first)
	slot    int32 // its id's slot in its table
	tab     int16
	aside   bool  // in other, its slot holding another node's entry
	w       int16 // the one worker holding it (oneFree: none; oneWide: several, row)
	full    int32 // w's requests covering it whole
	pmax    int32 // the most a request of w covering part of it covers
	row     int32 // several workers: its row of wideFull and widePmax
	tail    int32 // the record + 1 of the one request whose nodes past it have no entries yet (0: none)
	id      int64
}

// actEntry.w when no worker holds it, and when several do.
const (
	oneFree = -1
	oneWide = -2
)

// A nodeTable finds the entries of one trace block size's nodes: a node is
// its trace block's id after the node before it (a trie, as Dynamo's
// sequence hashes chain), and as equal ids mean equal prefixes
// (trace.Request.HashIDs) an id has one node: its entry + 1 is ent at the
// id's slot in a slotTable (the routers' prefix index's numbering: a
// Mooncake id is its own slot), 0 for none. A trace whose equal ids do not
// mean equal prefixes puts a second prefix's node in activeSeqs.other.
//
// Note: a Go map from a chained hash of the ids to the entry, when every
// node a request shared with another was entered (before tails), was a
// third of the router's time: its insertions and deletions, a node each
// at every request's start and end, took dynamo_kv's replay of the
// Mooncake conversation trace to 1.51× round-robin's CPU time, against
// 1.20× before the router tracked active blocks (`scripts/enginework
// --time 10`). With tails far fewer nodes are entered (7,000 in that
// replay), and the slot table finds a Mooncake id's entry by index.
type nodeTable struct {
	tb  int64
	ids slotTable
	ent []int32
}

// An otherKey is a node by its table, the entry before it and its id.
type otherKey struct {
	tab, parent int32
	id          int64
}

// A partKey is a node's entry and a worker slot.
type partKey struct{ e, slot int32 }

// A nodeRef is a request's part of one node: the node's entry (or, in a
// plan, −1 and its slot, −1 if not looked up), its blocks and how many of
// them the request covers.
type nodeRef struct{ e, slot, n, c int32 }

// An activeReq is one request the router sent and has not seen complete.
type activeReq struct {
	slot    int32
	prefill int64 // tokens, until its first token (then −1)
	own     int64 // blocks no other request has
	k, tb   int64 // its prompt's full blocks, its trace block
	// The ids of its nodes, and the nodes with entries; those past
	// them no other active request holds (the tail of the last's
	// entry).
	ids   []int64
	nodes []nodeRef
}

func newActiveSeqs(slots int, bs int64) *activeSeqs {
	return &activeSeqs{
		slots: slots, bs: bs, part: map[partKey][]int32{},
		tokens: make([]int64, slots), blocks: make([]int64, slots), newb: make([]int64, slots),
	}
}

// table returns the place in tabs of trace block size tb's table.
func (a *activeSeqs) table(tb int64) int {
	for i := range a.tabs {
		if a.tabs[i].tb == tb {
			return i
		}
	}
	a.tabs = append(a.tabs, nodeTable{tb: tb})
	return len(a.tabs) - 1
}

// node returns node j's blocks, and how many of them a prompt of k full
// blocks covers, for trace blocks of tb tokens.
func (a *activeSeqs) node(j int, k, tb int64) nodeRef {
	lo, end := int64(j)*tb/a.bs, (int64(j)+1)*tb/a.bs
	return nodeRef{e: -1, slot: -1, n: int32(end - lo), c: int32(min(end, k) - lo)}
}

// tailBlocks is the blocks of nodes from … of a prompt of k full blocks
// whose ids, of trace blocks of tb tokens, have n nodes: the blocks whose
// last tokens lie in its trace blocks from … n−1.
func (a *activeSeqs) tailBlocks(from, n int, k, tb int64) int64 {
	return max(min(k, int64(n)*tb/a.bs)-min(k, int64(from)*tb/a.bs), 0)
}

// planNone plans a request that adds no blocks: its prefill tokens alone
// are tracked (router_track_active_blocks off).
func (a *activeSeqs) planNone() {
	a.k, a.tb, a.ids, a.nodes, a.nextSlot, a.own = 0, 0, nil, a.nodes[:0], -1, 0
	clear(a.newb)
}

// plan finds the nodes of q that have entries and sets newb, per slot, to
// the full blocks of q's prompt that the slot's active requests do not
// hold.
func (a *activeSeqs) plan(q *Routed) {
	bs := a.bs
	k := q.Prompt / bs // Dynamo hashes full blocks only
	a.k, a.tb, a.ids, a.nodes, a.nextSlot = k, q.BlockSize, nil, a.nodes[:0], -1
	newb := a.newb
	for w := range newb {
		newb[w] = k
	}
	a.own = k
	tb := q.BlockSize
	if tb <= 0 || bs <= 0 || len(q.HashIDs) == 0 || k == 0 {
		return
	}
	a.tab = a.table(tb)
	// Node j has blocks while ⌊j·tb/bs⌋ < k, that is j·tb < k·bs.
	ids := q.HashIDs[:min(q.SharedIDs, len(q.HashIDs), int((k*bs+tb-1)/tb))]
	a.ids = ids
	a.own = k - a.tailBlocks(0, len(ids), k, tb)
	// The workers that hold every node so far whole (alive, when there
	// are at most 64) are those that may hold the next.
	t := &a.tabs[a.tab]
	wide := a.slots > 64
	alive := ^uint64(0)
	if !wide {
		alive = 1<<a.slots - 1
	}
	parent := int32(-1)
	for i, id := range ids {
		p := a.node(i, k, tb)
		if s, ok := t.ids.get(id); ok {
			p.slot = s
			p.e = a.find(t, s, parent, id)
		}
		if p.e < 0 && parent >= 0 {
			p.e = a.fromTail(parent, i, id)
		}
		if p.e < 0 {
			a.nextSlot = p.slot
			return
		}
		a.nodes = append(a.nodes, p)
		parent = p.e
		if wide {
			for w := range newb {
				newb[w] -= int64(min(p.c, a.held(p.e, w, p.n)))
			}
			continue
		}
		x := &a.ents[p.e]
		switch {
		case x.w >= 0:
			// One worker holds it: the others no more of q.
			newb[x.w] -= int64(min(p.c, holding(x.full, x.pmax, p.n)))
			if x.full == 0 {
				alive = 0
			} else {
				alive &= 1 << x.w
			}
		default:
			full := a.wideFull[int(x.row)*a.slots:][:a.slots]
			pmax := a.widePmax[int(x.row)*a.slots:][:a.slots]
			for m := alive; m != 0; m &= m - 1 {
				w := bits.TrailingZeros64(m)
				if full[w] > 0 {
					newb[w] -= int64(p.c)
					continue
				}
				newb[w] -= int64(min(p.c, pmax[w]))
				alive &^= 1 << w
			}
		}
		if alive == 0 {
			// No worker holds the node whole: no later node has
			// an entry, or is in a tail.
			return
		}
	}
}

// fromTail returns the entry of node i, of id, after the node of entry
// parent, when it is in the tail of the request whose nodes past parent
// have no entries: it gets one (as that request holds it), and the tail
// goes on from it. Else −1.
func (a *activeSeqs) fromTail(parent int32, i int, id int64) int32 {
	tr := a.ents[parent].tail
	if tr == 0 {
		return -1
	}
	r := &a.recs[tr-1]
	if len(r.nodes) != i || r.ids[i] != id {
		return -1
	}
	n := a.node(i, r.k, r.tb)
	e := a.newEntry(a.tab, -1, id, parent)
	n.e = e
	a.hold(n, int(r.slot), 1) // its blocks counted already, as its tail's
	a.ents[parent].tail = 0
	if i+1 < len(r.ids) {
		a.ents[e].tail = tr
	}
	r.nodes = append(r.nodes, n)
	return e
}

// find returns the entry of the node of id, slot s of table t, after the
// node of entry parent (−1: the first), or −1.
func (a *activeSeqs) find(t *nodeTable, s, parent int32, id int64) int32 {
	if int(s) < len(t.ent) && t.ent[s] != 0 {
		if e := t.ent[s] - 1; a.ents[e].parent == parent {
			return e
		}
	}
	if len(a.other) > 0 {
		if e, ok := a.other[otherKey{int32(a.tab), parent, id}]; ok {
			return e
		}
	}
	return -1
}

// held is how many of entry e's blocks (n) slot w's requests hold.
func (a *activeSeqs) held(e int32, w int, n int32) int32 {
	x := &a.ents[e]
	switch {
	case x.w == oneWide:
		i := int(x.row)*a.slots + w
		return holding(a.wideFull[i], a.widePmax[i], n)
	case int(x.w) != w:
		return 0
	}
	return holding(x.full, x.pmax, n)
}

// holding is how many of a node's n blocks a worker's requests hold when
// full of them cover it whole and the most one of the others covers is
// pmax.
func holding(full, pmax, n int32) int32 {
	if full > 0 {
		return n
	}
	return pmax
}

// counts returns entry e's counts for slot w, which holds it or is to:
// the entry's own while w is its one worker (or no worker holds it), a
// row's once a second worker comes.
func (a *activeSeqs) counts(e int32, w int) (full, pmax *int32) {
	x := &a.ents[e]
	switch {
	case x.w == oneFree:
		x.w = int16(w)
	case x.w >= 0 && int(x.w) != w:
		// A second worker: a row for every worker.
		r, fresh := reuse(&a.spareRows, len(a.wideFull)/a.slots)
		if fresh {
			a.wideFull = append(a.wideFull, make([]int32, a.slots)...)
			a.widePmax = append(a.widePmax, make([]int32, a.slots)...)
		}
		i := int(r)*a.slots + int(x.w)
		a.wideFull[i], a.widePmax[i] = x.full, x.pmax
		x.w, x.row, x.full, x.pmax = oneWide, r, 0, 0
	}
	if x.w == oneWide {
		i := int(x.row)*a.slots + w
		return &a.wideFull[i], &a.widePmax[i]
	}
	return &x.full, &x.pmax
}

// hold counts one more (by 1) or one fewer (by −1) request of slot w that
// covers p.c of node p's p.n blocks, and returns how many more blocks the
// slot's requests hold of it (fewer: negative).
func (a *activeSeqs) hold(p nodeRef, w int, by int32) int64 {
	full, pmax := a.counts(p.e, w)
	old := holding(*full, *pmax, p.n)
	switch {
	case p.c == p.n:
		*full += by
	case by > 0:
		k := partKey{p.e, int32(w)}
		a.part[k] = append(a.part[k], p.c)
		*pmax = max(*pmax, p.c)
	default:
		*pmax = a.dropPart(p.e, w, p.c)
	}
	a.ents[p.e].holders += by
	return int64(holding(*full, *pmax, p.n) - old)
}

// add records the request planned last as sent to slot w (Dynamo's
// add_request), with prefill tokens to compute there.
func (a *activeSeqs) add(idx int, w int, prefill int64) {
	a.at = growTo(a.at, idx)
	rec, fresh := reuse(&a.spareRecs, len(a.recs))
	if fresh {
		a.recs = append(a.recs, activeReq{})
	}
	a.at[idx] = rec + 1
	r := &a.recs[rec]
	nodes := r.nodes[:0]
	nodes = append(nodes, a.nodes...)
	var added int64
	if f := len(nodes); f < len(a.ids) {
		// The first node no one holds gets an entry; the request's
		// nodes past it are its tail, without.
		p := a.node(f, a.k, a.tb)
		parent := int32(-1)
		if f > 0 {
			parent = nodes[f-1].e
		}
		p.e = a.newEntry(a.tab, a.nextSlot, a.ids[f], parent)
		if f+1 < len(a.ids) {
			a.ents[p.e].tail = rec + 1
			added += a.tailBlocks(f+1, len(a.ids), a.k, a.tb)
		}
		nodes = append(nodes, p)
	}
	for _, p := range nodes {
		added += a.hold(p, w, 1)
	}
	a.blocks[w] += added + a.own
	a.tokens[w] += prefill
	r.slot, r.prefill, r.own, r.k, r.tb = int32(w), prefill, a.own, a.k, a.tb
	r.ids = append(r.ids[:0], a.ids...)
	r.nodes = nodes
}

// newEntry gives the node of id, slot s in table tab (−1: not looked up),
// after the node of entry parent, an entry.
func (a *activeSeqs) newEntry(tab int, s int32, id int64, parent int32) int32 {
	t := &a.tabs[tab]
	if s < 0 {
		// Past the first node without an entry, plan looked up no
		// slot: the id may have one from an earlier request.
		var ok bool
		if s, ok = t.ids.get(id); !ok {
			s = t.ids.add(id)
		}
	}
	t.ent = growTo(t.ent, int(s))
	e, fresh := reuse(&a.spare, len(a.ents))
	if fresh {
		a.ents = append(a.ents, actEntry{})
	}
	a.ents[e] = actEntry{parent: parent, slot: s, tab: int16(tab), w: oneFree, id: id}
	if t.ent[s] == 0 {
		t.ent[s] = e + 1
	} else {
		// The id's slot holds another prefix's node: a trace whose
		// equal ids do not mean equal prefixes.
		if a.other == nil {
			a.other = map[otherKey]int32{}
		}
		a.other[otherKey{int32(tab), parent, id}] = e
		a.ents[e].aside = true
	}
	return e
}

// prefilled records request idx's first token (Dynamo's
// mark_prefill_completed): its prompt no longer counts as to compute.
func (a *activeSeqs) prefilled(idx int) {
	r := a.record(idx)
	if r != nil && r.prefill >= 0 {
		a.tokens[r.slot] -= r.prefill
		r.prefill = -1 // heard
		a.firsts++
	}
}

// free forgets request idx, completed or aborted (Dynamo's free); a
// request not recorded, or freed already, is none of its business.
func (a *activeSeqs) free(idx int) {
	r := a.record(idx)
	if r == nil {
		return
	}
	w := int(r.slot)
	if r.prefill > 0 {
		a.tokens[w] -= r.prefill // its first token never came
	}
	// Its tail: no other request holds those blocks.
	gone := a.tailBlocks(len(r.nodes), len(r.ids), r.k, r.tb)
	if n := len(r.nodes); n > 0 {
		if x := &a.ents[r.nodes[n-1].e]; x.tail == a.at[idx] {
			x.tail = 0
		}
	}
	for _, p := range r.nodes {
		gone -= a.hold(p, w, -1)
		x := &a.ents[p.e]
		if x.w >= 0 && x.full == 0 && x.pmax == 0 {
			x.w = oneFree
		}
		if x.holders == 0 {
			a.dropEntry(p.e)
		}
	}
	a.blocks[w] -= gone + r.own
	a.spareRecs = append(a.spareRecs, a.at[idx]-1)
	a.at[idx] = 0
}

// dropEntry frees entry e, which no request holds.
func (a *activeSeqs) dropEntry(e int32) {
	x := &a.ents[e]
	if x.aside {
		delete(a.other, otherKey{int32(x.tab), x.parent, x.id})
	} else {
		a.tabs[x.tab].ent[x.slot] = 0
	}
	if x.w == oneWide {
		a.spareRows = append(a.spareRows, x.row) // all zero again
	}
	a.spare = append(a.spare, e)
}

// inUse is how many entries some active request holds.
func (a *activeSeqs) inUse() int { return len(a.ents) - len(a.spare) }

// record is request idx's record, nil when it is not active.
func (a *activeSeqs) record(idx int) *activeReq {
	if idx >= len(a.at) || a.at[idx] == 0 {
		return nil
	}
	return &a.recs[a.at[idx]-1]
}

// dropPart removes one coverage c of entry e on slot w, and returns the
// most of those left (0: none).
func (a *activeSeqs) dropPart(e int32, w int, c int32) int32 {
	k := partKey{e, int32(w)}
	cs := a.part[k]
	for i, v := range cs {
		if v == c {
			cs[i] = cs[len(cs)-1]
			cs = cs[:len(cs)-1]
			break
		}
	}
	m := int32(0)
	for _, v := range cs {
		m = max(m, v)
	}
	if len(cs) == 0 {
		delete(a.part, k)
	} else {
		a.part[k] = cs
	}
	return m
}

// dropWorker forgets the requests of slot w, whose worker a new one
// replaces (an autoscaled slot restarting is idle: none are left).
func (a *activeSeqs) dropWorker(w int) {
	for idx, rec := range a.at {
		if rec != 0 && int(a.recs[rec-1].slot) == w {
			a.free(idx)
		}
	}
}

// reuse pops an index off spare, or, when there is none, returns next,
// the first new one, and true.
func reuse(spare *[]int32, next int) (int32, bool) {
	if n := len(*spare); n > 0 {
		i := (*spare)[n-1]
		*spare = (*spare)[:n-1]
		return i, false
	}
	return int32(next), true
}

// growTo returns s with index i in it, its new places 0: s's capacity
// grows as kvcache.Grow grows it (at least doubled, in memory fresh from
// the kernel), and s is never cut, so the places past its length are
// still as they were made.
func growTo(s []int32, i int) []int32 {
	if i < len(s) {
		return s
	}
	return kvcache.Grow(s, i+1-len(s))[:i+1]
}
