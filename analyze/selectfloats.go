package analyze

import (
	"math/bits"
	"slices"
	"unsafe"
)

// selectSorted rearranges values (no NaN) so that each index in ranks
// (ascending, distinct, in [0, len(values))) holds the value a sort of
// them puts there, −0 before +0 as sortFloats orders them: a quickselect
// for all the ranks at once, with three-way partitions, for values that
// repeat (step times), in expected time linear in len(values). A bucket a
// summary by passes collects may hold a million values, of which it wants
// one or two; sorting them was a tenth of the replay's summary.
func selectSorted(values []float64, ranks []int64) {
	if len(values) == 0 || len(ranks) == 0 {
		return
	}
	// The float64s as order-preserving keys, in place (floatKey).
	keys := unsafe.Slice((*uint64)(unsafe.Pointer(&values[0])), len(values))
	for i, u := range keys {
		keys[i] = u ^ (uint64(int64(u)>>63) | 1<<63)
	}
	selectKeys(keys, 0, ranks, 2*bits.Len(uint(len(keys))))
	for i, u := range keys {
		keys[i] = u ^ (uint64(int64(^u)>>63) | 1<<63)
	}
}

// selectKeys puts at each rank of ranks (absolute positions; keys holds
// positions off to off+len(keys)) the key a sort puts there. Past depth
// levels of partitions (a pivot that keeps missing the middle) it sorts.
func selectKeys(keys []uint64, off int64, ranks []int64, depth int) {
	for len(ranks) > 0 {
		n := len(keys)
		if n <= 32 || depth == 0 {
			slices.Sort(keys)
			return
		}
		depth--
		p := median3(keys[0], keys[n/2], keys[n-1])
		// keys[:lt] < p, keys[lt:gt] == p, keys[gt:] > p.
		lt, i, gt := 0, 0, n
		for i < gt {
			switch k := keys[i]; {
			case k < p:
				keys[lt], keys[i] = k, keys[lt]
				lt++
				i++
			case k > p:
				gt--
				keys[i], keys[gt] = keys[gt], k
			default:
				i++
			}
		}
		a, _ := slices.BinarySearch(ranks, off+int64(lt))
		b, _ := slices.BinarySearch(ranks, off+int64(gt))
		selectKeys(keys[:lt], off, ranks[:a], depth)
		keys, off, ranks = keys[gt:], off+int64(gt), ranks[b:]
	}
}

func median3(a, b, c uint64) uint64 {
	if a > b {
		a, b = b, a
	}
	if b > c {
		b = c
	}
	return max(a, b)
}
