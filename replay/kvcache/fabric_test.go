package kvcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// llama8BBytes is the KV of a 4,096-token prefix of Llama-3.1-8B: 32
// layers × 8 KV heads × 128 dims × K and V × 2 bytes = 131,072 B a token.
const llama8BBytes = 4096 * 131_072 // 536,870,912

// node is a two-GPU node whose links are the HGX H100 preset's but for
// an 8 GB/s NVMe, so the hand computations stay in whole nanoseconds.
type testNode struct {
	f                           *Fabric
	dram, nvme, net, h2d0, h2d1 int
}

func newTestNode(t *testing.T) testNode {
	t.Helper()
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	n.NVMe.Bandwidth = 8e9
	f := NewFabric()
	var tn testNode
	tn.f = f
	for _, x := range []struct {
		l   model.Link
		dst *int
	}{{n.HostDRAM, &tn.dram}, {n.NVMe, &tn.nvme}, {n.Network, &tn.net}, {n.PCIe, &tn.h2d0}, {n.PCIe, &tn.h2d1}} {
		i, err := f.AddLink(x.l)
		if err != nil {
			t.Fatal(err)
		}
		*x.dst = i
	}
	return tn
}

// run starts transfers (at, id, bytes, path) and returns each one's
// completion time.
func run(t *testing.T, f *Fabric, starts []start) map[int64]trace.Time {
	t.Helper()
	got := map[int64]trace.Time{}
	for _, s := range starts {
		done, err := f.Start(s.at, s.id, s.bytes, s.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range done {
			got[d.ID] = d.At
		}
	}
	for {
		at, ok := f.Next()
		if !ok {
			break
		}
		for _, d := range f.Advance(at) {
			got[d.ID] = d.At
		}
	}
	return got
}

type start struct {
	at    trace.Time
	id    int64
	bytes int64
	path  []int
}

// The physics of one load, to the nanosecond, from each tier to GPU 0.
func TestFabricLoadAlone(t *testing.T) {
	for _, c := range []struct {
		name string
		path func(n testNode) []int
		want trace.Time
	}{
		// Host DRAM (1 µs, 614.4 GB/s) then PCIe H2D (2 µs, 64 GB/s):
		// 3 µs + 536,870,912 B / 64 B/ns = 3,000 + 8,388,608 ns.
		{"host", func(n testNode) []int { return []int{n.dram, n.h2d0} }, 8_391_608},
		// NVMe (80 µs, 8 GB/s) through host memory: 83 µs + 67,108,864 ns.
		{"nvme", func(n testNode) []int { return []int{n.nvme, n.dram, n.h2d0} }, 67_191_864},
		// Remote over RDMA (400 µs, 80 % of 50 GB/s = 40 GB/s) through
		// host memory: 403 µs + 13,421,772.8 ns, rounded.
		{"remote", func(n testNode) []int { return []int{n.net, n.dram, n.h2d0} }, 13_824_773},
	} {
		n := newTestNode(t)
		got := run(t, n.f, []start{{0, 1, llama8BBytes, c.path(n)}})
		if got[1] != c.want {
			t.Errorf("%s: load done at %d ns, want %d", c.name, got[1], c.want)
		}
		// The same as the static price of the path.
		var links []model.Link
		for _, l := range c.path(n) {
			links = append(links, n.f.Link(l))
		}
		if p := model.PathTime(links, llama8BBytes); trace.Time(p) != c.want {
			t.Errorf("%s: PathTime %v, fabric %d ns", c.name, p, c.want)
		}
		if m := n.f.Moved(c.path(n)[0]); m != llama8BBytes {
			t.Errorf("%s: first link moved %g bytes", c.name, m)
		}
	}
}

// Two loads into one GPU share its PCIe H2D link; into two GPUs they do
// not, but two loads from NVMe share the drive.
func TestFabricSharing(t *testing.T) {
	n := newTestNode(t)
	host0 := []int{n.dram, n.h2d0}
	// Together from time 0: 32 B/ns each, 3 µs + 16,777,216 ns.
	got := run(t, n.f, []start{{0, 1, llama8BBytes, host0}, {0, 2, llama8BBytes, host0}})
	if got[1] != 16_780_216 || got[2] != 16_780_216 {
		t.Errorf("simultaneous host loads done at %v, want 16,780,216 ns each", got)
	}

	// B starts 1 ms after A. A alone until B's latency ends at 1,003,000
	// ns (64,000,000 B sent), then 32 B/ns each: A's other 472,870,912 B
	// end at 15,780,216; B then has 64,000,000 B left at 64 B/ns.
	n = newTestNode(t)
	got = run(t, n.f, []start{{0, 1, llama8BBytes, host0}, {1_000_000, 2, llama8BBytes, host0}})
	if got[1] != 15_780_216 || got[2] != 16_780_216 {
		t.Errorf("staggered host loads done at %v, want 15,780,216 and 16,780,216 ns", got)
	}

	// Two GPUs, each its own PCIe link: no sharing (DRAM has 614 GB/s).
	n = newTestNode(t)
	got = run(t, n.f, []start{{0, 1, llama8BBytes, host0}, {0, 2, llama8BBytes, []int{n.dram, n.h2d1}}})
	if got[1] != 8_391_608 || got[2] != 8_391_608 {
		t.Errorf("host loads into two GPUs done at %v, want 8,391,608 ns each", got)
	}

	// Two GPUs from NVMe: the 8 GB/s drive is shared, 4 B/ns each.
	n = newTestNode(t)
	got = run(t, n.f, []start{{0, 1, llama8BBytes, []int{n.nvme, n.dram, n.h2d0}}, {0, 2, llama8BBytes, []int{n.nvme, n.dram, n.h2d1}}})
	if want := trace.Time(83_000 + 134_217_728); got[1] != want || got[2] != want {
		t.Errorf("NVMe loads into two GPUs done at %v, want %d ns each", got, want)
	}
}

// Max-min fairness: an NVMe load A (bottleneck: the 8 GB/s drive) and a
// host load B share GPU 0's PCIe link; A cannot use its 32 B/ns half, so
// B gets the other 56. B alone from 3 µs to 83 µs sends 5,120,000 B, then
// 56,000,000 B more at 56 B/ns by 1,083,000 ns; A has then sent 8,000,000
// B and sends its last 80,000,000 alone at 8 B/ns, by 11,083,000 ns.
func TestFabricMaxMin(t *testing.T) {
	n := newTestNode(t)
	got := run(t, n.f, []start{
		{0, 1, 88_000_000, []int{n.nvme, n.dram, n.h2d0}},
		{0, 2, 61_120_000, []int{n.dram, n.h2d0}},
	})
	if got[1] != 11_083_000 || got[2] != 1_083_000 {
		t.Errorf("done at %v, want A 11,083,000 and B 1,083,000 ns", got)
	}
	if m := n.f.Moved(n.h2d0); m != 88_000_000+61_120_000 {
		t.Errorf("PCIe moved %g bytes", m)
	}
}

func TestFabricBadInput(t *testing.T) {
	f := NewFabric()
	if _, err := f.AddLink(model.Link{Name: "dead", Bandwidth: 0}); err == nil {
		t.Error("a link of zero bandwidth accepted")
	}
	l, _ := f.AddLink(model.Link{Name: "ok", Bandwidth: 1e9, Latency: time.Microsecond})
	if _, err := f.Start(0, 1, 10, []int{l, l}); err == nil {
		t.Error("a path crossing a link twice accepted")
	}
	if _, err := f.Start(0, 1, 10, []int{7}); err == nil {
		t.Error("an unknown link accepted")
	}
	f.Advance(100)
	if _, err := f.Start(50, 2, 10, []int{l}); err == nil {
		t.Error("a start in the past accepted")
	}
}

// TestFabricAdvanceAppend checks that AdvanceAppend appends what Advance
// returns, and that transfers over the same path, given again, share
// it as they share its links.
func TestFabricAdvanceAppend(t *testing.T) {
	a, b := newTestNode(t), newTestNode(t)
	for i, p := range [][]int{{a.nvme, a.dram, a.h2d0}, {a.dram, a.h2d0}, {a.nvme, a.dram, a.h2d0}, {a.dram, a.h2d1}} {
		for _, f := range []*Fabric{a.f, b.f} {
			if _, err := f.Start(trace.Time(i*1000), int64(i+1), 64_000_000, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := a.f.Advance(1e9)
	prefix := []Done{{ID: 99, At: 5}}
	got := b.f.AdvanceAppend(prefix, 1e9)
	if len(want) != 4 || len(got) != 5 || got[0] != prefix[0] {
		t.Fatalf("Advance gave %v, AdvanceAppend %v", want, got)
	}
	for i, d := range want {
		if got[i+1] != d {
			t.Errorf("AdvanceAppend's %d-th completion is %v, want %v", i, got[i+1], d)
		}
	}
	if len(a.f.paths) != 3 {
		t.Errorf("%d paths for 3 distinct ones", len(a.f.paths))
	}
}

// TestFabricPathLater checks that a path refused for a link not added
// yet is accepted once it is.
func TestFabricPathLater(t *testing.T) {
	f := NewFabric()
	if _, err := f.Start(0, 1, 10, []int{0}); err == nil {
		t.Fatal("a path over no link accepted")
	}
	l, _ := f.AddLink(model.Link{Name: "ok", Bandwidth: 1e9})
	if _, err := f.Start(0, 2, 10, []int{l}); err != nil {
		t.Fatal(err)
	}
	if d := f.Advance(100); len(d) != 1 || d[0] != (Done{ID: 2, At: 10}) {
		t.Errorf("completed %v, want transfer 2 at 10 ns", d)
	}
}

// rateAllLinks is max-min fair sharing as Fabric.rate computed it first,
// scanning every link of the fabric in each round: the reference rate's
// scan of the used links only must match to the bit.
func rateAllLinks(f *Fabric) []float64 {
	left := make([]float64, len(f.links))
	count := make([]int32, len(f.links))
	rates := make([]float64, len(f.moving))
	for l, k := range f.links {
		left[l] = k.bw
	}
	for i, fl := range f.moving {
		rates[i] = -1
		for _, l := range f.paths[fl.path].links {
			count[l]++
		}
	}
	for unrated := len(f.moving); unrated > 0; {
		best, share := -1, math.Inf(1)
		for l, c := range count {
			if c > 0 && left[l]/float64(c) < share {
				best, share = l, left[l]/float64(c)
			}
		}
		for i, fl := range f.moving {
			path := f.paths[fl.path].links
			if rates[i] >= 0 || !slices.Contains(path, int32(best)) {
				continue
			}
			rates[i] = share
			unrated--
			for _, l := range path {
				left[l] = max(left[l]-share, 0)
				count[l]--
			}
		}
	}
	return rates
}

// TestFabricRateUsedLinks checks Fabric.rate against rateAllLinks on
// random fabrics: links of random (and some equal) bandwidths, transfers
// over random paths starting and ending at random times, the rates
// compared to the bit at every change.
func TestFabricRateUsedLinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checks := 0
	for range 200 {
		f := NewFabric()
		nl := 1 + rng.IntN(12)
		for l := range nl {
			bw := float64(1+rng.IntN(4)) * 8e9 // equal shares tie
			if rng.IntN(3) == 0 {
				bw = 1e9 + rng.Float64()*60e9
			}
			if _, err := f.AddLink(model.Link{Name: fmt.Sprint("l", l), Bandwidth: bw, Latency: time.Duration(rng.IntN(3)) * time.Microsecond}); err != nil {
				t.Fatal(err)
			}
		}
		now := trace.Time(0)
		for id := int64(1); id <= 40; id++ {
			path := rng.Perm(nl)[:1+rng.IntN(min(nl, 4))]
			if _, err := f.Start(now, id, 1+rng.Int64N(64_000_000), path); err != nil {
				t.Fatal(err)
			}
			now += trace.Time(rng.IntN(2_000_000))
			f.Advance(now)
			f.rated = false
			f.rate()
			want := rateAllLinks(f)
			for i, fl := range f.moving {
				if math.Float64bits(fl.rate) != math.Float64bits(want[i]) {
					t.Fatalf("transfer %d's rate %v, scanning every link %v", fl.id, fl.rate, want[i])
				}
			}
			checks += len(want)
		}
	}
	if checks < 1000 {
		t.Errorf("only %d rates compared", checks)
	}
}

// TestFabricEmptyTransfer checks that a transfer of no bytes ends when
// its latency does, alone or beside one moving, which it does not slow.
func TestFabricEmptyTransfer(t *testing.T) {
	f := NewFabric()
	l, _ := f.AddLink(model.Link{Name: "l", Bandwidth: 1e9, Latency: time.Microsecond})
	got := run(t, f, []start{
		{0, 1, 10_000, []int{l}}, // moves from 1,000 to 11,000 ns alone
		{2_000, 2, 0, []int{l}},  // ready at 3,000
		{20_000, 3, 0, []int{l}}, // alone: ready at 21,000
	})
	want := map[int64]trace.Time{1: 11_000, 2: 3_000, 3: 21_000}
	for id, at := range want {
		if got[id] != at {
			t.Errorf("transfer %d done at %d ns, want %d", id, got[id], at)
		}
	}
}

// A transfer decided at now whose bytes wait (SGLang's prefetch: the fetch
// follows the storage query) is in flight, all its bytes left, until
// wait and the path's latency have passed; then it moves as one started
// then. Host load A from 0, B decided at 0 with a 1 ms wait: the same
// times as TestFabricSharing's staggered loads (B from 1 ms).
func TestFabricStartAfter(t *testing.T) {
	n := newTestNode(t)
	host0 := []int{n.dram, n.h2d0}
	if _, err := n.f.Start(0, 1, llama8BBytes, host0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.f.StartAfter(0, time.Millisecond, 2, llama8BBytes, host0); err != nil {
		t.Fatal(err)
	}
	if n.f.Active() != 2 {
		t.Fatalf("%d transfers in flight, want 2", n.f.Active())
	}
	n.f.Advance(1_002_999)
	if left, ok := n.f.Remaining(2); !ok || left != llama8BBytes {
		t.Errorf("B before its wait and latency end: %g bytes left (%v), want all %d", left, ok, llama8BBytes)
	}
	got := run(t, n.f, nil)
	if got[1] != 15_780_216 || got[2] != 16_780_216 {
		t.Errorf("A, and B after 1 ms, done at %v, want 15,780,216 and 16,780,216 ns", got)
	}
	if _, err := NewFabric().StartAfter(0, -1, 1, 1, host0); err == nil {
		t.Error("a negative wait is accepted")
	}
}
