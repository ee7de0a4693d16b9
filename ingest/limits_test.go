package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// describeWith reads input in format with opts and describes every record
// as the corpus does.
func describeWith(t *testing.T, format, input string, opts Options) []string {
	t.Helper()
	opts.Format = format
	r, err := NewReader(strings.NewReader(input), "in", opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r.Scan() {
		switch rec := r.Record().(type) {
		case *trace.Request:
			got = append(got, "ok "+rec.RequestID)
		case *SyntaxError:
			got = append(got, rec.Error())
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMaxLineBytes: a line over the limit is a bad record at its line, in
// the middle of the input and as its last, unterminated line, in every
// line-oriented reader; the lines around it are read.
func TestMaxLineBytes(t *testing.T) {
	long := `{"timestamp": 1, "input_length": 10, "output_length": 10, "hash_ids": [` + strings.Repeat("1, ", 100_000) + `1]}`
	good := `{"timestamp": 2, "input_length": 10, "output_length": 10, "hash_ids": [1]}`
	opts := Options{MaxLineBytes: 1000}
	msg := fmt.Sprintf("line of %d bytes or more, longer than the limit of 1000 (--max-line-bytes)", len(long))
	got := describeWith(t, mooncakeName, good+"\n"+long+"\n"+good+"\n"+long, opts)
	want := []string{"ok in#1/0", "in:2: " + msg, "ok in#1/2", "in:4: " + msg}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mooncake:\n got %q\nwant %q", got, want)
	}

	aiperfGood := `{"metadata":{"x_request_id":"a","timestamp_ns":1000},"metrics":{"ttft":{"value":2,"unit":"ms"}},"error":null}`
	aiperfLong := `{"metadata":{"x_request_id":"b","timestamp_ns":1000},"metrics":{"inter_chunk_latency":{"value":[` + strings.Repeat("1,", 5000) + `1],"unit":"ms"}},"error":null}`
	got = describeWith(t, aiperfName, aiperfGood+"\n"+aiperfLong+"\n", Options{MaxLineBytes: 1000})
	want = []string{"ok a", fmt.Sprintf("in:2: line of %d bytes or more, longer than the limit of 1000 (--max-line-bytes)", len(aiperfLong))}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("aiperf:\n got %q\nwant %q", got, want)
	}

	sglangLong := `{"event": "request.finished", "rid": "` + strings.Repeat("x", 200_000) + `"}`
	got = describeWith(t, sglangMetricsName, sglangLong+"\n", Options{MaxLineBytes: 1000})
	want = []string{fmt.Sprintf("in:1: line of %d bytes or more, longer than the limit of 1000 (--max-line-bytes)", len(sglangLong))}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sglang-metrics:\n got %q\nwant %q", got, want)
	}

	engineLong := `{"request_id": "` + strings.Repeat("x", 200_000) + `"}`
	got = describeWith(t, vllmEngineName, "\n"+engineLong+"\n", Options{MaxLineBytes: 1000})
	want = []string{fmt.Sprintf("in:2: line of %d bytes or more, longer than the limit of 1000 (--max-line-bytes)", len(engineLong))}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("vllm-engine:\n got %q\nwant %q", got, want)
	}
}

// TestLineReaderExact: lines of exactly the limit are kept, one byte more
// is over, with \n or \r\n endings, across the reader's 64-KiB buffer.
func TestLineReaderExact(t *testing.T) {
	for _, max := range []int{10, 64 << 10, 100 << 10} {
		for _, eol := range []string{"\n", "\r\n"} {
			fit, over := strings.Repeat("a", max), strings.Repeat("b", max+1)
			lr := newLineReader(strings.NewReader(fit+eol+over+eol+"c"), max)
			var got []string
			for {
				line, ok := lr.next()
				if !ok {
					break
				}
				got = append(got, fmt.Sprintf("%d:%d", len(line), lr.over))
			}
			overLen := max + 1 + len(eol) - 1 // without the \n; a \r is counted
			if !bytes.Equal([]byte(fmt.Sprint(got)), []byte(fmt.Sprint([]string{fmt.Sprintf("%d:0", max), fmt.Sprintf("0:%d", overLen), "1:0"}))) {
				t.Errorf("max %d, eol %q: got %v", max, eol, got)
			}
		}
	}
}

// TestMaxDocumentBytes: an input of a whole-document format longer than
// --max-document-bytes is a fatal error naming the file and the limit,
// read no further, and one of exactly the limit is read; vLLM's input past
// the in-memory size (spilled to a temporary file) too.
func TestMaxDocumentBytes(t *testing.T) {
	vllm := func(n, pad int) []byte {
		var b bytes.Buffer
		b.WriteString(`{"backend": "vllm", "model_id": "m", "pad": "` + strings.Repeat("x", pad) + `", "completed": ` + fmt.Sprint(n) + `, "input_lens": [`)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("100")
		}
		b.WriteString(`], "output_lens": [` + strings.Repeat("5, ", n-1) + `5], "ttfts": [` + strings.Repeat("0.1, ", n-1) + `0.1]}`)
		return b.Bytes()
	}
	inputs := map[string][]byte{
		genAIPerfName:              readTestdata(t, "testdata/genaiperf/profile_export.json"),
		guideLLMName:               readTestdata(t, "testdata/guidellm/v0.2.json"),
		llmperfName:                readTestdata(t, "testdata/llmperf/m_10_5_individual_responses.json"),
		inferencePerfName:          readTestdata(t, "testdata/inferenceperf/per_request_lifecycle_metrics.json"),
		agenticName:                readTestdata(t, "testdata/agentic/session_a.json"),
		opalName:                   readTestdata(t, "testdata/opal/stage_0/opal_stats.json"),
		sglangBenchName:            readTestdata(t, "testdata/sglangbench/details.jsonl"),
		vllmBenchName:              vllm(3, 0),
		vllmBenchName + " spilled": vllm(3, vllmInMemory), // over vllmInMemory
	}
	for name, in := range inputs {
		format, _, _ := strings.Cut(name, " ")
		n := int64(len(in))
		count := func(max int64) (int, error) {
			r, err := NewReader(bytes.NewReader(in), "doc.json", Options{Format: format, MaxDocumentBytes: max})
			if err != nil {
				t.Fatal(err)
			}
			reqs := 0
			for r.Scan() {
				if _, ok := r.Record().(*trace.Request); ok {
					reqs++
				}
			}
			return reqs, r.Err()
		}
		if reqs, err := count(n); err != nil || reqs == 0 {
			t.Errorf("%s: %d bytes, limit %d: %d requests, %v", name, n, n, reqs, err)
		}
		want := fmt.Sprintf("doc.json: a whole JSON document over the limit of %d bytes (--max-document-bytes)", n-1)
		if reqs, err := count(n - 1); err == nil || err.Error() != want || !errors.Is(err, ErrDocumentTooLong) || reqs != 0 {
			t.Errorf("%s: limit %d: %d requests, error %v\nwant %s", name, n-1, reqs, err, want)
		}
	}
}

func readTestdata(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
