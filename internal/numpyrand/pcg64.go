package numpyrand

import "math/bits"

// A PCG64 is numpy's Generator(PCG64(seed)) as far as Opal's router uses
// it (rng.choice over worker ids), so that an Opal-compatible replay
// routes every request to the worker Opal's router picked: its MaxPrefix
// policy never matches (opal-notes.md Q1) and falls through to this
// choice for every request.
//
// Seeding follows numpy's SeedSequence (pool of 4 uint32 words, hashmix
// and mix constants of numpy/random/bit_generator.pyx) and
// pcg64_set_seed; the generator is PCG's XSL-RR 128/64; choice(a) of a
// list draws integers(0, len(a)) with Lemire's method over 32-bit halves
// of the 64-bit outputs, low half first (random_bounded_uint64 with
// rng ≤ 2³²−1, pcg64_next32). TestNumpyPCG64 checks draws printed by
// numpy 1.24.
type PCG64 struct {
	hi, lo       uint64 // 128-bit state
	incHi, incLo uint64 // 128-bit increment (odd)
	half         uint32 // buffered high half of the last output
	hasHalf      bool
}

// SeedSequence constants (numpy/random/bit_generator.pyx).
const (
	ssInitA   = 0x43b0d7e5
	ssMultA   = 0x931e8875
	ssInitB   = 0x8b51f9dd
	ssMultB   = 0x58f38ded
	ssMixMulL = 0xca01f9dd
	ssMixMulR = 0x4973f715
	ssXShift  = 16
	ssPool    = 4
)

// seedSequenceState returns numpy's SeedSequence(seed).generate_state(n,
// uint64).
func seedSequenceState(seed uint64, n int) []uint64 {
	// The seed as little-endian uint32 words (at least one).
	var entropy []uint32
	for s := seed; ; s >>= 32 {
		entropy = append(entropy, uint32(s))
		if s>>32 == 0 {
			break
		}
	}
	hashConst := uint32(ssInitA)
	hashmix := func(v uint32) uint32 {
		v ^= hashConst
		hashConst *= ssMultA
		v *= hashConst
		v ^= v >> ssXShift
		return v
	}
	mix := func(x, y uint32) uint32 {
		r := ssMixMulL*x - ssMixMulR*y
		r ^= r >> ssXShift
		return r
	}
	var pool [ssPool]uint32
	for i := range pool {
		var e uint32
		if i < len(entropy) {
			e = entropy[i]
		}
		pool[i] = hashmix(e)
	}
	for src := range pool {
		for dst := range pool {
			if src != dst {
				pool[dst] = mix(pool[dst], hashmix(pool[src]))
			}
		}
	}
	for src := ssPool; src < len(entropy); src++ {
		for dst := range pool {
			pool[dst] = mix(pool[dst], hashmix(entropy[src]))
		}
	}
	words := make([]uint32, 2*n)
	hc := uint32(ssInitB)
	for i := range words {
		v := pool[i%ssPool]
		v ^= hc
		hc *= ssMultB
		v *= hc
		v ^= v >> ssXShift
		words[i] = v
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(words[2*i]) | uint64(words[2*i+1])<<32
	}
	return out
}

// pcgMultHi and pcgMultLo are PCG's 128-bit multiplier.
const (
	pcgMultHi = 0x2360ed051fc65da4
	pcgMultLo = 0x4385df649fccf645
)

// NewPCG64 returns Generator(PCG64(seed)).
func NewPCG64(seed uint64) *PCG64 {
	v := seedSequenceState(seed, 4)
	g := &PCG64{}
	// pcg_setseq_128_srandom_r: state 0, inc = initseq<<1 | 1, step,
	// state += initstate, step.
	g.incHi = v[2]<<1 | v[3]>>63
	g.incLo = v[3]<<1 | 1
	g.step()
	var c uint64
	g.lo, c = bits.Add64(g.lo, v[1], 0)
	g.hi, _ = bits.Add64(g.hi, v[0], c)
	g.step()
	return g
}

func (g *PCG64) step() {
	hi, lo := bits.Mul64(g.lo, pcgMultLo)
	hi += g.hi*pcgMultLo + g.lo*pcgMultHi
	var c uint64
	g.lo, c = bits.Add64(lo, g.incLo, 0)
	g.hi, _ = bits.Add64(hi, g.incHi, c)
}

// Uint64 is pcg64_random_r: step, then the XSL-RR output of the new state.
func (g *PCG64) Uint64() uint64 {
	g.step()
	return bits.RotateLeft64(g.hi^g.lo, -int(g.hi>>58))
}

// next32 is pcg64_next32: the low half of a new output, then its high half.
func (g *PCG64) next32() uint32 {
	if g.hasHalf {
		g.hasHalf = false
		return g.half
	}
	x := g.Uint64()
	g.half, g.hasHalf = uint32(x>>32), true
	return uint32(x)
}

// Choice returns an index into a list of n > 0 elements, as
// Generator.choice(list) picks one.
func (g *PCG64) Choice(n int) int {
	rng := uint32(n - 1)
	if rng == 0 {
		return 0
	}
	excl := uint64(rng) + 1
	m := uint64(g.next32()) * excl
	if uint32(m) < uint32(excl) {
		threshold := uint32((uint64(^uint32(0)) - uint64(rng)) % excl)
		for uint32(m) < threshold {
			m = uint64(g.next32()) * excl
		}
	}
	return int(m >> 32)
}
