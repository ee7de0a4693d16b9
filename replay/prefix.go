package replay

import (
	"cmp"
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
// The results are the same either way (TestPrivateBlocksChangeNothing).

// sharedPrefixes returns, for each request, how many of its leading
// hash_ids occur in more than one place in the trace. It serves routers
// that look at the load, whose choices are only known as the replay runs.
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
		slices.SortFunc(g, func(a, b int32) int {
			if c := cmp.Compare(bs[a], bs[b]); c != 0 {
				return c
			}
			if c := slices.Compare(ids[a], ids[b]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
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
