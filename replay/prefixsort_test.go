package replay

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// sortByIDsReference is sortByIDs's order by slices.SortFunc, comparing
// whole id lists.
func sortByIDsReference(order []int32, ids [][]int64, bs []int64) {
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(bs[a], bs[b]); c != 0 {
			return c
		}
		if c := slices.Compare(ids[a], ids[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// randomIDs returns n requests' ids drawn to share prefixes (turns of a
// few conversations, copies, prefixes of each other, empty lists, ids of
// any sign) and block sizes of a few values.
func randomIDs(rng *rand.Rand, n int) ([][]int64, []int64) {
	ids, bs := make([][]int64, n), make([]int64, n)
	for i := range ids {
		bs[i] = []int64{16, 512, 512, 512}[rng.IntN(4)]
		switch {
		case i > 0 && rng.IntN(3) == 0: // a prefix of an earlier one, extended
			p := ids[rng.IntN(i)]
			ids[i] = append(slices.Clone(p[:rng.IntN(len(p)+1)]), randomTail(rng)...)
		case i > 0 && rng.IntN(8) == 0: // a copy
			ids[i] = slices.Clone(ids[rng.IntN(i)])
		default:
			ids[i] = randomTail(rng)
		}
	}
	return ids, bs
}

func randomTail(rng *rand.Rand) []int64 {
	t := make([]int64, rng.IntN(6))
	for j := range t {
		t[j] = int64(rng.IntN(5)) - 2
		if rng.IntN(4) == 0 {
			t[j] = rng.Int64() - 1<<62
		}
	}
	return t
}

func TestSortByIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := rng.IntN(200)
		if round%10 == 0 { // radix's sizes (radixMin)
			n = radixMin + rng.IntN(4000)
		}
		ids, bs := randomIDs(rng, n)
		got, want := make([]int32, n), make([]int32, n)
		for i := range got {
			got[i] = int32(i)
		}
		rng.Shuffle(n, func(i, j int) { got[i], got[j] = got[j], got[i] })
		copy(want, got)
		sortByIDs(got, ids, bs)
		sortByIDsReference(want, ids, bs)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: sortByIDs gave %v, want %v", round, got, want)
		}
	}
}

// mooncakeIDs returns the Mooncake conversation trace's requests' ids and
// block sizes, and their indices.
func mooncakeIDs(tb testing.TB) ([][]int64, []int64, []int32) {
	reqs := readMooncake(tb, shareddata.Path(tb, "traces/mooncake/conversation_trace.jsonl"))
	ids, bs, order := make([][]int64, len(reqs)), make([]int64, len(reqs)), make([]int32, len(reqs))
	for i, r := range reqs {
		ids[i], bs[i], order[i] = r.HashIDs, r.BlockSize.Or(0), int32(i)
	}
	return ids, bs, order
}

func TestSortByIDsMooncake(t *testing.T) {
	ids, bs, order := mooncakeIDs(t)
	want := slices.Clone(order)
	sortByIDs(order, ids, bs)
	sortByIDsReference(want, ids, bs)
	if !slices.Equal(order, want) {
		t.Fatal("sortByIDs's order differs from slices.SortFunc's on the Mooncake conversation trace")
	}
}

// BenchmarkSortByIDs compares sortByIDs with slices.SortFunc comparing
// whole id lists, on the Mooncake conversation trace's 12,031 requests in
// their arrival order.
func BenchmarkSortByIDs(b *testing.B) {
	ids, bs, order := mooncakeIDs(b)
	for _, c := range []struct {
		name string
		sort func([]int32, [][]int64, []int64)
	}{{"multikey", sortByIDs}, {"slices.SortFunc", sortByIDsReference}} {
		b.Run(c.name, func(b *testing.B) {
			a := make([]int32, len(order))
			for b.Loop() {
				copy(a, order)
				c.sort(a, ids, bs)
			}
		})
	}
}

// FuzzSortByIDs checks sortByIDs against slices.SortFunc on requests
// drawn from the fuzzer's bytes: each byte below 0xf0 an id (small, so
// that prefixes are shared), 0xf0–0xfd a request's end (its block size
// from the byte), 0xfe a large id, 0xff a negative one.
func FuzzSortByIDs(f *testing.F) {
	f.Add([]byte{1, 2, 0xf0, 1, 2, 3, 0xf0, 1, 0xf1, 0xf0, 1, 2, 0xf0})
	f.Add(bytes300())
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids [][]int64
		var bs []int64
		var cur []int64
		for _, c := range data {
			switch {
			case c < 0xf0:
				cur = append(cur, int64(c%7))
			case c == 0xfe:
				cur = append(cur, 1<<40+int64(len(cur)))
			case c == 0xff:
				cur = append(cur, -1<<40-int64(len(cur)))
			default:
				ids, bs = append(ids, cur), append(bs, int64(c&3))
				cur = nil
			}
		}
		got := make([]int32, len(ids))
		for i := range got {
			got[i] = int32(len(ids) - 1 - i)
		}
		want := slices.Clone(got)
		sortByIDs(got, ids, bs)
		sortByIDsReference(want, ids, bs)
		if !slices.Equal(got, want) {
			t.Fatalf("sortByIDs gave %v, want %v (ids %v, bs %v)", got, want, ids, bs)
		}
	})
}

// bytes300 is a seed of 300 short requests: radix's sizes.
func bytes300() []byte {
	var b []byte
	for i := range 300 {
		b = append(b, byte(i%5), byte(i%3), byte(i%11), byte(0xf0+i%4))
	}
	return b
}
