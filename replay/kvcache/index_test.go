package kvcache

import (
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The index agrees with a map under random churn. Hashes share groups
// and groups share home slots on purpose (few distinct keys, their bits
// above the group's few), and blocks are mostly taken next to the last
// one, so entries hold several members on ascending and descending
// lines, and probe runs, backward shifts and entries of one key all
// happen.
func TestIndexChurn(t *testing.T) {
	for _, c := range []struct {
		n    int64
		home func(*rand.Rand) uint64
	}{
		{4, func(r *rand.Rand) uint64 { return uint64(r.IntN(8)) }},
		{1000, func(r *rand.Rand) uint64 { return uint64(r.IntN(8)) }},
		{1000, func(r *rand.Rand) uint64 { return uint64(r.IntN(1 << 20)) }},
	} {
		n := c.n
		x := newIndex(n)
		blocks := make([]uint64, n)
		ref := map[uint64]int32{}
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		keys := make([]uint64, 3*n)
		for i := range keys {
			// Few home slots: many keys share one.
			k := uint64(i+1)<<40 | c.home(rng)<<5
			keys[i] = k + uint64(rng.IntN(groupLen))*contStep
		}
		b := int32(0)
		for step := range 200000 {
			h := keys[rng.IntN(len(keys))]
			old, in := ref[h]
			switch {
			case in && rng.IntN(2) == 0:
				x.del(h, old)
				blocks[old] = 0
				delete(ref, h)
			case !in:
				// Next to the last block taken, or anywhere.
				if rng.IntN(4) == 0 {
					b = int32(rng.Int64N(n))
				} else {
					b = (b + int32(1-2*rng.IntN(2)) + int32(n)) % int32(n)
				}
				if blocks[b] != 0 {
					continue
				}
				x.add(h, b)
				blocks[b] = h
				ref[h] = b
			}
			if step%997 == 0 {
				for _, k := range keys {
					got, ok := x.get(k)
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

// Duplicates: get returns the earliest added still present, also when
// later copies joined an entry of their key and earlier ones did not.
func TestIndexDuplicates(t *testing.T) {
	x := newIndex(16)
	k := uint64(0x1220 << 5) // a key: its low five bits 0
	h1 := k + contStep       // member 1 of it
	h := h1 + contStep       // member 2
	g := k + 1<<40           // another key, of the same home slot
	for _, b := range []int32{3, 5, 6} {
		x.add(h, b)
	}
	x.add(g, 4)
	// Block 7 is member 1 on block 6's line (descending: 6 is member
	// 2): it joins the key's last entry.
	x.add(h1, 7)
	for _, c := range []struct {
		del  int32
		want int32
	}{{-1, 3}, {3, 5}, {6, 5}, {5, -1}} {
		if c.del >= 0 {
			x.del(h, c.del)
		}
		b, ok := x.get(h)
		if c.want < 0 && ok || c.want >= 0 && b != c.want {
			t.Errorf("after deleting %d: get = %d %v, want %d", c.del, b, ok, c.want)
		}
	}
	if b, ok := x.get(g); !ok || b != 4 {
		t.Errorf("other key lost: %d %v", b, ok)
	}
	if b, ok := x.get(h1); !ok || b != 7 {
		t.Errorf("joined member lost: %d %v", b, ok)
	}
}

// Growth: the table starts at an eighth of its largest size (a slot per
// four blocks) when that is below startSlots, and doubles once it would
// be more than half full, up to two slots per block; each key's
// entries keep their order across it (get still returns the earliest
// copy), also for probe runs that wrap past the table's end, and entries
// and blocks are counted as before.
func TestIndexGrows(t *testing.T) {
	const n = 256 // blocks: 64 slots to start, 512 at most
	// Homes 63, 127, 255 and 511: probe runs that wrap past the end
	// before the table grows, and after.
	for _, home := range []uint64{0, 63, 127, 255, 511} {
		x := newIndex(n)
		if len(x.slots) != n/4 || x.most != 2*n {
			t.Fatalf("a table of %d slots growing to %d, want %d and %d", len(x.slots), x.most, n/4, 2*n)
		}
		k := home << 5 // a key of that home slot in every size
		c := contStep
		h := k + 2*c
		var ref []int32 // h's blocks, earliest first
		for b := int32(0); b < n; b++ {
			switch {
			case b%3 == 0: // a copy of h, on no line with the last
				x.add(h, b)
				ref = append(ref, b)
			default: // a key of its own, of the same home slot
				x.add(home<<5|uint64(b)<<40, b)
			}
			if x.used > x.limit || x.limit > len(x.slots)/2 && len(x.slots) < int(x.most) {
				t.Fatalf("block %d: %d entries in %d slots (limit %d)", b, x.used, len(x.slots), x.limit)
			}
		}
		if len(x.slots) != 2*n {
			t.Fatalf("home %d: %d entries in %d slots: did not grow", home, x.used, len(x.slots))
		}
		if x.n != n || x.used != n {
			t.Fatalf("home %d: %d blocks, %d entries, want %d each", home, x.n, x.used, n)
		}
		for len(ref) > 0 {
			if b, ok := x.get(h); !ok || b != ref[0] {
				t.Fatalf("home %d: get = %d %v, want %d (earliest)", home, b, ok, ref[0])
			}
			x.del(h, ref[0])
			ref = ref[1:]
		}
		if _, ok := x.get(h); ok {
			t.Fatalf("home %d: a deleted hash found", home)
		}
	}
}

// Keys: the low five bits are the member, the key the rest, and a
// group's hashes are its key stepped by contStep.
func TestKeyOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		h := rng.Uint64()
		k, j := keyOf(h)
		if k&(groupLen-1) != 0 || k+uint64(j)*contStep != h {
			t.Fatalf("keyOf(%#x) = %#x, %d", h, k, j)
		}
		if uint32(h)&(groupLen-1) != groupLen-1 && uint32(h) != math.MaxUint32 {
			if k2, j2 := keyOf(step(h)); k2 != k || j2 != j+1 {
				t.Fatalf("step(%#x) is not the next member: %#x, %d", h, k2, j2)
			}
		}
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
// index through random adds and deletes of hashes of few keys (of a few
// home slots near each other and the table's last, so probe runs merge
// and wrap past the table's end), blocks mostly next to the last one
// taken (so entries hold lines of members, both ways), several blocks
// per hash, against a plain list of entries in insertion order: get
// must return the earliest added block of a hash still present.
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
		n = 4 // a table of eight slots: probe runs wrap often
	}
	x := newIndex(n)
	blocks := make([]uint64, n) // each block's hash, 0: none
	type ent struct {
		h uint64
		b int32
	}
	var ref []ent // entries in insertion order
	homes := []uint64{0, 1, 2, x.mask - 1, x.mask, uint64(rng.IntN(int(x.mask + 1)))}
	var keys []uint64
	for hi := uint64(1); hi <= 3; hi++ {
		for _, lo := range homes {
			keys = append(keys, hi<<40|lo<<5)
		}
	}
	b := int32(0)
	for op := range ops {
		if rng.IntN(2) == 0 || len(ref) == 0 {
			// Add to a free block, if there is one: next to the
			// last one, or anywhere.
			if rng.IntN(3) == 0 {
				b = int32(rng.Int64N(n))
			} else {
				b = (b + int32(1-2*rng.IntN(2)) + int32(n)) % int32(n)
			}
			if blocks[b] != 0 {
				continue
			}
			h := keys[rng.IntN(len(keys))] + uint64(rng.IntN(groupLen))*contStep
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
		for _, k := range keys {
			for j := range uint64(groupLen) {
				h := k + j*contStep
				want, wok := int32(0), false
				for _, e := range ref {
					if e.h == h {
						want, wok = e.b, true
						break
					}
				}
				if got, ok := x.get(h); ok != wok || got != want {
					t.Fatalf("op %d: get(%#x) = %d, %v; the earliest added is %d, %v", op, h, got, ok, want, wok)
				}
			}
		}
		if x.n != len(ref) {
			t.Fatalf("op %d: %d entries, reference %d", op, x.n, len(ref))
		}
	}
}

// contBack is 2·slotRun−1 times contStep, wrapped: from a group's last
// member back to member 0 of the key slotRun steps below its own.
func TestContBack(t *testing.T) {
	if x, c := uint64(2*slotRun-1), contStep; contBack != x*c {
		t.Errorf("contBack = %#x, want %#x", contBack, x*c)
	}
}

// chainMembers, which compares a group's last hash only, says what
// nextMembers says on every member 0 of chains' hashes: from trace and
// engine block sizes that start trace blocks at and inside groups, with
// private tails (a private run starting inside a group), and spliced as a
// router's promotion splices them (one request's chain, then another's
// hasher from its last hash on, prefixlazy's raise).
func TestChainMembersIsNextMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	whole, parts := 0, 0
	for range 3000 {
		sz := []struct{ tb, eb int64 }{{512, 16}, {128, 4}, {64, 8}, {48, 16}, {16, 16}, {100, 3}, {40, 1}}[rng.IntN(7)]
		ids := make([]int64, 1+rng.IntN(12))
		for i := range ids {
			ids[i] = int64(rng.IntN(3))
		}
		prompt := int64(len(ids))*sz.tb - rng.Int64N(sz.tb)
		h := BlockHasher{HashIDs: ids, TraceBlock: sz.tb, PromptTokens: prompt, EngineBlock: sz.eb,
			Unique: rng.Uint64(), SharedIDs: rng.IntN(len(ids) + 1)}
		var ch Chain
		ch.Reset(h)
		n := prompt/sz.eb + rng.Int64N(3*groupLen)
		hs := slices.Clone(ch.Hashes(0, n))
		if rng.IntN(2) == 0 && n > 1 {
			// Spliced: another request's hasher after block m.
			o := h
			o.Unique, o.SharedIDs = rng.Uint64(), rng.IntN(len(ids)+1)
			m := 1 + rng.Int64N(n-1)
			for k := m; k < n; k++ {
				hs[k], _ = o.Hash(hs[k-1], k)
			}
		}
		for x := 0; x+groupLen <= len(hs); x++ {
			if _, j := keyOf(hs[x]); j != 0 {
				continue
			}
			g := (*[groupLen - 1]uint64)(hs[x+1 : x+groupLen])
			want := nextMembers(g, hs[x])
			if got := chainMembers(g, hs[x]); got != want {
				t.Fatalf("trace block %d, engine block %d, block %d of %d: chainMembers %v, nextMembers %v", sz.tb, sz.eb, x, n, got, want)
			}
			if want {
				whole++
			} else {
				parts++
			}
		}
	}
	if whole < 1000 || parts < 1000 {
		t.Fatalf("%d whole groups, %d not: not exercised", whole, parts)
	}
	t.Logf("%d whole groups, %d not", whole, parts)
}

// The table grows with the entries it holds, not with the blocks a call
// commits: whole groups on lines of ids are an entry each, and blocks
// that are each an entry of their own one a block; either grows the
// table within the call once its entries pass the table's room
// (CommitAll and Promote alike), as far as they need and no further, and
// every block is found after.
func TestIndexGrowsWithEntries(t *testing.T) {
	const n = 16384 // blocks: 256 slots to start (room for 128 entries), 32,768 at most
	for _, promote := range []bool{false, true} {
		c := New(n)
		if len(c.index.slots) != 256 {
			t.Fatalf("a table of %d slots to start, want 256", len(c.index.slots))
		}
		commit := func(hs []uint64) {
			if !promote {
				tb, ok := c.Allocate(nil, int64(len(hs)))
				if !ok {
					t.Fatal("no room")
				}
				c.CommitAll(tb, hs)
				return
			}
			tb, _ := c.AllocateNamed(nil, int64(len(hs)), 0)
			c.Promote(c.ReleaseRun(tb, int64(len(hs))), hs)
		}
		// 200 whole groups (6,400 blocks): 200 entries, 512 slots.
		groups := make([]uint64, 200*groupLen)
		for i := range groups {
			groups[i] = uint64(1+i/groupLen)<<40 + uint64(i%groupLen)*contStep
		}
		commit(groups)
		mustCheck(t, c)
		if c.index.used != 200 || len(c.index.slots) != 512 {
			t.Fatalf("promote %v: %d entries in %d slots, want 200 in 512", promote, c.index.used, len(c.index.slots))
		}
		// 1,000 blocks of 1,000 groups: 1,200 entries, 4,096 slots.
		single := make([]uint64, 1000)
		for i := range single {
			single[i] = uint64(1000+i) << 40
		}
		commit(single)
		mustCheck(t, c)
		if c.index.used != 1200 || len(c.index.slots) != 4096 {
			t.Fatalf("promote %v: %d entries in %d slots, want 1200 in 4096", promote, c.index.used, len(c.index.slots))
		}
		for _, h := range append(groups, single...) {
			if _, ok := c.Lookup(h); !ok {
				t.Fatalf("promote %v: hash %#x lost", promote, h)
			}
		}
	}
}
