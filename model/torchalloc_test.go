package model

import "testing"

// The caching allocator's segments, by hand: a large tensor is rounded up
// to 2 MiB and a remainder over 1 MiB serves a later request; tensors of
// 1–10 MiB share 20 MiB segments; small ones share 2 MiB segments; sizes
// round up to 512 bytes.
func TestTorchReserved(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name  string
		sizes []int64
		want  int64
	}{
		{"17.5 MiB", []int64{35 * mb / 2}, 18 * mb},
		{"12.5 MiB then 1.2 MiB in its remainder", []int64{25 * mb / 2, 12 * mb / 10}, 14 * mb},
		{"remainder of exactly 1 MiB not split", []int64{35 * mb, 2 * mb}, 36*mb + 20*mb},
		{"five of 5 MiB", []int64{5 * mb, 5 * mb, 5 * mb, 5 * mb, 5 * mb}, 40 * mb},
		{"small ones", []int64{100, 100, 100}, 2 * mb},
		{"4,097 of 300 bytes, 512 each: one more than a small segment holds", smallTensors(4097), 4 * mb},
		{"exact", []int64{20 * mb}, 20 * mb},
	} {
		if got := torchReserved(c.sizes); got != c.want {
			t.Errorf("%s: %d bytes reserved, want %d", c.name, got, c.want)
		}
	}
}

func smallTensors(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 300
	}
	return s
}
