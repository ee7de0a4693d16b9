package analyze

import (
	"math/rand/v2"
	"testing"
)

// TestPairwiseStreamEqualsPairwiseSum feeds values one at a time and
// checks the streamed sum is bit-identical to numpy's pairwise sum of the
// slice, for sizes around every split boundary.
func TestPairwiseStreamEqualsPairwiseSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 7, 8, 9, 127, 128, 129, 130, 255, 256, 257, 1000, 1023, 1024, 1025, 4099, 65536 + 13, 300001}
	for _, n := range sizes {
		x := make([]float64, n)
		for i := range x {
			// Magnitudes spread over many orders so that the order of
			// additions shows in the last bits.
			x[i] = rng.ExpFloat64() * float64(int64(1)<<rng.IntN(40))
		}
		s := newPairwiseStream(n)
		for _, v := range x {
			s.Add(v)
		}
		got, ok := s.Sum()
		if !ok {
			t.Fatalf("n=%d: sum not done after n values", n)
		}
		want := pairwiseSum(x)
		if got != want {
			t.Errorf("n=%d: streamed %v, pairwiseSum %v", n, got, want)
		}
		// The same values in slices of random lengths (0 to 300),
		// mixed with single values.
		s = newPairwiseStream(n)
		for rest := x; len(rest) > 0; {
			k := min(len(rest), rng.IntN(301))
			if k == 1 {
				s.Add(rest[0])
			} else {
				s.AddSlice(rest[:k])
			}
			rest = rest[k:]
		}
		if got, ok := s.Sum(); !ok || got != want {
			t.Errorf("n=%d: streamed in slices %v (done %v), pairwiseSum %v", n, got, ok, want)
		}
		if n > 300 {
			naive := 0.0
			for _, v := range x {
				naive += v
			}
			if naive == got {
				t.Logf("n=%d: naive sum happens to equal the pairwise sum", n)
			}
		}
	}
}
