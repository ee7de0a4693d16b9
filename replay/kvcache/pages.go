package kvcache

// PageKeys appends to dst the keys of the whole pages of page tokens
// among the first n tokens of a sequence keyed by runs (TokenKeys), and
// returns it: the key of a page is the key of its last token's run mixed
// with that token's position, so two sequences have equal keys for page j
// exactly when their first (j+1)·page tokens are the same tokens (a run
// key names its whole prefix of trace blocks; a request's own tokens
// have its unique key). These are the keys SGLang's HiCache keeps pages
// under in its host pool and storage backends (a hash per page, chained
// through the prefix).
func PageKeys(dst []uint64, runs []Run, page, n int64) []uint64 {
	return PageKeysAt(dst[:0], runs, 0, page, n)
}

// pageKey is the key of page j (its tokens' positions over page) whose
// last token lies in the run keyed run: its TierKey, grouped by run.
func pageKey(run uint64, last, page int64) uint64 {
	return TierKey(mix(run, uint64(last), 7), run, last/page)
}

// TierKey returns the key under which a tier holds block i of a sequence
// (a tier block: vLLM's offloaded block, LMCache's chunk, SGLang's page),
// given h, a hash of the block's content and everything before it, and
// group, a hash that is the same for every sequence whose block i is
// (the hash of an earlier block of its group will do): its high half is
// h's, its low half the same for the GroupBlocks blocks of i's group (i
// over GroupBlocks) but for their last three bits, i's place in the
// group.
//
// Note: the low half is a tier index's bucket and place there
// (tierIndex), so that a prefix's blocks, stored, found and evicted one
// after the other, share a cache line of the index; with random low
// halves the index's cache misses were most of a replay with an NVMe tier.
// Equal prefixes still have equal keys, and unequal ones differ in the
// high half as in h.
func TierKey(h, group uint64, i int64) uint64 {
	low := uint32(mix(group, uint64(i/GroupBlocks), 8))&^(GroupBlocks-1) | uint32(i%GroupBlocks)
	k := h&^0xffffffff | uint64(low)
	if k == 0 {
		k = 1
	}
	return k
}

// PageKeysAt appends to dst the keys (as PageKeys) of the pages whose
// last token lies among runs, a part of a sequence that starts at
// position start, and before position end.
func PageKeysAt(dst []uint64, runs []Run, start, page, end int64) []uint64 {
	if page <= 0 {
		return dst
	}
	i := 0
	last := (start+page)/page*page - 1 // the first page end at or after start
	for ; last < end; last += page {
		for i < len(runs) && start+runs[i].Len <= last {
			start += runs[i].Len
			i++
		}
		if i == len(runs) {
			break
		}
		dst = append(dst, pageKey(runs[i].Key, last, page))
	}
	return dst
}
