package replay

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// readAzureLengths reads the (ContextTokens, GeneratedTokens) pairs of an
// Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens).
func readAzureLengths(tb testing.TB, path string) [][2]int64 {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out [][2]int64
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if line == 1 {
			continue
		}
		p := strings.Split(sc.Text(), ",")
		if len(p) != 3 {
			tb.Fatalf("%s:%d: %d fields", path, line, len(p))
		}
		in, err1 := strconv.ParseInt(p[1], 10, 64)
		gen, err2 := strconv.ParseInt(p[2], 10, 64)
		if err1 != nil || err2 != nil {
			tb.Fatalf("%s:%d: bad lengths %q", path, line, sc.Text())
		}
		out = append(out, [2]int64{in, gen})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// azureRate is the arrival rate (requests per second) at which 64
// Llama-3.1-8B workers on H100 are about 70 % busy with Azure conversation
// lengths (measured: TestAzureLoad logs the busy fraction).
const azureRate = 45.0

func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024 // Linux reports KiB
}

// BenchmarkReplayAzureMillion replays 1,000,000 requests with Azure
// conversation lengths and Poisson arrivals on 64 workers: "parquet"
// streams every simulated request, ITL list included, into a Parquet file
// through trace.Writer; "parquet-concurrent" does so with the writer
// encoding on a second core, as opaltrace replay does; "discard" drops
// them, to show the engine's own speed. Records are transient (the
// writer copies them), as in opaltrace replay's large runs. OPALTRACE_BENCH_REQUESTS replays fewer (to profile);
// OPALTRACE_BENCH_STREAM_INTERVAL sets the stream interval (default 1).
func BenchmarkReplayAzureMillion(b *testing.B) {
	lengths := readAzureLengths(b, shareddata.Path(b, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
	cost, blocks := llama8BOnH100(b)
	n := 1_000_000
	if s := os.Getenv("OPALTRACE_BENCH_REQUESTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	in, err := NewSampled("azure", n, azureRate, lengths, 1)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Workers: 64}
	if s := os.Getenv("OPALTRACE_BENCH_STREAM_INTERVAL"); s != "" {
		cfg.Scheduler.StreamInterval, _ = strconv.ParseInt(s, 10, 64)
	}
	for _, out := range []string{"parquet", "parquet-concurrent", "discard"} {
		concurrent := out == "parquet-concurrent"
		b.Run(out, func(b *testing.B) {
			path := b.TempDir() + "/sim.parquet"
			var st Stats
			var size int64
			cpu0 := cpuTime()
			for b.Loop() {
				if out == "discard" {
					st, err = RunInputs(cfg, cost, blocks, in, func(*trace.Request) error { return nil }, Options{Transient: true})
					if err != nil {
						b.Fatal(err)
					}
					continue
				}
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				buf := bufio.NewWriterSize(f, 1<<20)
				w, err := trace.NewWriterWith(buf, trace.WriterOptions{Concurrent: concurrent})
				if err != nil {
					b.Fatal(err)
				}
				st, err = RunInputs(cfg, cost, blocks, in, w.Write, Options{Transient: true})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				if err := buf.Flush(); err != nil {
					b.Fatal(err)
				}
				if fi, err := f.Stat(); err == nil {
					size = fi.Size()
				}
				f.Close()
			}
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "req/cpu-s")
			b.ReportMetric(float64(maxRSS())/(1<<20), "peak-RSS-MiB")
			b.ReportMetric(st.BusyTime.Seconds()/(float64(cfg.Workers)*st.End.Seconds()), "busy")
			b.ReportMetric(float64(st.Steps), "steps/op")
			b.ReportMetric(float64(st.Events), "events/op")
			if size > 0 {
				b.ReportMetric(float64(size)/(1<<20), "file-MiB")
			}
		})
	}
}

// TestAzureLoad checks on the first 20,000 requests of the million that
// azureRate keeps 64 workers about 70 % busy (60–80 %).
func TestAzureLoad(t *testing.T) {
	t.Parallel()
	lengths := readAzureLengths(t, shareddata.Path(t, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
	cost, blocks := llama8BOnH100(t)
	in, err := NewSampled("azure", 20_000, azureRate, lengths, 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, err := RunInputs(Config{Workers: 64}, cost, blocks, in, func(*trace.Request) error { return nil }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	busy := st.BusyTime.Seconds() / (64 * st.End.Seconds())
	t.Logf("%d requests in %v: busy %.3f, %d steps, %d events, stats %+v", in.Len(), time.Since(start), busy, st.Steps, st.Events, st)
	if busy < 0.6 || busy > 0.8 {
		t.Errorf("busy fraction %.3f, want about 0.7", busy)
	}
}

// BenchmarkWriteAzure writes the simulated records of the first 100,000
// requests of the million (kept in memory) through trace.Writer on one
// goroutine: the writer's own cost per request, apart from the engine's.
func BenchmarkWriteAzure(b *testing.B) {
	lengths := readAzureLengths(b, shareddata.Path(b, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
	cost, blocks := llama8BOnH100(b)
	const n = 100_000
	in, err := NewSampled("azure", n, azureRate, lengths, 1)
	if err != nil {
		b.Fatal(err)
	}
	var recs []*trace.Request
	if _, err := RunInputs(Config{Workers: 64}, cost, blocks, in, func(r *trace.Request) error {
		recs = append(recs, r)
		return nil
	}, Options{}); err != nil {
		b.Fatal(err)
	}
	path := b.TempDir() + "/sim.parquet"
	var size int64
	cpu0 := cpuTime()
	for b.Loop() {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		buf := bufio.NewWriterSize(f, 1<<20)
		w, err := trace.NewWriter(buf)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := buf.Flush(); err != nil {
			b.Fatal(err)
		}
		fi, _ := f.Stat()
		size = fi.Size()
		f.Close()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/req")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/req")
	b.ReportMetric(float64(size)/(1<<20), "file-MiB")
}
