package analyze

import (
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
)

// replayGaps returns the ITL gaps of a simulated run as a replay of the
// Mooncake conversation trace pools them (4,110,017 gaps of 222,583
// distinct values over 12,031 requests, 4 vLLM workers): each request's
// gaps are a few ascending runs of step times (a steady batch whose
// context grows by one token a request each step), and each run is shared
// by the requests of its batch, which run at the same time and so
// complete, and are pooled, near one another. Here 12,000 requests of 342
// gaps on average each draw runs of 20 steps from the 40 batches around
// its place, so each step time recurs about 17 times (4.1 M gaps, 240 K
// distinct), at nanosecond resolution as the engine's times are.
func replayGaps() [][]float64 {
	rng := rand.New(rand.NewPCG(7, 8))
	const runLen, near = 20, 40
	batches := make([][]float64, 12_000)
	for i := range batches {
		base := 0.007 + rng.ExpFloat64()*0.005
		run := make([]float64, runLen)
		for j := range run {
			run[j] = math.Round((base+float64(j)*440e-9)*1e9) / 1e9
		}
		batches[i] = run
	}
	reqs := make([][]float64, 12_000)
	for i := range reqs {
		var g []float64
		for range 1 + rng.IntN(2*342/runLen) {
			k := min(max(i-near/2+rng.IntN(near), 0), len(batches)-1)
			g = append(g, batches[k]...)
		}
		reqs[i] = g
	}
	return reqs
}

// BenchmarkITLDist compares ways to sort a simulated run's pooled ITL
// gaps (replayGaps), the longest part of its in-memory summary:
//
//   - radix: sortFloats, a radix sort of every gap (what NewDist does);
//   - slices.Sort: the standard library's pdqsort;
//   - runs: each request's gaps sorted, then the sorted runs merged two
//     by two (the gaps come in ascending runs per request);
//   - map: the distinct values counted in a Go map, sorted, written out;
//   - counts: the same with valueCounts (open addressing on the bits,
//     radix sort of the distinct values), what Summarizer does; counts/add
//     is its part that runs as the records come, counts/sorted what is
//     left when the last request is in.
//
// Measured on the 2-core VM where this was written, shared with other
// work at load 14–16, so the times are long and noisy but their order
// held (`go test ./analyze -run '^$' -bench ITLDist -benchtime 3x -count 2`):
// radix 1.38–1.46 s, slices.Sort 1.61–1.93 s, runs 1.63–2.40 s, map
// 2.17–2.74 s, counts 0.32–0.68 s (add 0.20–0.29 s, sorted 0.12–0.29 s).
// On the gaps of the real replay (4,110,017; read from its output file),
// at load 5–10, in CPU time per sort: radix 294–324 ms, slices.Sort 398
// ms, a Go map 579 ms, counting 113–140 ms.
//
// With the mean and std, what a Summarizer's ITL costs in all (`-bench
// 'ITLDist/(counts\+mean|select$)' -benchtime 5x -count 3`, load 12):
// counts+mean 180–204 ms of CPU per run, select (median and p99 by
// passes, Options.SelectITL) 98–102 ms, of which the histogram made as
// the records come (select/add) is a seventh; 74–89 ms once a collected
// bucket's ranks are selected (selectSorted) rather than sorted.
func BenchmarkITLDist(b *testing.B) {
	reqs := replayGaps()
	var pool []float64
	for _, g := range reqs {
		pool = append(pool, g...)
	}
	v := make([]float64, len(pool))
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(v, pool)
			sortFloats(v)
		}
	})
	b.Run("slices.Sort", func(b *testing.B) {
		for b.Loop() {
			copy(v, pool)
			slices.Sort(v)
		}
	})
	b.Run("runs", func(b *testing.B) {
		for b.Loop() {
			copy(v, pool)
			mergeSortedRuns(v, reqs)
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[float64]int{}
			for _, x := range pool {
				m[x]++
			}
			keys := make([]float64, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			i := 0
			for _, k := range keys {
				for range m[k] {
					v[i] = k
					i++
				}
			}
		}
	})
	count := func() *valueCounts {
		var c valueCounts
		for _, g := range reqs {
			c.addAll(g)
		}
		if c.overflow {
			b.Fatal("counting gave up")
		}
		return &c
	}
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			count().sorted(v)
		}
	})
	b.Run("counts/add", func(b *testing.B) {
		for b.Loop() {
			count()
		}
	})
	b.Run("counts/sorted", func(b *testing.B) {
		c := count()
		for b.Loop() {
			c.sorted(v)
		}
	})
	// What a Summarizer's ITL costs in all, with its mean and std: the
	// counts sorted out (the default), or its median and p99 selected
	// by passes over the gaps (Options.SelectITL).
	b.Run("counts+mean", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			count().sorted(v)
			meanStdPooled(reqs, len(pool))
		}
	})
	histogram := func() *metricStream {
		m := newMetricStream()
		for _, g := range reqs {
			m.countSlice(g)
		}
		return m
	}
	passes := func(m *metricStream) Dist {
		m.plan(append(medianRanks(m.n), percentileRanks(m.n, 99)...))
		for m.startPass(&budget{left: passBudget}) {
			m.visitPooled(reqs)
			m.endPass()
		}
		return m.dist()
	}
	b.Run("select", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			passes(histogram())
		}
	})
	b.Run("select/add", func(b *testing.B) {
		for b.Loop() {
			histogram()
		}
	})
	// The passes split between two goroutines (visitPooled, with two
	// cores), then on one.
	for _, split := range []int64{splitMin, math.MaxInt64} {
		name := "select/passes"
		if split == math.MaxInt64 {
			name = "select/passes/one-goroutine"
		}
		b.Run(name, func(b *testing.B) {
			defer func(s int64) { splitMin = s }(splitMin)
			splitMin = split
			defer reportCPU(b)()
			for b.Loop() {
				b.StopTimer()
				m := histogram()
				b.StartTimer()
				passes(m)
			}
		})
	}
}

// mergeSortedRuns sorts v, the concatenation of reqs, by sorting each
// request's part and merging neighbouring sorted runs until one is left.
func mergeSortedRuns(v []float64, reqs [][]float64) {
	bounds := []int{0}
	for _, g := range reqs {
		lo := bounds[len(bounds)-1]
		slices.Sort(v[lo : lo+len(g)])
		bounds = append(bounds, lo+len(g))
	}
	src, dst := v, make([]float64, len(v))
	for len(bounds) > 2 {
		next := []int{0}
		for k := 0; k+1 < len(bounds); k += 2 {
			lo, mid, hi := bounds[k], bounds[k+1], bounds[k+1]
			if k+2 < len(bounds) {
				hi = bounds[k+2]
			}
			i, j, o := lo, mid, lo
			for i < mid && j < hi {
				if src[j] < src[i] {
					dst[o] = src[j]
					j++
				} else {
					dst[o] = src[i]
					i++
				}
				o++
			}
			o += copy(dst[o:], src[i:mid])
			copy(dst[o:], src[j:hi])
			next = append(next, hi)
		}
		bounds = next
		src, dst = dst, src
	}
	if &src[0] != &v[0] {
		copy(v, src)
	}
}

// TestITLDistWaysAgree: BenchmarkITLDist's ways sort replayGaps alike.
func TestITLDistWaysAgree(t *testing.T) {
	reqs := replayGaps()
	var pool []float64
	for _, g := range reqs {
		pool = append(pool, g...)
	}
	want := slices.Clone(pool)
	sortFloats(want)
	runs := slices.Clone(pool)
	mergeSortedRuns(runs, reqs)
	var c valueCounts
	for _, g := range reqs {
		c.addAll(g)
	}
	counted := make([]float64, len(pool))
	c.sorted(counted)
	if !slices.Equal(runs, want) || !slices.Equal(counted, want) {
		t.Error("the ways sort differently")
	}
	t.Logf("%d gaps, %d distinct", len(pool), c.distinct)
}

// reportCPU reports, when the function it returns is called, the
// process's CPU time (user + system) per iteration since reportCPU was
// called (cpu-ns/op): on a shared machine, wall time measures the
// neighbours too.
func reportCPU(b *testing.B) func() {
	cpu := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}
