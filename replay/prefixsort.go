package replay

import "slices"

// sortByIDs sorts the requests in order by (trace block size, hash ids,
// index): bs[i] first, then ids[i] as slices.Compare orders them (a
// prefix before what it begins), then i. It is the order the prefix
// sharing passes (sharedOnWorkers, onlineSharing) walk, where a request's
// longest common prefix with any other is with a neighbour.
//
// Note: a multikey quicksort (Bentley and Sedgewick), partitioning by one
// id at a time and going one id deeper only among the requests equal so
// far, so the ids two requests share are read a few times, not once per
// comparison; large parts partitioned by a radix sort of their keys, and
// a part's common ids skipped at once (common). On the Mooncake
// conversation trace (12,031 requests, all starting with one id, 7,373
// distinct first two): 4.9 million instructions a sort, against 19.8 for
// slices.SortFunc comparing whole id lists (callgrind,
// BenchmarkSortByIDs, which keeps the comparison); newOnlineSharing 23.7
// → 7.3 million of BenchmarkReplayMooncakeRouters/max_prefix,
// sharedOnWorkers 14.9 → 5.3 of round_robin.
func sortByIDs(order []int32, ids [][]int64, bs []int64) {
	s := idSorter{ids: ids, bs: bs}
	s.sort(order, -1)
}

type idSorter struct {
	ids [][]int64
	bs  []int64
	// Scratch of radix: keys, and the requests and keys of a pass.
	keys, keys2 []uint64
	tmp         []int32
}

// An idKey is a request's key at one depth: its block size at depth −1,
// its id there below its length, and past it end (less than any id).
type idKey struct {
	v   int64
	end bool
}

func (s *idSorter) key(i int32, d int) idKey {
	if d < 0 {
		return idKey{v: s.bs[i]}
	}
	if x := s.ids[i]; d < len(x) {
		return idKey{v: x[d]}
	}
	return idKey{end: true}
}

func cmpKey(a, b idKey) int {
	switch {
	case a.end != b.end:
		if a.end {
			return -1
		}
		return 1
	case a.v < b.v:
		return -1
	case a.v > b.v:
		return 1
	}
	return 0
}

// A part of at most insertionMax requests is sorted by insertion,
// comparing from the depth its requests are known equal to; one of
// radixMin or more by radix (a pass over each byte its keys differ in).
const (
	insertionMax = 12
	radixMin     = 256
)

// sort sorts a, whose requests are equal below depth d.
func (s *idSorter) sort(a []int32, d int) {
	for len(a) > 1 {
		var same bool
		if d, same = s.common(a, d); same {
			slices.Sort(a) // the same ids: by index
			return
		}
		if len(a) <= insertionMax {
			s.insertion(a, d)
			return
		}
		if len(a) >= radixMin {
			s.radix(a, d)
			return
		}
		p := s.pivot(a, d)
		// Three-way partition: a[:lt] below p, a[lt:gt] equal, a[gt:]
		// above.
		lt, i, gt := 0, 0, len(a)
		for i < gt {
			switch c := cmpKey(s.key(a[i], d), p); {
			case c < 0:
				a[lt], a[i] = a[i], a[lt]
				lt++
				i++
			case c > 0:
				gt--
				a[gt], a[i] = a[i], a[gt]
			default:
				i++
			}
		}
		s.sort(a[:lt], d)
		s.sort(a[gt:], d)
		if p.end {
			slices.Sort(a[lt:gt])
			return
		}
		a, d = a[lt:gt], d+1
	}
}

// common returns the least depth from d on where two of a's requests,
// equal below d, differ, and whether none do (their keys are the same).
//
// Note: it reads each request's ids from d on, in order, as far as they
// agree with the first's, where partitioning at each depth read them one
// depth a pass; without it (and radix) the sort was 10.5 million
// instructions on the Mooncake trace, most of them the insertion sorts'
// comparisons of the ids a conversation's turns share.
func (s *idSorter) common(a []int32, d int) (int, bool) {
	if d < 0 {
		b := s.bs[a[0]]
		for _, i := range a[1:] {
			if s.bs[i] != b {
				return d, false
			}
		}
		d = 0
	}
	x := s.ids[a[0]]
	x = x[min(d, len(x)):]
	m, ended := len(x), true // the common part; all end there so far
	for _, i := range a[1:] {
		y := s.ids[i]
		y = y[min(d, len(y)):]
		if n := commonPrefix(x[:m], y); n < m {
			if m, ended = n, false; m == 0 {
				return d, false
			}
		} else if len(y) > m {
			ended = false
		}
	}
	return d + m, ended && m == len(x)
}

// pivot returns the median of three requests' keys at depth d.
func (s *idSorter) pivot(a []int32, d int) idKey {
	x, y, z := s.key(a[0], d), s.key(a[len(a)/2], d), s.key(a[len(a)-1], d)
	if cmpKey(x, y) > 0 {
		x, y = y, x
	}
	if cmpKey(y, z) > 0 {
		y = z
		if cmpKey(x, y) > 0 {
			y = x
		}
	}
	return y
}

// insertion sorts a, equal below depth d, by insertion.
func (s *idSorter) insertion(a []int32, d int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && s.less(a[j], a[j-1], d); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// less reports whether request a comes before b, equal below depth d.
func (s *idSorter) less(a, b int32, d int) bool {
	if d < 0 {
		if s.bs[a] != s.bs[b] {
			return s.bs[a] < s.bs[b]
		}
		d = 0
	}
	x, y := s.ids[a], s.ids[b]
	if c := slices.Compare(x[min(d, len(x)):], y[min(d, len(y)):]); c != 0 {
		return c < 0
	}
	return a < b
}

// radix sorts a, equal below depth d, by their keys at depth d (the
// requests whose ids end there first, by index: they are the same ids),
// a least significant digit radix sort over the bytes where the keys
// differ, and each run of equal keys then from depth d+1.
func (s *idSorter) radix(a []int32, d int) {
	// The ended requests first, by index.
	e := 0
	for i, r := range a {
		if s.key(r, d).end {
			a[e], a[i] = a[i], a[e]
			e++
		}
	}
	slices.Sort(a[:e])
	rest := a[e:]
	n := len(rest)
	keys := slices.Grow(s.keys[:0], n)[:n]
	var diff uint64
	for i, r := range rest {
		keys[i] = uint64(s.key(r, d).v) ^ 1<<63 // in the order of the int64s
		diff |= keys[i] ^ keys[0]
	}
	keys2 := slices.Grow(s.keys2[:0], n)[:n]
	tmp := slices.Grow(s.tmp[:0], n)[:n]
	src, dst, ks, kd := rest, tmp, keys, keys2
	for shift := uint(0); shift < 64; shift += 8 {
		if diff>>shift&0xff == 0 {
			continue
		}
		var count [257]int
		for _, k := range ks {
			count[k>>shift&0xff+1]++
		}
		for b := 1; b < 257; b++ {
			count[b] += count[b-1]
		}
		for i, k := range ks {
			j := &count[k>>shift&0xff]
			dst[*j], kd[*j] = src[i], k
			*j++
		}
		src, dst, ks, kd = dst, src, kd, ks
	}
	if &src[0] != &rest[0] {
		copy(rest, src)
	}
	s.keys, s.keys2, s.tmp = keys, keys2, tmp
	// Each run of equal keys, one id deeper (the keys read again: a
	// deeper radix reuses the scratch).
	for lo := 0; lo < n; {
		k, hi := s.key(rest[lo], d).v, lo+1
		for hi < n && s.key(rest[hi], d).v == k {
			hi++
		}
		if hi-lo > 1 {
			s.sort(rest[lo:hi], d+1)
		}
		lo = hi
	}
}
