package ingest

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

const engineSideDir = "measurements/llmservingsim_vllm_engine_side"

// TestVLLMEngineGolden reads three real lines (Qwen3-32B, RTX PRO 6000),
// four bad ones, the run's meta.json and a timeseries.csv with one bad
// line.
func TestVLLMEngineGolden(t *testing.T) {
	path := "testdata/vllmengine/requests.jsonl"
	got := dump(t, path, Options{})
	golden.Check(t, path+".string", []byte(strings.ReplaceAll(got, filepath.Dir(path), "DIR")))
	_, c, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestVLLMEngineReal checks the four LLMServingSim runs against the vLLM
// column of their validation/summary.txt (measured; TTFT and latency
// anchored at queued_ts, TPOT over output_toks − 1, in ms to 0.1).
func TestVLLMEngineReal(t *testing.T) {
	for _, tc := range []struct {
		dir                 string
		hardware            string
		tp, dp              int
		ttftMean, e2eMedian float64
		tpotMean            float64
	}{
		{"RTX4090/Llama-3.1-8B", "1xNVIDIA GeForce RTX 4090", 1, 1, 65456.6, 83413.3, 32.4},
		{"RTXPRO6000/Llama-3.1-8B", "1xRTXPRO6000", 1, 1, 0, 0, 0},
		{"RTXPRO6000/Qwen3-32B", "2xRTXPRO6000", 2, 1, 0, 0, 0},
		{"RTXPRO6000/Qwen3-30B-A3B-Instruct-2507", "2xRTXPRO6000", 1, 2, 0, 0, 0},
	} {
		path := shareddata.Path(t, engineSideDir+"/"+tc.dir+"/vllm/requests.jsonl")
		r := openFile(t, path, Options{})
		reqs, bad := readAll(t, r)
		if len(reqs) != 300 || len(bad) != 0 {
			t.Fatalf("%s: %d requests, %d bad; want 300, 0", tc.dir, len(reqs), len(bad))
		}
		run := r.Runs()[0]
		if run.Hardware != tc.hardware || run.TP != tc.tp || run.DP != tc.dp || run.Engine != "vllm" ||
			run.Extra["engine_version"] != "0.19.0" || run.Extra[EngineOptPrefix+"max_num_batched_tokens"] != "2048" {
			t.Errorf("%s: run %+v", tc.dir, run)
		}
		var ttft, tpot float64
		var e2e []float64
		for _, q := range reqs {
			if d := q.QueueSec.V + q.PrefillSec.V + q.DecodeSec.V - q.E2ESec.V; math.Abs(d) > 1e-9 {
				t.Fatalf("%s: %s: queue + prefill + decode differs from E2E by %g s", tc.dir, q.RequestID, d)
			}
			ttft += q.TTFTSec.V
			tpot += q.DecodeSec.V / float64(max(1, q.OutputTokens.V-1))
			e2e = append(e2e, q.E2ESec.V)
		}
		if tc.ttftMean == 0 {
			continue
		}
		n := float64(len(reqs))
		if got := math.Round(ttft/n*1e4) / 10; got != tc.ttftMean {
			t.Errorf("%s: mean TTFT %v ms, LLMServingSim's vLLM column says %v", tc.dir, got, tc.ttftMean)
		}
		if got := math.Round(tpot/n*1e4) / 10; got != tc.tpotMean {
			t.Errorf("%s: mean TPOT %v ms, want %v", tc.dir, got, tc.tpotMean)
		}
		if r.Runs()[0].Extra["kv_num_gpu_blocks"] != "2588" {
			t.Errorf("%s: KV blocks %q, meta.json says 2588", tc.dir, r.Runs()[0].Extra["kv_num_gpu_blocks"])
		}
		_ = e2e
	}
}

func TestVLLMEngineNoArrivalClockMix(t *testing.T) {
	// The first arrival is t = 0; queued_ts (another clock) never enters
	// an arrival.
	r := openFile(t, "testdata/vllmengine/requests.jsonl", Options{})
	reqs, _ := readAll(t, r)
	if reqs[0].Arrival != trace.Some(trace.Time(0)) || reqs[1].Arrival.V != trace.Time(287553300) {
		t.Errorf("arrivals %v, %v", reqs[0].Arrival, reqs[1].Arrival)
	}
}

func FuzzVLLMEngine(f *testing.F) {
	seed(f, "vllmengine", engineSideDir+"/RTX4090/Llama-3.1-8B/vllm/requests.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, vllmEngineName, data) })
}
