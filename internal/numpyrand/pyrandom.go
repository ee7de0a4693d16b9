package numpyrand

import (
	"math"
	"math/bits"
)

// A Python is the generator of Python's random module (random.seed(n),
// random.randrange, random.expovariate and the draws after them): the
// same MT19937 as numpy's legacy generator and the same 53-bit doubles,
// but seeded from an integer by the reference implementation's
// init_by_array over the integer's 32-bit words, as CPython does, so its
// stream differs from numpy.random.seed(n)'s. SGLang's
// benchmark/hicache/bench_multiturn.py draws from it which client it
// sends next and how long it sleeps before the next send.
type Python struct {
	Legacy
}

// NewPython returns the state random.seed(seed) sets.
func NewPython(seed uint64) *Python {
	key := []uint32{uint32(seed)}
	if hi := uint32(seed >> 32); hi != 0 {
		key = append(key, hi)
	}
	g := &Python{Legacy: *NewLegacy(19650218)}
	mt := &g.mt
	i, j := 1, 0
	for range max(n, len(key)) {
		mt[i] = (mt[i] ^ (mt[i-1]^mt[i-1]>>30)*1664525) + key[j] + uint32(j)
		i++
		j++
		if i >= n {
			mt[0] = mt[n-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for range n - 1 {
		mt[i] = (mt[i] ^ (mt[i-1]^mt[i-1]>>30)*1566083941) - uint32(i)
		i++
		if i >= n {
			mt[0] = mt[n-1]
			i = 1
		}
	}
	mt[0] = 0x80000000 // the state's top bit set: never all zero
	return g
}

// Bits returns random.getrandbits(k) for 1 ≤ k ≤ 32: the top k bits of
// the next output.
func (g *Python) Bits(k int) uint32 {
	return g.Uint32() >> (32 - k)
}

// Below returns random.randrange(n) for 1 ≤ n < 2³²: getrandbits of n's
// bit length, drawn again until it is below n (so randrange(1) draws
// too).
func (g *Python) Below(n uint32) uint32 {
	k := bits.Len32(n)
	r := g.Bits(k)
	for r >= n {
		r = g.Bits(k)
	}
	return r
}

// Expovariate returns random.expovariate(lambd): −log(1 − random()) / lambd
// (to the last place of Go's math.Log, which may differ from the C
// library's by one unit there).
func (g *Python) Expovariate(lambd float64) float64 {
	return -math.Log(1-g.Float64()) / lambd
}
