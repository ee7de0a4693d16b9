package ingest

import (
	"bytes"
	"os"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

// BenchmarkMooncake measures decoding throughput on the conversation trace.
func BenchmarkMooncake(b *testing.B) {
	data, err := os.ReadFile(shareddata.Path(b, convFile))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data), "conv", Options{})
		if err != nil {
			b.Fatal(err)
		}
		for r.Scan() {
		}
		if r.Err() != nil {
			b.Fatal(r.Err())
		}
	}
}
