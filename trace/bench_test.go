package trace

import (
	"os"
	"path/filepath"
	"testing"
)

// benchFile writes n simulated-looking requests with gaps ITL gaps each.
func benchFile(b *testing.B, n, gaps int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.parquet")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(f)
	if err != nil {
		b.Fatal(err)
	}
	itl := make([]float64, gaps)
	for i := range itl {
		itl[i] = 0.01 + float64(i)*1e-4
	}
	for i := 0; i < n; i++ {
		r := &Request{
			RequestID: "sim/" + itoa(i), Run: "sim", Source: "simulated", Worker: "w3", Status: StatusOK,
			InputTokens: Some(int64(1000 + i%977)), OutputTokens: Some(int64(gaps + 1)),
			Arrival: Some(Time(int64(i) * 1e6)), TTFTSec: Some(0.1 + float64(i%100)*1e-3), E2ESec: Some(0.5),
			ITLSec: itl, QueueSec: Some(0.01), PrefillSec: Some(0.05), DecodeSec: Some(0.3),
			GPUStart: Some(Time(int64(i)*1e6 + 1e7)), DecodeDone: Some(Time(int64(i)*1e6 + 5e8)),
			ITLUnit: ITLToken, E2EBasis: E2ELastToken, TTFTBasis: TTFTFirstChunk, OutputTokensSource: OutputRequested,
		}
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path
}

func itoa(i int) string {
	var buf [20]byte
	n := len(buf)
	for {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(buf[n:])
		}
	}
}

// BenchmarkReadParquet reads 200,000 requests with 20 ITL gaps each.
func BenchmarkReadParquet(b *testing.B) {
	const n = 200_000
	path := benchFile(b, n, 20)
	b.ResetTimer()
	for b.Loop() {
		r, err := OpenFile(path)
		if err != nil {
			b.Fatal(err)
		}
		rows := 0
		for r.Scan() {
			rows++
		}
		if r.Err() != nil || rows != n {
			b.Fatal(r.Err(), rows)
		}
		r.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
}

// BenchmarkWriteParquet writes 200,000 requests with 20 ITL gaps each.
func BenchmarkWriteParquet(b *testing.B) {
	for b.Loop() {
		benchFile(b, 200_000, 20)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200_000), "ns/row")
}

// BenchmarkReadParquetColumns reads the six columns a latency summary needs.
func BenchmarkReadParquetColumns(b *testing.B) {
	const n = 200_000
	path := benchFile(b, n, 20)
	b.ResetTimer()
	for b.Loop() {
		r, err := OpenFileColumns(path, "status", "input_tokens", "output_tokens", "ttft_s", "e2e_s", "itl_s")
		if err != nil {
			b.Fatal(err)
		}
		rows := 0
		for r.Scan() {
			rows++
		}
		if r.Err() != nil || rows != n {
			b.Fatal(r.Err(), rows)
		}
		r.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
}
