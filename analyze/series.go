package analyze

import (
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/trace"
)

// A Series holds per-second counts on a fixed 1-s grid: bin k covers
// [Start+k, Start+k+1) seconds of trace time, Start being the first
// arrival.
type Series struct {
	Start       float64
	Arrivals    []int // requests sent in the second
	Completions []int // requests ending in the second (arrival + E2E; any status with an E2E)
	// Running counts the requests active at some time in the second,
	// [arrival, arrival + E2E), binned as vLLM's concurrent_requests_per_second.
	Running []int
	// OutputTokens counts output tokens by the time they reached the
	// client: arrival + TTFT + cumsum(ITL), weighted by chunk_tokens when
	// known, else one per chunk (vLLM's approximation for chunked streams).
	OutputTokens []int64
}

// PerSecond computes the per-second series. Requests need arrivals; the
// running and completion series need E2E. It returns false when no
// request has an arrival.
func PerSecond(reqs []*trace.Request) (*Series, bool) {
	start, end := math.Inf(1), math.Inf(-1)
	for _, r := range reqs {
		if !r.Arrival.OK {
			continue
		}
		a := r.Arrival.V.Seconds()
		start = math.Min(start, a)
		end = math.Max(end, requestEnd(r))
	}
	if math.IsInf(start, 1) {
		return nil, false
	}
	n := int(math.Floor(end-start)) + 1
	s := &Series{Start: start, Arrivals: make([]int, n), Completions: make([]int, n), Running: make([]int, n), OutputTokens: make([]int64, n)}
	bin := func(t float64) int {
		b := int(math.Floor(t - start))
		return min(max(b, 0), n-1)
	}
	for _, r := range reqs {
		if !r.Arrival.OK {
			continue
		}
		a := r.Arrival.V.Seconds()
		s.Arrivals[bin(a)]++
		if !r.E2ESec.OK {
			continue
		}
		e := a + r.E2ESec.V
		s.Completions[bin(e)]++
		lo, hi := int(math.Floor(a-start)), int(math.Ceil(e-start))
		for k := lo; k < hi && k < n; k++ {
			s.Running[k]++
		}
		if !r.OK() || !r.TTFTSec.OK {
			continue
		}
		weighted := len(r.ChunkTokens) == len(r.ITLSec)+1
		w := func(i int) int64 {
			if weighted {
				return int64(r.ChunkTokens[i])
			}
			return 1
		}
		t := a + r.TTFTSec.V
		s.OutputTokens[bin(t)] += w(0)
		for i, g := range r.ITLSec {
			t += g
			s.OutputTokens[bin(t)] += w(i + 1)
		}
	}
	return s, true
}

// A SecondsSummary is what a replay's per-second file says of one run
// (trace.SecondsRun): per-second means and peaks of the running and
// waiting requests, of the workers' busy fraction and of the KV cache
// usage as a fraction of its capacity, and totals.
type SecondsSummary struct {
	Run     string
	Seconds int
	// Means over the seconds and the largest second.
	Running, Waiting, Busy MeanMax
	// KVUsage is KV blocks in use over the capacity; KVKnown is false
	// when the file has no capacity (then KVUsage is zero).
	KVUsage             MeanMax
	KVKnown             bool
	TokensPerStep       float64 // Σ tokens / Σ steps
	Steps, Preemptions  int64
	TimedOut, Rejected  int64
	Arrivals, Completed int64
	// Tiers is set when the run has KV tiers below the GPU (a tier's
	// capacity or any transfer).
	Tiers *TierSeconds
}

// TierSeconds is what the per-second file says of a run's KV tiers:
// each tier's occupancy over its capacity (per KVTiers' host, storage,
// remote; absent tiers zero), each class of link's utilisation
// (PCIe H2D, PCIe D2H, host memory, NVMe, NIC), and the bytes offloaded,
// loaded and prefetched in total.
type TierSeconds struct {
	HostUsage, DiskUsage, RemoteUsage      MeanMax
	HasHost, HasDisk, HasRemote            bool
	PCIeH2D, PCIeD2H, HostMem, NVMe, NIC   MeanMax
	OffloadBytes, LoadBytes, PrefetchBytes int64
}

// A MeanMax is the mean over seconds (numpy's pairwise mean) and the
// largest second's value.
type MeanMax struct{ Mean, Max float64 }

func meanMax(x []float64) MeanMax {
	if len(x) == 0 {
		return MeanMax{}
	}
	m, _ := meanStd(x)
	return MeanMax{Mean: m, Max: slices.Max(x)}
}

// SummarizeSeconds summarizes one run of a per-second file.
func SummarizeSeconds(r trace.SecondsRun) SecondsSummary {
	s := SecondsSummary{Run: r.Run, Seconds: len(r.Seconds), KVKnown: r.KVBlocks > 0}
	n := len(r.Seconds)
	running, waiting, busy, kv := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	var tokens int64
	for i, x := range r.Seconds {
		running[i], waiting[i], busy[i], kv[i] = x.Running, x.Waiting, x.Busy, r.KVUsage(x)
		tokens += x.Tokens
		s.Steps += x.Steps
		s.Preemptions += x.Preemptions
		s.TimedOut += x.TimedOut
		s.Rejected += x.Rejected
		s.Arrivals += x.Arrivals
		s.Completed += x.Completions
	}
	s.Running, s.Waiting, s.Busy = meanMax(running), meanMax(waiting), meanMax(busy)
	if s.KVKnown {
		s.KVUsage = meanMax(kv)
	}
	if s.Steps > 0 {
		s.TokensPerStep = float64(tokens) / float64(s.Steps)
	}
	s.Tiers = summarizeTiers(r)
	return s
}

// summarizeTiers returns the tiers' summary of r, or nil without tiers.
func summarizeTiers(r trace.SecondsRun) *TierSeconds {
	t := &TierSeconds{HasHost: r.HostKVCapacity > 0, HasDisk: r.DiskKVCapacity > 0, HasRemote: r.RemoteKVCapacity > 0}
	n := len(r.Seconds)
	cols := make([][]float64, 8)
	for i := range cols {
		cols[i] = make([]float64, n)
	}
	frac := func(b, capacity int64) float64 {
		if capacity <= 0 {
			return 0
		}
		return float64(b) / float64(capacity)
	}
	for i, x := range r.Seconds {
		cols[0][i] = frac(x.HostKVBytes, r.HostKVCapacity)
		cols[1][i] = frac(x.DiskKVBytes, r.DiskKVCapacity)
		cols[2][i] = frac(x.RemoteKVBytes, r.RemoteKVCapacity)
		cols[3][i], cols[4][i], cols[5][i], cols[6][i], cols[7][i] = x.PCIeH2DUtil, x.PCIeD2HUtil, x.HostMemUtil, x.NVMeUtil, x.NICUtil
		t.OffloadBytes += x.OffloadBytes
		t.LoadBytes += x.LoadBytes
		t.PrefetchBytes += x.PrefetchBytes
	}
	if !t.HasHost && !t.HasDisk && !t.HasRemote && t.OffloadBytes == 0 && t.LoadBytes == 0 && t.PrefetchBytes == 0 {
		return nil
	}
	for i, p := range []*MeanMax{&t.HostUsage, &t.DiskUsage, &t.RemoteUsage, &t.PCIeH2D, &t.PCIeD2H, &t.HostMem, &t.NVMe, &t.NIC} {
		*p = meanMax(cols[i])
	}
	return t
}
