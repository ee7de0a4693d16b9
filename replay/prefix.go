package replay

import (
	"math"
	"slices"
)

// Which prefix blocks to index.
//
// A block whose hash no other request can ask for need not be in the
// cache's hash index (kvcache.Cache.CommitPrivate): only its owner finds
// it again, after a preemption, through its old block table. Each index
// insert and delete is a cache miss once the workers' tables outgrow the
// CPU caches, and a replay commits millions of blocks, so knowing which
// blocks are private is most of the speed of a replay with prefix caching.
// The results are the same either way (TestPrivateBlocksSameResults,
// TestOnlineSharingSameResults).

// sharedPrefixes returns, for each request, how many of its leading
// hash_ids occur in more than one place in the trace. It serves a shared
// remote KV tier, where a block of a request routed elsewhere can hit.
func sharedPrefixes(ids [][]int64) []int32 {
	var all []int64
	for _, x := range ids {
		all = append(all, x...)
	}
	slices.Sort(all)
	var shared []int64 // ids seen more than once, sorted
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] && (len(shared) == 0 || shared[len(shared)-1] != all[i]) {
			shared = append(shared, all[i])
		}
	}
	out := make([]int32, len(ids))
	for i, x := range ids {
		n := 0
		for _, id := range x {
			if _, ok := slices.BinarySearch(shared, id); !ok {
				break
			}
			n++
		}
		out[i] = int32(n)
	}
	return out
}

// sharedOnWorkers returns, for each request, the length of the longest
// prefix of its hash_ids (ids[i], in trace blocks of bs[i] tokens; 0:
// none) that another request routed to the same worker also starts with
// (route[i] < 0: not routed, 0). Block k of a request
// hashes every id up to the one its last token lies in, so only a common
// leading run of ids (with the same trace block size) can give two
// requests a common block, and only requests on one worker share a cache.
//
// Note: sorting each worker's requests by (block size, ids) puts the
// request with the longest common prefix next to each request, so one
// pass over neighbours finds it.
func sharedOnWorkers(ids [][]int64, bs []int64, route []int32, workers int) []int32 {
	out := make([]int32, len(ids))
	groups := make([][]int32, workers)
	for i := range ids {
		if route[i] >= 0 && len(ids[i]) > 0 && bs[i] > 0 {
			groups[route[i]] = append(groups[route[i]], int32(i))
		}
	}
	for _, g := range groups {
		sortByIDs(g, ids, bs)
		for j := 1; j < len(g); j++ {
			a, b := g[j-1], g[j]
			if bs[a] != bs[b] {
				continue
			}
			n := int32(commonPrefix(ids[a], ids[b]))
			out[g[j-1]] = max(out[g[j-1]], n)
			out[g[j]] = max(out[g[j]], n)
		}
	}
	return out
}

func commonPrefix(a, b []int64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// onlineSharing tells, as requests arrive, how many leading hash ids of
// a request another request that can still reach its worker also starts
// with: a request not arrived yet (it may be routed anywhere), or one
// already routed to the same worker. It serves routers that decide at
// arrival (load-aware ones), where sharedOnWorkers cannot be computed
// in advance, and is far tighter than sharedPrefixes: a request whose
// sharers arrived before it and went to other workers has no block
// another request can ask for on its worker.
//
// Note: it is the test of sharedOnWorkers restricted to the requests
// that may still come, so it indexes a superset of the blocks that
// sharedOnWorkers would for the same routing, which is exact
// (TestOnlineSharingSameResults). On vLLM workers the blocks it finds
// are hashed as shared, but indexed only once a sharer comes to the
// worker (prefixlazy.go). Requests are sorted by (block size,
// ids) as in sharedOnWorkers; the common prefix of two requests is the
// least lcp between them in that order, so a walk outwards from a
// request finds, in each direction, the deepest sharer that qualifies.
type onlineSharing struct {
	pos   []int32 // each request's place in sorted (-1: no prefix to share)
	order []int32 // request indices by (block size, ids)
	lcp   []int32 // lcp[j]: common leading ids of order[j-1] and order[j]
	// where holds each request's worker once routed; notArrived
	// before, and rejected when it was rejected.
	where []int32
	// The requests' ids and trace block sizes, and lazy indexing
	// (prefixlazy.go) once a worker does it.
	ids  [][]int64
	bs   []int64
	lazy *lazyIndex
}

const (
	notArrived = -2
	rejected   = -1
	// maxWalk bounds the walk in each direction; past it, the common
	// prefix reached counts as shared (indexing more changes nothing
	// but speed), so that a crowd of sharers routed elsewhere cannot
	// make an arrival cost O(requests).
	maxWalk = 64
)

func newOnlineSharing(ids [][]int64, bs []int64) *onlineSharing {
	o := &onlineSharing{pos: make([]int32, len(ids)), where: make([]int32, len(ids)), ids: ids, bs: bs}
	for i := range ids {
		o.pos[i], o.where[i] = -1, notArrived
		if len(ids[i]) > 0 && bs[i] > 0 {
			o.order = append(o.order, int32(i))
		}
	}
	sortByIDs(o.order, ids, bs)
	o.lcp = make([]int32, len(o.order))
	for j, i := range o.order {
		o.pos[i] = int32(j)
		if j > 0 && bs[o.order[j-1]] == bs[i] {
			o.lcp[j] = int32(commonPrefix(ids[o.order[j-1]], ids[i]))
		}
	}
	return o
}

// routed records that request i arrived and went to worker w, and
// returns how many of its leading ids another request that is not yet
// routed, or is routed to w, also starts with.
func (o *onlineSharing) routed(i int32, w int) int32 {
	o.where[i] = int32(w)
	p := o.pos[i]
	if p < 0 {
		return 0
	}
	var best int32
	qualifies := func(j int32) bool {
		b := o.where[o.order[j]]
		return b == notArrived || b == int32(w)
	}
	m := int32(math.MaxInt32)
	for j, n := p+1, 0; j < int32(len(o.order)); j, n = j+1, n+1 {
		if m = min(m, o.lcp[j]); m <= best {
			break
		}
		if n == maxWalk || qualifies(j) {
			best = m
			break
		}
	}
	m = math.MaxInt32
	for j, n := p-1, 0; j >= 0; j, n = j-1, n+1 {
		if m = min(m, o.lcp[j+1]); m <= best {
			break
		}
		if n == maxWalk || qualifies(j) {
			best = m
			break
		}
	}
	return best
}

// anyShares returns how many leading ids some other request starts with
// too, wherever it goes: its greater common prefix with a neighbour in
// sorted order.
func (o *onlineSharing) anyShares(i int32) int32 {
	p := o.pos[i]
	if p < 0 {
		return 0
	}
	n := o.lcp[p]
	if int(p)+1 < len(o.lcp) {
		n = max(n, o.lcp[p+1])
	}
	return n
}

// reject records that request i was rejected: it reaches no worker.
func (o *onlineSharing) reject(i int32) { o.where[i] = rejected }
