package report

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/opaltrace/opaltrace/trace"
)

// hostileName is a dataset label with markup and a terminal escape (one
// that would set the terminal's title): the page must show it as text.
const hostileName = "obs <b>1</b>\x1b]0;pwned\x07"

// sweepDataset returns a dataset of one run per rate, shaped like a
// benchmark sweep on one deployment: requests with lengths, latencies,
// workers, server-side TTFT parts and prefix hash ids. Simulated runs name
// their deployment as a replay does; observed ones add a summary-only run
// (its values reported by source).
func sweepDataset(name string, rates []float64, perRun int, seed uint64, simulated bool) Dataset {
	rng := rand.New(rand.NewPCG(seed, 7))
	ds := Dataset{Name: name}
	for ri, rate := range rates {
		run := trace.Run{Name: fmt.Sprintf("rate=%g", rate), Source: "vllm-bench", Model: "llama-3.1-8b", Hardware: "1xH100", TP: 1, Engine: "vllm",
			Workload: &trace.Workload{Dataset: "random", InputLen: 512, OutputLen: 64, RequestRate: trace.Rate(rate)},
			Extra:    map[string]string{"version": "0.6.3", "engine_opt.max-num-seqs": "256"}}
		if simulated {
			run.Source = "simulated"
			run.Extra = map[string]string{"deployment": "llama-3.1-8b on 1×h100 (TP1), vllm, 4 workers",
				"config": "hardware: h100\nmodel: llama-3.1-8b\nworkers: 4\nrouter: round_robin\n", "cost_model": "roofline: llama-3.1-8b on 1 × h100\n"}
		}
		ds.Runs = append(ds.Runs, run)
		t := 0.0
		for i := range perRun {
			t += rng.ExpFloat64() / rate
			in, out := 64+rng.IntN(2000), 2+rng.IntN(120)
			queue := rng.ExpFloat64() * 0.02 * rate
			prefill := 0.0001 * float64(in)
			ttft := queue + prefill + 0.005
			itl := make([]float64, out-1)
			e2e := ttft
			for j := range itl {
				itl[j] = 0.01 + 0.002*rate*rng.Float64()
				e2e += itl[j]
			}
			hashes := make([]int64, (in+511)/512)
			for j := range hashes {
				hashes[j] = int64(rng.IntN(8)*100 + j) // shared prefixes
			}
			r := &trace.Request{Run: run.Name, Source: run.Source, Status: trace.StatusOK, Worker: fmt.Sprintf("w%d", i%4+1),
				Arrival: trace.Some(trace.TimeFromSeconds(t)), InputTokens: trace.Some(int64(in)), OutputTokens: trace.Some(int64(out)),
				TTFTSec: trace.Some(ttft), E2ESec: trace.Some(e2e), ITLSec: itl, QueueSec: trace.Some(queue), PrefillSec: trace.Some(prefill),
				BlockSize: trace.Some[int64](512), HashIDs: hashes, CachedTokens: trace.Some(int64(rng.IntN(in)))}
			if i%17 == 5 {
				r.Status, r.Error = trace.StatusFailed, "HTTP 500"
			}
			ds.Requests = append(ds.Requests, r)
		}
		_ = ri
	}
	if !simulated {
		rep, _ := json.Marshal(map[string]any{"completed": 100, "failed": 0, "duration": 12.5, "request_throughput": 8.0, "output_throughput": 480.0,
			"mean_ttft_ms": 95.5, "median_ttft_ms": 80.25, "p99_ttft_ms": 310.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0, "p99_tpot_ms": 30.0})
		ds.Runs = append(ds.Runs, trace.Run{Name: "rate=16", Source: "vllm-bench", Model: "llama-3.1-8b", Hardware: "1xH100", TP: 1, Engine: "vllm",
			Workload: &trace.Workload{Dataset: "random", InputLen: 512, OutputLen: 64, RequestRate: 16}, Reported: rep,
			Extra: map[string]string{"version": "0.6.3", "engine_opt.max-num-seqs": "256"}})
	}
	return ds
}

// fixtureSeconds is a per-second file of two runs: one disaggregated,
// with a prefill worker more and a decode worker fewer after 60 s, the
// other autoscaled, at zero for its first 10 s with requests held at the
// gateway.
func fixtureSeconds() []trace.SecondsRun {
	var runs []trace.SecondsRun
	for ri, name := range []string{"rate=1", "rate=4"} {
		r := trace.SecondsRun{Run: name, KVBlocks: 1000, HostKVCapacity: 1 << 30}
		for s := range 120 {
			ready, held := 4.0, 0.0
			prefill := float64(1 + s/60)
			if ri == 1 {
				prefill = 0
				ready = float64(1 + min(s/20, 5))
				if s < 10 {
					ready, held = 0, float64(s+1)
				}
			}
			r.Seconds = append(r.Seconds, trace.Second{Second: int64(s), Arrivals: int64(s % 7), Completions: int64(s % 5), Running: float64(s % 11),
				Waiting: float64(s % 3), KVBlocksUsed: float64(10 * (s % 50)), Busy: 0.5, Steps: 10, Tokens: 100, ReadyWorkers: ready, HeldAtGateway: held,
				PrefillReadyWorkers: prefill, DecodeReadyWorkers: ready - prefill,
				HostKVBytes: int64(s) << 22, PCIeH2DUtil: float64(s%10) / 20, PCIeD2HUtil: 0.1})
		}
		runs = append(runs, r)
	}
	return runs
}

// fixtureDatasets are an observed sweep (with a hostile name and a
// summary-only run) and its simulation.
func fixtureDatasets() []Dataset {
	return []Dataset{
		sweepDataset(hostileName, []float64{1, 2, 4}, 150, 1, false),
		sweepDataset("simulated", []float64{1, 2, 4}, 150, 2, true),
	}
}
