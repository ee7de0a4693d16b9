package analyze

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortFloatsAsSlicesSort sorts random slices of every shape the
// summaries meet (latencies of one or many orders of magnitude, repeated
// step times, negatives, infinities, subnormals, lengths on both sides of
// radixMin) and checks the result bit for bit against slices.Sort.
func TestSortFloatsAsSlicesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func() float64{
		"latency": func() float64 { return 0.005 + rng.Float64()*0.03 },
		"decades": func() float64 { return math.Exp(rng.NormFloat64() * 5) },
		"steps":   func() float64 { return []float64{0.0123, 0.0125, 0.02, 1.5}[rng.IntN(4)] },
		"signed":  func() float64 { return rng.NormFloat64() * 1e3 },
		"extremes": func() float64 {
			return []float64{math.Inf(1), math.Inf(-1), math.MaxFloat64, -math.MaxFloat64,
				math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 0, 1, -1}[rng.IntN(9)]
		},
		"mixed": func() float64 {
			if rng.IntN(10) == 0 {
				return math.Inf(1 - 2*rng.IntN(2))
			}
			return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		},
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 7, radixMin - 1, radixMin, radixMin + 1, 100_003} {
			got := make([]float64, n)
			for i := range got {
				got[i] = gen()
			}
			want := slices.Clone(got)
			slices.Sort(want)
			sortFloats(got)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s, n=%d: [%d] = %v, slices.Sort has %v", name, n, i, got[i], want[i])
				}
			}
		}
	}
}

// TestSortFloatsSignedZeros: −0 and +0 compare equal, so slices.Sort
// leaves their relative order open; sortFloats, sorting by bits, puts −0
// first.
func TestSortFloatsSignedZeros(t *testing.T) {
	n := 2 * radixMin
	v := make([]float64, n)
	for i := range v {
		v[i] = []float64{math.Copysign(0, -1), 0, -2, 3}[i%4]
	}
	sortFloats(v)
	for i, x := range v {
		want := []float64{-2, math.Copysign(0, -1), 0, 3}[i/(n/4)]
		if math.Float64bits(x) != math.Float64bits(want) {
			t.Fatalf("[%d] = %v, want %v", i, x, want)
		}
	}
}

func BenchmarkSortFloats(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float64, 3_600_000)
	for i := range src {
		src[i] = 0.005 + rng.ExpFloat64()*0.02
	}
	v := make([]float64, len(src))
	for _, sorter := range []struct {
		name string
		sort func([]float64)
	}{{"radix", sortFloats}, {"slices.Sort", slices.Sort[[]float64]}} {
		b.Run(sorter.name, func(b *testing.B) {
			for b.Loop() {
				copy(v, src)
				sorter.sort(v)
			}
		})
	}
}
