package kvcache

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// The index agrees with a map under random churn. Keys share
// fingerprints and home slots on purpose (few distinct low halves), so
// probe runs, backward shifts and fingerprint confirmation all happen.
func TestIndexChurn(t *testing.T) {
	for _, c := range []struct {
		n   int64
		low func(*rand.Rand) uint64
	}{
		{4, func(r *rand.Rand) uint64 { return uint64(r.IntN(8)) }},
		{1000, func(r *rand.Rand) uint64 { return uint64(r.IntN(8)) }},
		// One residue class (probeStride): its probe runs pass the
		// table's end into the next classes.
		{1000, func(r *rand.Rand) uint64 { return uint64(r.IntN(4) * probeStride) }},
	} {
		n := c.n
		x := newIndex(n)
		blocks := make([]uint64, n)
		var free []int32
		for b := range int32(n) {
			free = append(free, b)
		}
		ref := map[uint64]int32{}
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		keys := make([]uint64, 3*n)
		for i := range keys {
			// The fingerprint is the low half: many keys share one.
			keys[i] = uint64(i+1)<<32 | c.low(rng)
		}
		for step := range 200000 {
			h := keys[rng.IntN(len(keys))]
			b, in := ref[h]
			switch {
			case in && rng.IntN(2) == 0:
				x.del(h, b)
				blocks[b] = 0
				free = append(free, b)
				delete(ref, h)
			case !in && len(free) > 0:
				b := free[len(free)-1]
				x.add(h, b)
				free = free[:len(free)-1]
				blocks[b] = h
				ref[h] = b
			}
			if step%997 == 0 {
				for _, k := range keys {
					got, ok := x.get(k, blocks)
					want, wok := ref[k]
					if ok != wok || got != want {
						t.Fatalf("step %d key %#x: index %d %v, map %d %v", step, k, got, ok, want, wok)
					}
				}
				if x.n != len(ref) {
					t.Fatalf("n %d, map %d", x.n, len(ref))
				}
			}
		}
	}
}

// Duplicates: get returns the earliest added still present.
func TestIndexDuplicates(t *testing.T) {
	x := newIndex(8)
	blocks := make([]uint64, 8)
	const h, g = 0x1234, 0x1234 + 1<<40 // different hashes, one fingerprint
	for _, b := range []int32{3, 5, 6} {
		blocks[b] = h
		x.add(h, b)
	}
	blocks[4] = g
	x.add(g, 4)
	for _, c := range []struct {
		del  int32
		want int32
	}{{-1, 3}, {3, 5}, {6, 5}, {5, -1}} {
		if c.del >= 0 {
			x.del(h, c.del)
			blocks[c.del] = 0
		}
		b, ok := x.get(h, blocks)
		if c.want < 0 && ok || c.want >= 0 && b != c.want {
			t.Errorf("after deleting %d: get = %d %v, want %d", c.del, b, ok, c.want)
		}
	}
	if b, ok := x.get(g, blocks); !ok || b != 4 {
		t.Errorf("other key lost: %d %v", b, ok)
	}
}

// BenchmarkIndexChurn measures the index against a Go map under a
// replay's churn: the blocks of whole prefixes (Mooncake-like: 512-token
// trace blocks of 16-token engine blocks) are added in order and deleted
// oldest first, with a worker's worth of blocks (28,000, an H100's for
// Llama-3.1-8B) held at a time, across 16 workers' tables. The
// random-slots case gives every block a random home slot, as the index
// did before BlockHasher made a trace block's slots consecutive.
func BenchmarkIndexChurn(b *testing.B) {
	const workers, held, perReq = 16, 28_000, 750
	var keys [][]uint64   // per request
	for r := range 1000 { // more than the tables hold, so no key is added twice
		ids := make([]int64, perReq*16/512+1)
		for i := range ids {
			ids[i] = int64(r*1000 + i)
		}
		h := &BlockHasher{HashIDs: ids, TraceBlock: 512, PromptTokens: perReq * 16, EngineBlock: 16, Unique: uint64(r + 1), SharedIDs: len(ids)}
		keys = append(keys, chain(h, perReq))
	}
	scramble := func(x uint64) uint64 { return x ^ mix(x, 0, 5)&0xffffffff }
	run := func(b *testing.B, add func(w int, h uint64, blk int32), del func(w int, h uint64, blk int32), key func(uint64) uint64) {
		type held1 struct {
			w   int
			h   uint64
			blk int32
		}
		fifo := make([]held1, workers*held/2) // a ring of the blocks held, oldest first
		n, head := 0, 0
		next := int32(0)
		cpu0 := cpuTime()
		for i := 0; b.Loop(); i++ {
			w := i % workers
			for _, h := range keys[i%len(keys)] {
				h = key(h)
				if n == len(fifo) {
					d := fifo[head]
					del(d.w, d.h, d.blk)
					head, n = (head+1)%len(fifo), n-1
				}
				blk := next % held
				next++
				add(w, h, blk)
				fifo[(head+n)%len(fifo)] = held1{w, h, blk}
				n++
			}
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*perReq), "cpu-ns/block")
	}
	for _, c := range []struct {
		name string
		key  func(uint64) uint64
	}{{"consecutive-slots", func(h uint64) uint64 { return h }}, {"random-slots", scramble}} {
		b.Run("index/"+c.name, func(b *testing.B) {
			xs := make([]index, workers)
			for w := range xs {
				xs[w] = newIndex(held)
			}
			run(b, func(w int, h uint64, blk int32) { xs[w].add(h, blk) },
				func(w int, h uint64, blk int32) { xs[w].del(h, blk) }, c.key)
		})
		b.Run("map/"+c.name, func(b *testing.B) {
			ms := make([]map[uint64]int32, workers)
			for w := range ms {
				ms[w] = make(map[uint64]int32, held)
			}
			run(b, func(w int, h uint64, blk int32) { ms[w][h] = blk },
				func(w int, h uint64, _ int32) { delete(ms[w], h) }, c.key)
		})
	}
}

// cpuTime returns the CPU time (user + system) this process has used: the
// machines benchmarks run on are shared, and wall time measures the
// neighbours too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIndexMatchesReference and FuzzIndexMatchesReference drive the
// index through random adds and deletes of hashes with few distinct low
// halves (so probe runs of neighbouring homes merge, wrap past the
// table's end and pass between residue classes), several blocks per
// hash, against a plain list of entries in insertion order: get must
// return the earliest added block of a hash still present.
func TestIndexMatchesReference(t *testing.T) {
	for seed := range uint64(50) {
		indexMatchesReference(t, seed, seed*7+1, 3000)
	}
}

func FuzzIndexMatchesReference(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint16(500))
	f.Add(uint64(3), uint64(0), uint16(4000))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, ops uint16) {
		indexMatchesReference(t, s1, s2, int(ops))
	})
}

func indexMatchesReference(t *testing.T, s1, s2 uint64, ops int) {
	rng := rand.New(rand.NewPCG(s1, s2))
	n := int64(1 + rng.IntN(64))
	if rng.IntN(2) == 0 {
		n = 4 // a table of two rows: probe runs wrap often
	}
	x := newIndex(n)
	blocks := make([]uint64, n) // each block's hash, 0: none
	type ent struct {
		h uint64
		b int32
	}
	var ref []ent // entries in insertion order
	// Hashes: a few home slots near each other, the last row's (whose
	// probe runs go on in the next residue class) and one at random,
	// several high halves each.
	homes := []uint64{0, 1, 2, uint64(rng.IntN(int(x.mask + 1)))}
	for c := range uint64(probeStride) {
		homes = append(homes, x.mask-c)
	}
	key := func() uint64 {
		return uint64(1+rng.IntN(3))<<32 | homes[rng.IntN(len(homes))]
	}
	for op := range ops {
		if rng.IntN(2) == 0 || len(ref) == 0 {
			// Add to a free block, if there is one.
			b := int32(rng.Int64N(n))
			if blocks[b] != 0 {
				continue
			}
			h := key()
			x.add(h, b)
			blocks[b] = h
			ref = append(ref, ent{h, b})
		} else {
			i := rng.IntN(len(ref))
			e := ref[i]
			x.del(e.h, e.b)
			blocks[e.b] = 0
			ref = append(ref[:i], ref[i+1:]...)
		}
		for hi := uint64(1); hi <= 3; hi++ {
			for _, lo := range homes {
				h := hi<<32 | lo
				want, wok := int32(0), false
				for _, e := range ref {
					if e.h == h {
						want, wok = e.b, true
						break
					}
				}
				if got, ok := x.get(h, blocks); ok != wok || got != want {
					t.Fatalf("op %d: get(%#x) = %d, %v; the earliest added is %d, %v", op, h, got, ok, want, wok)
				}
			}
		}
		if x.n != len(ref) {
			t.Fatalf("op %d: %d entries, reference %d", op, x.n, len(ref))
		}
	}
}
