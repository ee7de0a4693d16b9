package main

import (
	"context"
	"io"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// BenchmarkReplayCommand runs the whole `opaltrace replay` command on the
// Mooncake conversation trace (12,031 requests) as a user types it: ingest
// of the JSONL, the replay, the Parquet output and the printed summary,
// on 4 and 16 workers. Besides wall time it reports the process's CPU time
// per run (cpu-ns/op, user + system, every goroutine): the machines this
// runs on are shared, and wall time there measures the neighbours too.
// Profile it with -cpuprofile to see where the command's time goes, and
// its page faults, a third of its CPU time on the VMs it was measured on
// (12–21 µs each), with perf record -e page-faults on the test binary;
// faults/op counts them (minor faults, getrusage) and B/op is the memory
// it allocates.
func BenchmarkReplayCommand(b *testing.B) {
	in := shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl")
	for _, workers := range []int{4, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			out := filepath.Join(b.TempDir(), "s.parquet")
			args := []string{"opaltrace", "replay", "--workers", strconv.Itoa(workers),
				"--hardware", "h100", "--model", "llama-3.1-8b", "-o", out, in}
			b.ReportAllocs()
			cpu0, faults0 := processCPU(), processFaults()
			for b.Loop() {
				if err := run(context.Background(), io.Discard, io.Discard, args); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(processFaults()-faults0)/float64(b.N), "faults/op")
		})
	}
}

// processFaults returns the page faults the process has taken without
// I/O (minor faults): unlike the times, a count the machine's load leaves
// alone. Memory mapped ahead (internal/prefault) is not counted, though
// it is paid for.
func processFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// processCPU returns the CPU time (user + system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
