package ingest

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// lmbenchVLLMDir holds llm-d exp-0's plain-vLLM LMBenchmark results, one
// CSV per QPS (see its SOURCES.md).
const lmbenchVLLMDir = "measurements/llmd_exp0_a100_tp2_llama70b/vllm-70b"

// TestLMBenchmarkReal reads every llm-d exp-0 CSV (both configurations)
// and checks each request against the file's own values, parsed here with
// encoding/csv: counts, TTFT, E2E = ttft + generation_time, arrivals from
// the first launch_time, the rate from the file name, and the deployment
// given as flags kept on the run.
func TestLMBenchmarkReal(t *testing.T) {
	for _, dir := range []string{lmbenchVLLMDir, "measurements/llmd_exp0_a100_tp2_llama70b/baseline-llm-d-70b"} {
		for _, qps := range []string{"0.5", "0.67", "0.84", "1", "1.17", "1.34"} {
			rel := dir + "/LMBench_sharegpt_output_" + qps + ".csv"
			t.Run(rel, func(t *testing.T) {
				path := shareddata.Path(t, rel)
				opts := Options{Model: "meta-llama/Llama-3.1-70B-Instruct", Hardware: "2xA100-80GB", TP: 2, Engine: "vllm"}
				r := openFile(t, path, opts)
				reqs, bad := readAll(t, r)
				if len(bad) != 0 {
					t.Fatalf("bad records: %v", bad)
				}
				rows := lmbenchRows(t, path)
				if len(reqs) != 252 || len(rows) != 252 {
					t.Fatalf("%d requests, %d rows; SOURCES.md says 252", len(reqs), len(rows))
				}
				runs := r.Runs()
				if len(runs) != 1 {
					t.Fatalf("%d runs", len(runs))
				}
				run := runs[0]
				want, _ := strconv.ParseFloat(qps, 64)
				if run.Workload == nil || float64(run.Workload.RequestRate) != want {
					t.Errorf("workload %+v, want rate %v", run.Workload, want)
				}
				if run.Model != opts.Model || run.Hardware != opts.Hardware || run.TP != 2 || run.Engine != "vllm" {
					t.Errorf("run deployment %q %q tp%d %q", run.Model, run.Hardware, run.TP, run.Engine)
				}
				if run.StartUnixN != int64(math.Round(rows[0][4]*1e9)) {
					t.Errorf("StartUnixN %d, first launch_time %v", run.StartUnixN, rows[0][4])
				}
				for i, q := range reqs {
					row := rows[i]
					if q.InputTokens.V != int64(row[0]) || q.OutputTokens.V != int64(row[1]) {
						t.Fatalf("request %d: tokens %v/%v, row %v", i, q.InputTokens, q.OutputTokens, row)
					}
					if !q.TTFTSec.OK || q.TTFTSec.V != row[2] {
						t.Fatalf("request %d: TTFT %v, row %v", i, q.TTFTSec, row[2])
					}
					if q.E2ESec.V != row[2]+row[3] {
						t.Fatalf("request %d: E2E %v, want %v", i, q.E2ESec.V, row[2]+row[3])
					}
					if d := q.Arrival.V.Seconds() - (row[4] - rows[0][4]); math.Abs(d) > 1e-6 {
						t.Fatalf("request %d: arrival off by %v s", i, d)
					}
					if q.Model != opts.Model || q.Status != trace.StatusOK {
						t.Fatalf("request %d: model %q status %s", i, q.Model, q.Status)
					}
				}
				// LMBenchmark sends at fixed spacing 1/QPS: the mean gap
				// between launches is within 1 % of it.
				gap := (reqs[251].Arrival.V.Seconds() - reqs[0].Arrival.V.Seconds()) / 251
				if math.Abs(gap*want-1) > 0.01 {
					t.Errorf("mean launch gap %v s at QPS %v", gap, want)
				}
			})
		}
	}
}

// lmbenchRows parses an LMBenchmark CSV's data rows as numbers.
func lmbenchRows(t *testing.T, path string) [][6]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out [][6]float64
	for _, rec := range all[1:] {
		var row [6]float64
		for j, s := range rec {
			if row[j], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatalf("%s: %v", filepath.Base(path), err)
			}
		}
		out = append(out, row)
	}
	return out
}
