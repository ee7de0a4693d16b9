package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// TestSurajssdITLByBatch is the evidence for fitting serial_fraction on
// the surajssd runs (scripts/fidelity, issue 13), from their per-request
// arrays alone: no stream ever got two steps' tokens in one chunk at qps
// 16 and inf (vLLM 0.8's RequestOutputCollector merges a stream's outputs
// when its consumer on the API server falls a step behind, so the API
// server kept up and an ITL is one engine step), and the median ITL rises
// with the requests in flight, in jumps just past sizes vLLM v0.8 pads a
// step to for its CUDA graphs ([1, 2, 4] + range(8, 513, 8),
// vllm/config.py VllmConfig._set_cudagraph_sizes), where a roofline's
// max(compute, memory) prices every memory-bound step alike. In flight
// counts a request from its send (arrivals as the client drew them,
// vllmArrivals; qps inf sends all at 0) to its last chunk, each chunk
// taken at its middle. The qps 4 run's 25 two-token chunks all fall in
// its first 65 requests: one stall, not a load.
func TestSurajssdITLByBatch(t *testing.T) {
	const dir = "formats/vllm_bench_serve/surajssd_llama-3.3-70b_a100-40gb_tp8/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_"
	out := filepath.Join(t.TempDir(), "s.parquet")
	args := []string{"ingest", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "8xA100-40GB", "--tp", "8", "--engine", "vllm", "-o", out}
	for _, q := range []string{"01", "04", "16", "inf"} {
		args = append(args, shareddata.Path(t, dir+q+".json"))
	}
	if _, stderr, err := opaltrace(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	byRun := map[string][]*trace.Request{}
	for _, r := range reqs {
		byRun[r.Run] = append(byRun[r.Run], r)
	}
	itlByN := map[int][]float64{} // in flight → ITL gaps (s), all runs
	for _, run := range runs {
		rs := byRun[run.Name]
		merged := 0
		send := make([]float64, len(rs))
		if at, _, ok := vllmArrivals(run, len(rs)); ok {
			for i := range rs {
				send[i] = at[i].Seconds()
			}
		}
		end := make([]float64, len(rs))
		for i, r := range rs {
			if r.OutputTokens.V > 1 && len(r.ITLSec) < int(r.OutputTokens.V)-1 {
				merged++
			}
			end[i] = send[i] + r.TTFTSec.V
			for _, g := range r.ITLSec {
				end[i] += g
			}
		}
		inFlight := func(at float64) int {
			n := 0
			for i := range rs {
				if send[i] <= at && at < end[i] {
					n++
				}
			}
			return n
		}
		for i, r := range rs {
			at := send[i] + r.TTFTSec.V
			for _, g := range r.ITLSec {
				n := inFlight(at + g/2)
				itlByN[n] = append(itlByN[n], g)
				at += g
			}
		}
		rate := run.Workload.RequestRate
		t.Logf("rate %v: %d streams with a chunk of two steps' tokens", rate, merged)
		if math.IsInf(float64(rate), 1) || rate == 16 {
			if merged != 0 {
				t.Errorf("rate %v: %d streams had a merged chunk", rate, merged)
			}
		}
	}
	// Median ITL over the in-flight counts of each band: between two
	// capture sizes the padded batch is one, so the band is flat.
	bands := [][2]int{{1, 1}, {2, 2}, {3, 4}, {5, 8}, {9, 16}, {17, 24}, {25, 64}, {65, 72}, {73, 144}, {145, 185}}
	med := make([]float64, len(bands))
	var table strings.Builder
	for k, b := range bands {
		var gs []float64
		for n := b[0]; n <= b[1]; n++ {
			gs = append(gs, itlByN[n]...)
		}
		slices.Sort(gs)
		if len(gs) < 100 {
			t.Fatalf("in flight %d–%d: %d gaps, too few for a median", b[0], b[1], len(gs))
		}
		med[k] = gs[len(gs)/2] * 1e3
		fmt.Fprintf(&table, "  %3d–%3d in flight: median ITL %.1f ms over %d chunks\n", b[0], b[1], med[k], len(gs))
	}
	t.Logf("all four runs:\n%s", table.String())
	for k := 1; k < len(med); k++ {
		if !(med[k] > med[k-1]) {
			t.Errorf("median ITL %.1f ms at %d–%d in flight, not above %.1f at %d–%d", med[k], bands[k][0], bands[k][1], med[k-1], bands[k-1][0], bands[k-1][1])
		}
	}
	// The step from 1 to 145–185 in flight is a memory-bound step's
	// growth the roofline's max does not price: about twice the single
	// request's step.
	if r := med[len(med)-1] / med[0]; !(r > 1.8) {
		t.Errorf("median ITL at 145–185 in flight is %.2f× that of one request", r)
	}
}
