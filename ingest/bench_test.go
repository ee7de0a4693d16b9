package ingest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// BenchmarkMooncake measures decoding throughput on the conversation
// trace, with a new request per line (fresh) and with one reused
// (Options.Reuse, as replay reads).
func BenchmarkMooncake(b *testing.B) {
	data, err := os.ReadFile(shareddata.Path(b, convFile))
	if err != nil {
		b.Fatal(err)
	}
	for _, reuse := range []bool{false, true} {
		name := "fresh"
		if reuse {
			name = "reuse"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := NewReader(bytes.NewReader(data), "conv", Options{Reuse: reuse})
				if err != nil {
					b.Fatal(err)
				}
				for r.Scan() {
				}
				if r.Err() != nil {
					b.Fatal(r.Err())
				}
			}
		})
	}
}

// genLines writes n lines made by line(i) to a file in the temporary
// directory, unless an earlier run left it there, and returns its path and
// size.
func genLines(b *testing.B, name string, n int, line func(w *bufio.Writer, i int)) (string, int64) {
	b.Helper()
	return genFile(b, name, n, func(w *bufio.Writer) {
		for i := range n {
			line(w, i)
		}
	})
}

// genFile is genLines for a file written whole by write.
func genFile(b *testing.B, name string, n int, write func(w *bufio.Writer)) (string, int64) {
	b.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("opaltrace-bench-%s-%d", name, n))
	if fi, err := os.Stat(path); err == nil {
		return path, fi.Size()
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	write(w)
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(path+".tmp", path); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(path)
	return path, fi.Size()
}

// benchFile reads path in format name b.N times, streaming from disk.
func benchFile(b *testing.B, path string, size int64, name string, want int) {
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		r, c, err := Open(path, Options{Format: name})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for r.Scan() {
			if _, ok := r.Record().(*trace.Request); !ok {
				b.Fatalf("bad record %v", r.Record())
			}
			n++
		}
		c.Close()
		if r.Err() != nil || n != want {
			b.Fatalf("%d records, err %v", n, r.Err())
		}
	}
}

// BenchmarkSGLangMetrics1M reads a generated 1,000,000-line
// --export-metrics-to-file log (the fixture's shape, varied values).
func BenchmarkSGLangMetrics1M(b *testing.B) {
	const n = 1_000_000
	path, size := genLines(b, "sglang-metrics", n, func(w *bufio.Writer, i int) {
		t := 1767225600 + float64(i)*0.01
		fmt.Fprintf(w, `{"request_parameters": "{\"sampling_params\": {\"max_new_tokens\": %d, \"temperature\": 0}, \"rid\": \"r%08d\", \"stream\": true}", "id": "r%08d", "finish_reason": {"type": "length", "length": %d}, "prompt_tokens": %d, "weight_version": "default", "reasoning_tokens": 0, "completion_tokens": %d, "cached_tokens": %d, "cached_tokens_details": {"device": %d, "host": 256, "storage": 128, "storage_backend": "HiCacheFile"}, "e2e_latency": 1.84, "queue_time": 0.012, "forward_entry_time": %.3f, "prefill_finished_time": %.3f, "request_received_ts": %.3f, "request_finished_ts": %.3f, "inference_time": 1.825, "decode_throughput": 73.9}`+"\n",
			128+i%64, i, i, 128+i%64, 1024+i%512, 128+i%64, 896+i%128, 512+i%128, t+0.015, t+0.103, t, t+1.84)
	})
	benchFile(b, path, size, sglangMetricsName, n)
}

// BenchmarkMooncake1M reads a generated 1,000,000-line Mooncake trace.
func BenchmarkMooncake1M(b *testing.B) {
	const n = 1_000_000
	path, size := genLines(b, "mooncake", n, func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [`, i*10, 6000+i%4096, 300+i%200)
		for j := range 12 + i%8 {
			if j > 0 {
				w.WriteString(", ")
			}
			fmt.Fprintf(w, "%d", (i*7+j)%100000)
		}
		w.WriteString("]}\n")
	})
	benchFile(b, path, size, mooncakeName, n)
}

// BenchmarkVLLMBench1M reads a generated vllm bench serve --save-detailed
// result with 1,000,000 requests (20 output gaps each, short generated
// texts, every 1000th request failed).
func BenchmarkVLLMBench1M(b *testing.B) {
	const n = 1_000_000
	path, size := genFile(b, "vllm-bench", n, func(w *bufio.Writer) { writeVLLMBench(w, n) })
	benchFile(b, path, size, vllmBenchName, n)
}
