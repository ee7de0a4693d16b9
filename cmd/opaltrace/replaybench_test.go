package main

import (
	"context"
	"io"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// BenchmarkReplayCommand runs the whole `opaltrace replay` command on the
// Mooncake conversation trace (12,031 requests) as a user types it: ingest
// of the JSONL, the replay, the Parquet output and the printed summary.
// Profile it with -cpuprofile to see where the command's time goes.
func BenchmarkReplayCommand(b *testing.B) {
	in := shareddata.Path(b, "traces/mooncake/conversation_trace.jsonl")
	for _, workers := range []int{4, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			out := filepath.Join(b.TempDir(), "s.parquet")
			args := []string{"opaltrace", "replay", "--workers", strconv.Itoa(workers),
				"--hardware", "h100", "--model", "llama-3.1-8b", "-o", out, in}
			for b.Loop() {
				if err := run(context.Background(), io.Discard, io.Discard, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
