package analyze

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

var streamBenchRequests = flag.Int("stream-bench-requests", 10_000_000, "requests in BenchmarkSummarizeStreamParquet's generated file")

// parquetSource scans a Parquet file once per call.
func parquetSource(path string) Source {
	return func(yield func(*trace.Request) error) error {
		r, err := trace.OpenFile(path)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Scan() {
			if err := yield(r.Request()); err != nil {
				return err
			}
		}
		return r.Err()
	}
}

// writeStreamBenchFile writes n requests with 20 ITL gaps each (as a
// decoding server produces them: ~10–60 ms, microsecond resolution) to a
// Parquet file.
func writeStreamBenchFile(tb testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := trace.NewWriter(f)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	r := &trace.Request{Run: "bench", Source: "simulated", Status: trace.StatusOK, ITLUnit: trace.ITLToken, ITLSec: make([]float64, 20)}
	for i := range n {
		r.RequestID = ""
		r.Arrival = trace.Some(trace.Time(int64(i) * 1e5))
		r.TTFTSec = trace.Some(math.Round((0.05+rng.ExpFloat64()*0.2)*1e6) / 1e6)
		e2e := r.TTFTSec.V
		for j := range r.ITLSec {
			g := math.Round((0.01+rng.Float64()*0.05)*1e6) / 1e6
			r.ITLSec[j] = g
			e2e += g
		}
		r.E2ESec = trace.Some(e2e)
		r.InputTokens = trace.Some(int64(100 + rng.IntN(2000)))
		r.OutputTokens = trace.Some(int64(21))
		if err := w.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSummarizeStreamParquet generates a Parquet file of 10,000,000
// requests with 20 ITL gaps each (pooled ITL: 2·10⁸ values) and computes
// the exact summary (mean, std, median, p50/p90/p99/p99.9 of TTFT, TPOT,
// ITL, E2E) in passes over the file. Peak RSS: run the test binary under
// /usr/bin/time -v. -stream-bench-requests makes the file smaller.
func BenchmarkSummarizeStreamParquet(b *testing.B) {
	path := filepath.Join(b.TempDir(), "stream.parquet")
	writeStreamBenchFile(b, path, *streamBenchRequests)
	if st, err := os.Stat(path); err == nil {
		b.Logf("%s: %d requests, %.0f MB", path, *streamBenchRequests, float64(st.Size())/1e6)
	}
	opts := StreamOptions{Percentiles: []float64{50, 90, 99, 99.9}}
	b.ResetTimer()
	for b.Loop() {
		s, err := SummarizeStream(parquetSource(path), trace.Run{}, opts)
		if err != nil {
			b.Fatal(err)
		}
		if s.ITL.N() != *streamBenchRequests*20 {
			b.Fatalf("pooled ITL has %d values, want %d", s.ITL.N(), *streamBenchRequests*20)
		}
		b.ReportMetric(float64(s.Passes), "passes")
		b.ReportMetric(s.ITL.Percentile(99)*1000, "p99_itl_ms")
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapSys)/(1<<20), "heapsys_MiB")
}

// TestStreamSummaryParquetRoundTrip checks the Parquet path of the
// benchmark on a small file: the streamed summary equals the in-memory one.
func TestStreamSummaryParquetRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small.parquet")
	writeStreamBenchFile(t, path, 3000)
	_, reqs, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := checkStreamEqualsSummary(t, reqs, StreamOptions{Percentiles: []float64{50, 90, 99, 99.9}})
	if s.ITL.N() != 60000 {
		t.Errorf("ITL n = %d", s.ITL.N())
	}
	got, err := SummarizeStream(parquetSource(path), trace.Run{}, StreamOptions{Percentiles: []float64{99}})
	if err != nil || got.ITL.Mean != s.ITL.Mean {
		t.Errorf("Parquet source: %v, mean %v vs %v", err, got.ITL.Mean, s.ITL.Mean)
	}
}
