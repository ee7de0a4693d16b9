package analyze

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// A valueCounts counts the distinct values of a pool of float64s by their
// bits, in an open-addressing hash table, for a pool whose values repeat:
// the pooled ITL gaps of a simulated run are step times that every request
// in the batch shares (a replay of the Mooncake conversation trace pools
// 4,110,017 gaps of 222,583 distinct values). Sorting the distinct values
// and writing each as many times as it was counted gives what sortFloats
// gives for the whole pool, bit for bit, for less work than sorting the
// pool (BenchmarkITLDist). A pool whose values hardly repeat (measured
// latencies at nanosecond resolution) would only fill the table: counting
// gives up (overflow) once the table holds more distinct values than a
// quarter of the values counted, and the pool is sorted instead.
//
// Note: values are keyed by their bits, so −0 and +0 are two values, −0
// first, as sortFloats orders them; NaN is not expected (NewDist's rule).
type valueCounts struct {
	slots    []countSlot // len a power of two; count 0 marks a free slot
	shift    uint        // 64 − log2(len(slots)): the hash's top bits index the table
	distinct int
	total    int
	overflow bool // too few repeats: counting stopped
}

type countSlot struct {
	bits  uint64
	count int
}

// Counting starts with minCountSlots slots and gives up only past
// giveUpDistinct distinct values: below that, the table is small enough
// to be cheap whatever the repeats.
const (
	minCountSlots  = 1 << 12
	giveUpDistinct = 1 << 16
)

// addAll counts vs.
func (c *valueCounts) addAll(vs []float64) {
	if c.overflow {
		return
	}
	if c.slots == nil {
		c.resize(minCountSlots)
	}
	c.total += len(vs)
	for _, v := range vs {
		c.add(math.Float64bits(v), 1)
		if 2*c.distinct > len(c.slots) && !c.grow() {
			return
		}
	}
}

// add counts n more of the value with bits u.
func (c *valueCounts) add(u uint64, n int) {
	mask := uint64(len(c.slots) - 1)
	// Fibonacci hashing: the multiply spreads values that differ only
	// in their low mantissa bits (neighbouring step times) over the table.
	i := (u * 0x9E3779B97F4A7C15) >> c.shift
	for {
		s := &c.slots[i]
		if s.bits == u && s.count != 0 {
			s.count += n
			return
		}
		if s.count == 0 {
			s.bits, s.count = u, n
			c.distinct++
			return
		}
		i = (i + 1) & mask
	}
}

// grow doubles the table, or gives up counting (and frees it) when the
// values repeat too little; it reports whether counting goes on.
func (c *valueCounts) grow() bool {
	if c.distinct >= giveUpDistinct && 4*c.distinct > c.total {
		*c = valueCounts{overflow: true}
		return false
	}
	old := c.slots
	c.resize(2 * len(old))
	c.distinct = 0
	for _, s := range old {
		if s.count != 0 {
			c.add(s.bits, s.count)
		}
	}
	return true
}

func (c *valueCounts) resize(n int) {
	c.slots = make([]countSlot, n)
	c.shift = uint(64 - bits.TrailingZeros(uint(n)))
}

// sorted writes the counted values into dst (len total) in ascending
// order, each as many times as it was counted.
func (c *valueCounts) sorted(dst []float64) {
	// Compact the table, with each value's bits made order-preserving
	// as unsigned integers (floatKey), and sort the distinct values.
	ds := make([]countSlot, 0, c.distinct)
	for _, s := range c.slots {
		if s.count != 0 {
			ds = append(ds, countSlot{floatKey(math.Float64frombits(s.bits)), s.count})
		}
	}
	ds = sortSlots(ds)
	i := 0
	for _, s := range ds {
		v := keyFloat(s.bits)
		for k := range s.count {
			dst[i+k] = v
		}
		i += s.count
	}
}

// sortSlots sorts slots by bits, as sortFloats sorts values: by a
// least-significant-digit radix sort on bytes, skipping the bytes every
// key shares, below radixMin by slices.SortFunc. It returns the sorted
// slice, ds or its scratch copy.
func sortSlots(ds []countSlot) []countSlot {
	n := len(ds)
	if n < radixMin {
		slices.SortFunc(ds, func(a, b countSlot) int { return cmp.Compare(a.bits, b.bits) })
		return ds
	}
	const passes = (64 + radixBits - 1) / radixBits
	const buckets = 1 << radixBits
	var counts [passes][buckets]int
	for _, s := range ds {
		for p := range passes {
			counts[p][(s.bits>>(p*radixBits))&(buckets-1)]++
		}
	}
	src, dst := ds, make([]countSlot, n)
	for p := range passes {
		c := &counts[p]
		shift := uint(p * radixBits)
		if c[(src[0].bits>>shift)&(buckets-1)] == n {
			continue
		}
		sum := 0
		for b := range c {
			sum, c[b] = sum+c[b], sum
		}
		for _, s := range src {
			d := (s.bits >> shift) & (buckets - 1)
			dst[c[d]] = s
			c[d]++
		}
		src, dst = dst, src
	}
	return src
}
