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
		k := mix(runs[i].Key, uint64(last), 7)
		if k == 0 {
			k = 1
		}
		dst = append(dst, k)
	}
	return dst
}
