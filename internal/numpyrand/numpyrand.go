// Package numpyrand draws the numbers numpy's legacy global generator
// (numpy.random.seed, numpy.random.gamma, numpy.random.exponential) draws,
// bit for bit, so that workloads a Python benchmark generated from a
// recorded seed can be generated again: vLLM's benchmark_serving.py seeds
// numpy with --seed and draws each gap between requests from it.
//
// It implements the Mersenne Twister MT19937 (Matsumoto and Nishimura,
// 1998) with numpy's integer seeding (init_genrand), numpy's 53-bit
// doubles from two 32-bit outputs, and the legacy standard exponential
// −log(1 − U), which numpy's legacy gamma with shape 1 and exponential
// both use.
//
// It also implements numpy's Generator(PCG64(seed)) as far as choosing
// from a list (pcg64.go), which Opal's router draws from, and Python's
// random module (pyrandom.go: the same MT19937 seeded another way), which
// SGLang's multi-turn benchmark draws its sends from.
package numpyrand

import "math"

const (
	n         = 624
	m         = 397
	matrixA   = 0x9908b0df
	upperMask = 0x80000000
	lowerMask = 0x7fffffff
)

// A Legacy is numpy's legacy RandomState: numpy.random.seed(seed) and the
// draws after it.
type Legacy struct {
	mt  [n]uint32
	pos int
}

// NewLegacy returns the state numpy.random.seed(seed) sets.
func NewLegacy(seed uint32) *Legacy {
	g := &Legacy{}
	g.mt[0] = seed
	for i := 1; i < n; i++ {
		g.mt[i] = 1812433253*(g.mt[i-1]^(g.mt[i-1]>>30)) + uint32(i)
	}
	g.pos = n
	return g
}

// Uint32 returns the next 32-bit output.
func (g *Legacy) Uint32() uint32 {
	if g.pos >= n {
		for i := range n {
			y := g.mt[i]&upperMask | g.mt[(i+1)%n]&lowerMask
			v := g.mt[(i+m)%n] ^ y>>1
			if y&1 != 0 {
				v ^= matrixA
			}
			g.mt[i] = v
		}
		g.pos = 0
	}
	y := g.mt[g.pos]
	g.pos++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// Float64 returns numpy.random.random_sample(): a 53-bit double in [0, 1).
func (g *Legacy) Float64() float64 {
	a, b := g.Uint32()>>5, g.Uint32()>>6
	return (float64(a)*67108864 + float64(b)) / 9007199254740992
}

// StandardExponential returns numpy's legacy standard_exponential().
func (g *Legacy) StandardExponential() float64 {
	return -math.Log(1 - g.Float64())
}

// Exponential returns numpy.random.exponential(scale), which is also
// numpy.random.gamma(shape=1, scale=scale).
func (g *Legacy) Exponential(scale float64) float64 {
	return scale * g.StandardExponential()
}

// Randint returns one element of numpy.random.randint(low, high, size):
// an integer in [low, high), drawn as numpy's legacy generator draws each
// element of an array (random_bounded_uint64_fill with masked rejection:
// a 32-bit output masked to the smallest all-ones mask covering
// high−1−low, drawn again while above it; a range of one value draws
// nothing; ranges wider than 32 bits take two outputs, high word first).
// It panics unless low < high.
func (g *Legacy) Randint(low, high int64) int64 {
	if low >= high {
		panic("numpyrand: Randint: low >= high")
	}
	rng := uint64(high - 1 - low)
	if rng == 0 {
		return low
	}
	mask := rng
	for s := uint(1); s < 64; s <<= 1 {
		mask |= mask >> s
	}
	switch {
	case rng == math.MaxUint32:
		return low + int64(g.Uint32())
	case rng < math.MaxUint32:
		for {
			if v := uint64(g.Uint32()) & mask; v <= rng {
				return low + int64(v)
			}
		}
	}
	for {
		v := uint64(g.Uint32())<<32 | uint64(g.Uint32())
		if v &= mask; v <= rng {
			return low + int64(v)
		}
	}
}
