package ingest

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// vllmRead reads input as vllm-bench on the streaming route (or, with
// legacy, the reference route) and returns every record, the runs, the
// fatal error and whether the reader fell back to the reference route.
func vllmRead(t testing.TB, input []byte, legacy bool) (recs []string, runs []trace.Run, fatal error, fellBack bool) {
	t.Helper()
	vllmForceLegacy = legacy
	defer func() { vllmForceLegacy = false }()
	r := newVLLMBenchReader(bytes.NewReader(input), "in", "in", Options{})
	for r.Scan() {
		switch rec := r.Record().(type) {
		case *trace.Request:
			recs = append(recs, fmt.Sprintf("%#v", *rec))
		case *SyntaxError:
			recs = append(recs, "bad "+rec.Error())
		default:
			t.Fatalf("unexpected record %T", rec)
		}
	}
	return recs, r.Runs(), r.Err(), r.(*vllmBenchReader).legacy
}

// checkRoutes fails when the two routes disagree on input.
func checkRoutes(t testing.TB, name string, input []byte) (fellBack bool) {
	t.Helper()
	got, gotRuns, gotErr, fellBack := vllmRead(t, input, false)
	want, wantRuns, wantErr, _ := vllmRead(t, input, true)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%s: fatal error %v, reference %v", name, gotErr, wantErr)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, reference %d\n%q\n%q", name, len(got), len(want), got, want)
	}
	for i := range got {
		// %#v shows a NaN as NaN on both sides: compare the text.
		if got[i] != want[i] {
			t.Fatalf("%s: record %d:\n got %s\nwant %s", name, i, got[i], want[i])
		}
	}
	if !reflect.DeepEqual(gotRuns, wantRuns) {
		t.Fatalf("%s: runs differ:\n got %+v\nwant %+v", name, gotRuns, wantRuns)
	}
	return fellBack
}

// TestVLLMRoutesReal: the real files are read on the streaming route and
// give the reference route's records and runs.
func TestVLLMRoutesReal(t *testing.T) {
	for _, rel := range []string{lambdaFile, er0080File} {
		b, err := os.ReadFile(shareddata.Path(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		if checkRoutes(t, rel, b) {
			t.Errorf("%s: fell back to the reference route", rel)
		}
	}
}

// TestVLLMRoutesCorpus compares the routes on the corpus and on inputs
// that probe where the streaming route's checks could be looser or
// stricter than encoding/json.
func TestVLLMRoutesCorpus(t *testing.T) {
	paths, _ := filepath.Glob("testdata/vllmbench/*.txtar")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		checkRoutes(t, p, parseTxtar(b)["input"])
	}
	const head = `{"backend": "vllm", "model_id": "m", `
	cases := []struct {
		name, body string
		fellBack   bool
	}{
		{"good", `"input_lens": [1, 2], "output_lens": [3, 4], "ttfts": [0.5, 0.25], "itls": [[0.1], null], "errors": [null, "x"], "generated_texts": ["a\nb", {"k": [1]}]}`, false},
		{"escapes", `"input_lens": [1], "output_lens": [3], "ttfts": ["\u004eaN"], "itls": [[]], "errors": ["a\"b\u00e9"]}`, false},
		{"non-finite", `"input_lens": [Infinity], "output_lens": [-Infinity], "ttfts": ["inf"], "itls": [[NaN]], "errors": [NaN], "start_times": [1e400]}`, false},
		{"bad-type", `"num_prompts": "x", "input_lens": [1, "a"], "output_lens": [3, 4], "ttfts": [0.5, 0.25]}`, false},
		{"bad-element-types", `"input_lens": [1], "output_lens": [null], "ttfts": [true], "itls": [1], "errors": [2]}`, false},
		{"not-arrays", `"input_lens": 1, "output_lens": {}, "ttfts": "x"}`, false},
		{"empty", `"input_lens": [], "output_lens": [], "ttfts": [], "latencies": []}`, false},
		{"minus-zero", `"input_lens": [-0], "output_lens": [0], "ttfts": [-0.0], "start_times": [-0, 5], "queue_times": [0, -1]}`, false},
		{"lax-number", `"input_lens": [01], "output_lens": [3], "ttfts": [0.5]}`, true},
		{"lax-number-nested", `"input_lens": [1], "output_lens": [3], "ttfts": [0.5], "itls": [[1.]]}`, true},
		{"lax-string", `"input_lens": [1], "output_lens": [3], "ttfts": [0.5], "generated_texts": ["a\q"]}`, true},
		{"control-char", "\"input_lens\": [1], \"output_lens\": [3], \"ttfts\": [0.5], \"errors\": [\"a\tb\"]}", true},
		{"duplicate-key", `"input_lens": [1], "output_lens": [3], "ttfts": [0.5], "input_lens": [7]}`, true},
		{"lax-summary", `"duration": 1.e5, "input_lens": [1], "output_lens": [3], "ttfts": [0.5]}`, true},
	}
	for _, c := range cases {
		in := []byte(head + c.body + "\n" + head + `"input_lens": [5], "output_lens": [6], "ttfts": [0.1]}` + "\n")
		if got := checkRoutes(t, c.name, in); got != c.fellBack {
			t.Errorf("%s: fell back %v, want %v", c.name, got, c.fellBack)
		}
	}
}

// TestVLLMBigInput reads an input past vllmInMemory (the temporary-file
// route of readWhole) and compares it with the reference route.
func TestVLLMBigInput(t *testing.T) {
	var b bytes.Buffer
	n := 15_000 // about 200 bytes each
	for b.Len() <= vllmInMemory {
		n *= 2
		b.Reset()
		writeVLLMBench(&b, n)
	}
	recs, runs, err, fellBack := vllmRead(t, b.Bytes(), false)
	if err != nil || fellBack || len(runs) != 1 || len(recs) != n {
		t.Fatalf("%d records, %d runs, err %v, fell back %v", len(recs), len(runs), err, fellBack)
	}
	if !strings.Contains(recs[n-1], fmt.Sprintf(`RequestID:"in#1/%d"`, n-1)) {
		t.Fatalf("last record %s", recs[n-1])
	}
	checkRoutes(t, "big", b.Bytes())
}

// writeVLLMBench writes a vllm bench serve --save-detailed result with n
// requests of 20 output gaps each (BenchmarkVLLMBench1M's input).
func writeVLLMBench(w interface {
	WriteString(string) (int, error)
}, n int) {
	arr := func(key string, elem func(i int) string) {
		w.WriteString(`, "` + key + `": [`)
		for i := range n {
			if i > 0 {
				w.WriteString(", ")
			}
			w.WriteString(elem(i))
		}
		w.WriteString("]")
	}
	w.WriteString(`{"date": "20250101-000000", "endpoint_type": "openai", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": ` + fmt.Sprint(n) + `, "request_rate": Infinity, "duration": 1234.5, "completed": ` + fmt.Sprint(n) + `, "failed": 0`)
	arr("input_lens", func(i int) string { return fmt.Sprint(100 + i%900) })
	arr("output_lens", func(i int) string { return fmt.Sprint(21 + i%7) })
	arr("ttfts", func(i int) string { return fmt.Sprint(0.05 + float64(i%97)/1000) })
	arr("itls", func(i int) string {
		var s strings.Builder
		s.WriteString("[")
		for j := range 20 {
			if j > 0 {
				s.WriteString(", ")
			}
			s.WriteString(fmt.Sprint(0.01 + float64((i+j)%13)/10000))
		}
		s.WriteString("]")
		return s.String()
	})
	arr("generated_texts", func(i int) string { return fmt.Sprintf(`"text %d"`, i%100) })
	arr("errors", func(i int) string {
		if i%1000 == 999 {
			return `"ReadTimeout"`
		}
		return `""`
	})
	arr("start_times", func(i int) string { return fmt.Sprint(1000 + float64(i)/100) })
	w.WriteString(fmt.Sprintf(`, "mean_ttft_ms": %v}`, math.Round(100)) + "\n")
}

// FuzzVLLMBenchRoutes: on any input the streaming route gives the
// reference route's records, runs and errors.
//
// Note: run it with a short -fuzzminimizetime (say 2s): minimizing a new
// 16 KiB input runs both routes thousands of times, and with the default
// 60 s the fuzzer shows 0 execs/s for as long.
func FuzzVLLMBenchRoutes(f *testing.F) {
	seed(f, "vllmbench", lambdaFile, er0080File)
	f.Fuzz(func(t *testing.T, data []byte) { checkRoutes(t, "fuzz", data) })
}
