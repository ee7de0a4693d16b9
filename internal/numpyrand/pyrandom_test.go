package numpyrand

import (
	"math"
	"testing"
)

// Values CPython 3.11 prints after random.seed(s): getrandbits(32) three
// times, randrange of 17, 20, 1, 1000 and 2³¹+3, random() and
// expovariate(20), in that order (a seed above 2³² has two key words):
// every draw but the logarithm bit for bit.
func TestPythonStream(t *testing.T) {
	for _, c := range []struct {
		seed   uint64
		bits   [3]uint32
		below  [5]uint32
		random float64
		expo   float64
	}{
		{42, [3]uint32{2746317213, 478163327, 107420369}, [5]uint32{8, 7, 0, 142, 440213415}, 0.6766994874229113, 0.11136440497756903},
		{1, [3]uint32{577090037, 2444712010, 3639700191}, [5]uint32{2, 8, 0, 507, 1930549411}, 0.47224524357611664, 0.023870769294892336},
		{7, [3]uint32{1390851128, 4071050724, 647892279}, [5]uint32{12, 1, 0, 840, 404285457}, 0.36568891691258554, 0.0029874431489150506},
		{0, [3]uint32{3626764237, 1654615998, 3255389356}, [5]uint32{13, 1, 0, 988, 2087043557}, 0.4049341374504143, 0.07657724237973415},
		{1<<40 + 5, [3]uint32{2166296868, 2220160828, 1153647273}, [5]uint32{0, 16, 0, 169, 341540259}, 0.7965159328009259, 0.007185375461626997},
	} {
		g := NewPython(c.seed)
		for i, want := range c.bits {
			if got := g.Bits(32); got != want {
				t.Errorf("seed %d: getrandbits #%d = %d, want %d", c.seed, i, got, want)
			}
		}
		for i, n := range []uint32{17, 20, 1, 1000, 1<<31 + 3} {
			if got := g.Below(n); got != c.below[i] {
				t.Errorf("seed %d: randrange(%d) = %d, want %d", c.seed, n, got, c.below[i])
			}
		}
		if got := g.Float64(); got != c.random {
			t.Errorf("seed %d: random() = %.17g, want %.17g", c.seed, got, c.random)
		}
		// Go's math.Log and the C library's log may differ in the last
		// place (seed 42's does): one part in 10¹⁵ is allowed.
		if got := g.Expovariate(20); math.Abs(got-c.expo) > 1e-15*c.expo {
			t.Errorf("seed %d: expovariate(20) = %.17g, want %.17g", c.seed, got, c.expo)
		}
	}
}
