package report

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// TestVLLMNumbers checks the report's table against the numbers vLLM's
// benchmark printed for the same requests (a real --save-result file with
// per-request TTFT and ITL arrays; it has no per-request latencies, so E2E
// and TPOT are absent here). The requests are built from the file's arrays
// directly, so the check does not depend on package ingest.
func TestVLLMNumbers(t *testing.T) {
	path := shareddata.Path(t, "formats/vllm_bench_serve/LambdaLabsML_vllm-benchmark_Meta-Llama-3-8B-Instruct_tp1_len2048.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Duration          float64     `json:"duration"`
		Completed         int         `json:"completed"`
		InputLens         []int64     `json:"input_lens"`
		OutputLens        []int64     `json:"output_lens"`
		TTFTs             []float64   `json:"ttfts"`
		ITLs              [][]float64 `json:"itls"`
		RequestThroughput float64     `json:"request_throughput"`
		OutputThroughput  float64     `json:"output_throughput"`
		MeanTTFT          float64     `json:"mean_ttft_ms"`
		MedianTTFT        float64     `json:"median_ttft_ms"`
		P99TTFT           float64     `json:"p99_ttft_ms"`
		MeanITL           float64     `json:"mean_itl_ms"`
		MedianITL         float64     `json:"median_itl_ms"`
		P99ITL            float64     `json:"p99_itl_ms"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	ds := Dataset{Name: "vllm", Runs: []trace.Run{{Name: "run0", Source: "vllm-bench", DurationSec: trace.Some(f.Duration)}}}
	for i := range f.TTFTs {
		ds.Requests = append(ds.Requests, &trace.Request{
			Run: "run0", Status: trace.StatusOK,
			InputTokens: trace.Some(f.InputLens[i]), OutputTokens: trace.Some(f.OutputLens[i]),
			TTFTSec: trace.Some(f.TTFTs[i]), ITLSec: f.ITLs[i],
		})
	}
	// To the last bit, before formatting: vLLM's numbers are numpy's.
	s := analyze.Summarize(ds.Runs[0], ds.Requests)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"request_throughput", s.RequestThroughput, f.RequestThroughput},
		{"output_throughput", s.OutputThroughput, f.OutputThroughput},
		{"mean_ttft_ms", s.TTFT.Mean * 1000, f.MeanTTFT},
		{"median_ttft_ms", s.TTFT.Median() * 1000, f.MedianTTFT},
		{"p99_ttft_ms", s.TTFT.Percentile(99) * 1000, f.P99TTFT},
		{"mean_itl_ms", s.ITL.Mean * 1000, f.MeanITL},
		{"median_itl_ms", s.ITL.Median() * 1000, f.MedianITL},
		{"p99_itl_ms", s.ITL.Percentile(99) * 1000, f.P99ITL},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, vLLM reported %v", c.name, c.got, c.want)
		}
	}
	got := string(writeHTML(t, []Dataset{ds}))
	n := func(v float64) string { return regexp.QuoteMeta(fmt.Sprintf("%.2f", v)) }
	cell := `</td><td class="n">`
	for _, re := range []string{
		`<td class="n">` + fmt.Sprint(f.Completed) + cell + `0` + cell + n(f.Duration) + cell + n(f.RequestThroughput) + cell + n(f.OutputThroughput) + `</td>`,
		`<td>TTFT</td><td class="n">10` + cell + n(f.MeanTTFT) + cell + n(f.MedianTTFT) + cell + `[0-9.]+` + cell + n(f.P99TTFT) + `</td>`,
		`<td>ITL</td><td class="n">\d+` + cell + n(f.MeanITL) + cell + n(f.MedianITL) + cell + `[0-9.]+` + cell + n(f.P99ITL) + `</td>`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("report does not match vLLM's numbers: %s", re)
		}
	}
}
