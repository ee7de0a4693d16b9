package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A source that streamed 3 tokens a chunk after the first (ITL per
// chunk: 13 output tokens in 1 + 4 chunks) is replayed with stream_interval 3, so its ITL is
// simulated per chunk as it was measured; --stream-interval still wins.
func TestReplayStreamsLikeTheSource(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.parquet")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		r := &trace.Request{RequestID: "r" + string(rune('a'+i)), Run: "obs", Source: "test", Status: trace.StatusOK,
			Arrival: trace.Some(trace.TimeFromSeconds(float64(i) * 0.5)), TTFTSec: trace.Some(0.05),
			ITLSec: []float64{0.03, 0.03, 0.03, 0.03}, ITLUnit: trace.ITLChunk, E2ESec: trace.Some(0.17),
			InputTokens: trace.Some(int64(100)), OutputTokens: trace.Some(int64(13))}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out := filepath.Join(dir, "sim.parquet")
	args := []string{"replay", "--assume-deployment", "-o", out, in}
	_, stderr, err := opaltrace(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "run obs: the source streamed 3.00 tokens per chunk after the first (ITL per chunk): replayed with stream_interval 3") {
		t.Errorf("no note:\n%s", stderr)
	}
	_, reqs, err := trace.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if r := reqs[0]; r.ITLUnit != trace.ITLChunk || len(r.ITLSec) != 4 {
		t.Errorf("simulated: ITL unit %q, %d gaps; want chunk, 4", r.ITLUnit, len(r.ITLSec))
	}
	_, stderr, err = opaltrace(t, append([]string{"replay", "--stream-interval", "1"}, args[1:]...)...)
	if err != nil || strings.Contains(stderr, "tokens per chunk") {
		t.Errorf("--stream-interval 1: %v\n%s", err, stderr)
	}
}
