package ingest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// seed adds the real files (their first KiBs, when present) and the
// corpus inputs of dir to f.
func seed(f *testing.F, dir string, real ...string) {
	for _, rel := range real {
		p := filepath.Join(shareddata.Root(), rel)
		if b, err := os.ReadFile(p); err == nil {
			if len(b) > 16<<10 {
				b = b[:16<<10]
			}
			f.Add(b)
		}
	}
	paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if filepath.Ext(p) == ".txtar" {
			b = parseTxtar(b)["input"]
		}
		f.Add(b)
	}
}

// fuzzFormat reads data in format name: no panic, and every accepted
// request passes Validate and names its run.
func fuzzFormat(t *testing.T, name string, data []byte) {
	r, err := NewReader(bytes.NewReader(data), "fuzz", Options{Format: name})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Scan() {
		if n++; n > 1<<20 {
			t.Fatal("too many records")
		}
		switch rec := r.Record().(type) {
		case *trace.Request:
			if err := rec.Validate(); err != nil {
				t.Fatalf("accepted %s fails Validate: %v", rec, err)
			}
			if rec.Run == "" || rec.Source != name {
				t.Fatalf("accepted %s without run or source", rec)
			}
		case *SyntaxError:
			if rec.File != "fuzz" || rec.Msg == "" {
				t.Fatalf("bad SyntaxError %#v", rec)
			}
		default:
			t.Fatalf("record %T", rec)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("fatal error on in-memory input: %v", err)
	}
}

func FuzzVLLMBench(f *testing.F) {
	seed(f, "vllmbench", lambdaFile, er0080File)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, vllmBenchName, data) })
}

func FuzzMooncake(f *testing.F) {
	seed(f, "mooncake", convFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, mooncakeName, data) })
}
