//go:build heavy

package ingest

import (
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The heavy hardening cases, run with go test -tags heavy ./ingest (each
// takes seconds and moves gigabytes; not part of the default run).

// repeatReader yields head, then body n times, then tail.
func repeatReader(head, body, tail string, n int) io.Reader {
	return io.MultiReader(strings.NewReader(head), &repeat{b: []byte(body), n: n}, strings.NewReader(tail))
}

type repeat struct {
	b   []byte
	n   int
	off int
}

func (r *repeat) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.b[r.off:])
	if r.off += k; r.off == len(r.b) {
		r.off, r.n = 0, r.n-1
	}
	return k, nil
}

// TestOneLineBomb: a single 2-GB Mooncake line (the one-line-bomb
// reproducer, uncompressed) is one bad record, read in bounded memory and
// time, and the line after it is read.
func TestOneLineBomb(t *testing.T) {
	head := `{"timestamp": 1, "input_length": 10, "output_length": 10, "hash_ids": [`
	body := strings.Repeat("1, ", 1<<20)
	tail := "1]}\n" + `{"timestamp": 2, "input_length": 10, "output_length": 10, "hash_ids": [1]}` + "\n"
	start := time.Now()
	r, err := NewReader(repeatReader(head, body, tail, 680), "bomb.jsonl", Options{Format: mooncakeName})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r.Scan() {
		switch rec := r.Record().(type) {
		case *SyntaxError:
			got = append(got, rec.Error())
		default:
			got = append(got, "ok")
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	want := "bomb.jsonl:1: line of 2139095114 bytes or more, longer than the limit of 67108864 (--max-line-bytes)\nok"
	if g := strings.Join(got, "\n"); g != want {
		t.Errorf("got\n%s\nwant\n%s", g, want)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%v, %d MiB from the system", time.Since(start), ms.Sys>>20)
	if ms.Sys > 1<<30 {
		t.Errorf("took %d MiB from the system, want under 1 GiB", ms.Sys>>20)
	}
}
