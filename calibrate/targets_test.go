package calibrate

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// TestQuantileOfIsNumpys checks selection against the sorted numpy-linear
// percentile, on lists with many repeated values (as ITL gaps are).
func TestQuantileOfIsNumpys(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 7, 8, 100, 1001} {
		for _, distinct := range []int{1, 3, 1000} {
			v := make([]float64, n)
			for i := range v {
				v[i] = float64(rng.IntN(distinct)) * 0.01
			}
			d := analyze.NewDist(append([]float64(nil), v...))
			for _, p := range []float64{0, 50, 90, 99, 100} {
				if got, want := quantileOf(append([]float64(nil), v...), p), d.Percentile(p); got != want {
					t.Errorf("n %d distinct %d p%v: %v, numpy's %v", n, distinct, p, got, want)
				}
			}
		}
	}
}

// TestReportedTargets reads a summary-only run's targets through
// analyze.ReportedStats: SGLang's and vLLM's key spellings, the median as
// p50, zeros and statistics the fit does not use left out, in the order
// ttft, itl, e2e × p50, p90, p99.
func TestReportedTargets(t *testing.T) {
	run := trace.Run{Name: "dc#1", Reported: []byte(`{"median_ttft_ms": 85.75, "p99_ttft_ms": 0,
		"median_itl_ms": 13.6, "p90_itl_ms": 20, "mean_ttft_ms": 90, "p99.9_itl_ms": 50,
		"median_e2e_latency_ms": 7819, "p99_e2el_ms": 9000, "output_throughput": 1200}`)}
	got, err := ObservedTargets(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{MetricTTFT, "p50", 0.08575, true}, {MetricITL, "p50", 0.0136, true}, {MetricITL, "p90", 0.02, true},
		{MetricE2E, "p50", 7.819, true}, {MetricE2E, "p99", 9, true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("targets:\n got %v\nwant %v", got, want)
	}
	if _, err := ObservedTargets(trace.Run{Name: "x", Reported: []byte(`{"output_throughput": 3}`)}, nil); !errors.Is(err, ErrNoLatencies) {
		t.Errorf("a summary without latencies: %v, want ErrNoLatencies", err)
	}
}
