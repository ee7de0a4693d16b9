package numpyrand

import (
	"strconv"
	"strings"
	"testing"
)

// Draws printed by numpy 1.24 (Debian's python3-numpy):
//
//	g = np.random.Generator(np.random.PCG64(seed))
//	[int(g.bit_generator.random_raw()) for _ in range(2)]
//	g = np.random.Generator(np.random.PCG64(seed))
//	''.join(str(int(g.Choice([0,1,2,3]))) for _ in range(40)), then 40 of choice([0,1,2])
func TestPCG64(t *testing.T) {
	for _, c := range []struct {
		seed        uint64
		raw         [2]uint64
		four, three string
	}{
		{42, [2]uint64{14276969152011380360, 8095878257575067585}, "0321130200232323203121033213211002303312", "0221021222201110102222121021012010210012"},
		{0, [2]uint64{11749869230777074271, 4976686463289251617}, "3221100003232232222313201320323003020111", "1000021101211222122122212012211011220211"},
		{7, [2]uint64{11530976094092348043, 16550673365885938325}, "3223233001133013030131112131122223332213", "1020210010012122211101102000222021101210"},
		{1<<40 + 3, [2]uint64{14271435802380633900, 18370326226487632705}, "2313111030023232301230033123103001213202", "1001211001200010212201010220002111021102"},
	} {
		g := NewPCG64(c.seed)
		if a, b := g.Uint64(), g.Uint64(); a != c.raw[0] || b != c.raw[1] {
			t.Errorf("seed %d: raw %d %d, numpy %d %d", c.seed, a, b, c.raw[0], c.raw[1])
		}
		g = NewPCG64(c.seed)
		var four, three strings.Builder
		for range 40 {
			four.WriteString(strconv.Itoa(g.Choice(4)))
		}
		for range 40 {
			three.WriteString(strconv.Itoa(g.Choice(3)))
		}
		if four.String() != c.four || three.String() != c.three {
			t.Errorf("seed %d: choices\n%s %s\nnumpy\n%s %s", c.seed, four.String(), three.String(), c.four, c.three)
		}
	}
}
