package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

const (
	lambdaFile = "formats/vllm_bench_serve/LambdaLabsML_vllm-benchmark_Meta-Llama-3-8B-Instruct_tp1_len2048.json"
	er0080File = "formats/vllm_bench_serve/er0080_vllm-benchmarking_vllm_sweep_v0.25.1_run0.json"
	convFile   = "traces/mooncake/conversation_trace.jsonl"
	synthFile  = "traces/mooncake/synthetic_trace.jsonl"
)

// readAll reads an input completely, failing on fatal errors.
func readAll(t testing.TB, r Reader) (reqs []*trace.Request, bad []*SyntaxError) {
	t.Helper()
	for r.Scan() {
		switch rec := r.Record().(type) {
		case *trace.Request:
			if err := rec.Validate(); err != nil {
				t.Errorf("%v: accepted request fails Validate: %v", rec.RequestID, err)
			}
			reqs = append(reqs, rec.Clone())
		case *SyntaxError:
			bad = append(bad, rec)
		case *Warning:
		default:
			t.Fatalf("unexpected record %T", rec)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return reqs, bad
}

func openFile(t *testing.T, path string, opts Options) Reader {
	t.Helper()
	r, c, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return r
}

func TestDetectRealFiles(t *testing.T) {
	for _, tc := range []struct{ rel, want string }{
		{lambdaFile, "vllm-bench"},
		{er0080File, "vllm-bench"},
		{convFile, "mooncake"},
		{synthFile, "mooncake"},
	} {
		path := shareddata.Path(t, tc.rel)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, format, err := Detect(f, path, "")
		f.Close()
		if err != nil || format.Name != tc.want {
			t.Errorf("Detect(%s) = %q, %v; want %s", tc.rel, format.Name, err, tc.want)
		}
	}
}

func TestDetectOtherFormats(t *testing.T) {
	// Real files that are not traces must not be taken for one.
	for _, rel := range []string{
		"formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_405b_sglang.sh.txt",
		"formats/SOURCES.md",
	} {
		path := shareddata.Path(t, rel)
		_, _, err := Open(path, Options{})
		if !errors.Is(err, ErrUnrecognized) {
			t.Errorf("Open(%s) = %v; want unrecognized", rel, err)
		}
	}
}

func TestDetectUnrecognized(t *testing.T) {
	for _, in := range []string{"# README\n\nThis is not a trace.\n", "\x00\x01\x02 random bytes \xff"} {
		_, _, err := Detect(strings.NewReader(in), "x.txt", "auto")
		want := "x.txt: unrecognized trace format (tried " + strings.Join(Names(), ", ") + "); use --format"
		if err == nil || err.Error() != want {
			t.Errorf("Detect(%q) error = %v; want %q", in, err, want)
		}
	}
	if _, _, err := Detect(strings.NewReader(" \n"), "e.json", ""); err == nil || err.Error() != "e.json: empty file: unrecognized trace format" {
		t.Errorf("empty input: %v", err)
	}
	if _, _, err := Detect(strings.NewReader("{}"), "x", "nope"); err == nil || !strings.Contains(err.Error(), `unknown format "nope"`) {
		t.Errorf("unknown --format: %v", err)
	}
}

func TestFormatOverride(t *testing.T) {
	// A mooncake line without hash_ids and with keys in another order is
	// still mooncake with --format.
	in := `{"output_length": 3, "input_length": 5, "timestamp": 7.5}` + "\n"
	r, err := NewReader(strings.NewReader(in), "x", Options{Format: "mooncake", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	reqs, bad := readAll(t, r)
	if len(bad) != 0 || len(reqs) != 1 {
		t.Fatalf("got %d requests, %d bad", len(reqs), len(bad))
	}
	want := `request_id="x#1/0" run="x#1" source="mooncake" status="ok" input_tokens=5 output_tokens=3 block_size=16 arrival_s=0.007500000 output_tokens_source="requested"`
	if got := reqs[0].String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestGzip(t *testing.T) {
	path := shareddata.Path(t, lambdaFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	plain, err := NewReader(bytes.NewReader(raw), "a.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	zipped, err := NewReader(&z, "a.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := readAll(t, plain)
	got, _ := readAll(t, zipped)
	if len(got) != 10 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gzip input read differently: %d vs %d requests", len(got), len(want))
	}
}

func TestLambdaLabs(t *testing.T) {
	path := shareddata.Path(t, lambdaFile)
	r := openFile(t, path, Options{})
	reqs, bad := readAll(t, r)
	if len(bad) != 0 {
		t.Fatalf("bad records: %v", bad)
	}
	if len(reqs) != 10 {
		t.Fatalf("got %d requests, want 10", len(reqs))
	}
	runs := r.Runs()
	if len(runs) != 1 {
		t.Fatalf("got %d runs", len(runs))
	}
	run := runs[0]
	name := filepath.Base(path) + "#1"
	if run.Name != name || run.Model != "meta-llama/Meta-Llama-3-8B-Instruct" || run.Backend != "vllm" ||
		run.DurationSec != trace.Some(5.3666093360079685) || run.Extra["date"] != "20240907-082731" {
		t.Errorf("run = %+v", run)
	}
	if w := run.Workload; w == nil || w.NumPrompts != 10 || !math.IsInf(float64(w.RequestRate), 1) {
		t.Errorf("workload = %+v", w)
	}
	for _, k := range []string{`"input_lens"`, `"itls"`, `"generated_texts"`, `"errors"`} {
		if bytes.Contains(run.Reported, []byte(k)) {
			t.Errorf("Reported keeps %s", k)
		}
	}
	if !bytes.HasPrefix(run.Reported, []byte(`{"date":"20240907-082731","backend":"vllm",`)) ||
		!bytes.Contains(run.Reported, []byte(`"mean_tpot_ms":11.105466039313557`)) {
		t.Errorf("Reported = %s", run.Reported)
	}
	// Sums match the run's own totals (output lengths were re-tokenized).
	var in, out int64
	for _, q := range reqs {
		in += q.InputTokens.V
		out += q.OutputTokens.V
		if q.Run != name || q.E2ESec.OK || q.Arrival.OK || q.E2EBasis != trace.E2EStreamEnd ||
			q.OutputTokensSource != trace.OutputRetokenized || q.ITLUnit != trace.ITLChunk {
			t.Errorf("request %s: %s", q.RequestID, q)
		}
	}
	if in != 1369 || out != 1867 {
		t.Errorf("tokens in/out = %d/%d, want 1369/1867", in, out)
	}
	// Every per-request value equals the source file's, read in place
	// and decoded independently here (the file has no licence: no copy
	// of its values is committed).
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var src struct {
		InputLens  []int64     `json:"input_lens"`
		OutputLens []int64     `json:"output_lens"`
		TTFTs      []float64   `json:"ttfts"`
		ITLs       [][]float64 `json:"itls"`
		Errors     []string    `json:"errors"`
	}
	if err := json.Unmarshal(raw, &src); err != nil {
		t.Fatal(err)
	}
	for i, q := range reqs {
		if q.RequestID != fmt.Sprintf("%s/%d", name, i) || q.InputTokens != trace.Some(src.InputLens[i]) ||
			q.OutputTokens != trace.Some(src.OutputLens[i]) || q.TTFTSec != trace.Some(src.TTFTs[i]) ||
			fmt.Sprint(q.ITLSec) != fmt.Sprint(src.ITLs[i]) || len(q.ITLSec) != len(src.ITLs[i]) ||
			q.Error != src.Errors[i] || q.Model != "meta-llama/Meta-Llama-3-8B-Instruct" || q.TTFTBasis != trace.TTFTFirstChunk {
			t.Errorf("request %d differs from the file: %s", i, q)
		}
		for j, g := range src.ITLs[i] {
			if q.ITLSec[j] != g {
				t.Errorf("request %d gap %d = %v, file %v", i, j, q.ITLSec[j], g)
			}
		}
	}
}

func TestER0080SummaryOnly(t *testing.T) {
	path := shareddata.Path(t, er0080File)
	r := openFile(t, path, Options{Run: "sweep"})
	reqs, bad := readAll(t, r)
	if len(reqs) != 0 || len(bad) != 0 {
		t.Fatalf("got %d requests, %d bad", len(reqs), len(bad))
	}
	runs := r.Runs()
	if len(runs) != 1 {
		t.Fatalf("got %d runs", len(runs))
	}
	run := runs[0]
	if run.Name != "sweep#1" || run.Model != "facebook/opt-125m" || run.Backend != "openai" ||
		run.Extra["endpoint_type"] != "openai" || run.DurationSec != trace.Some(1.3653671270003542) {
		t.Errorf("run = %+v", run)
	}
	if w := run.Workload; w == nil || w.Concurrency != 2 || w.Burstiness != 1 || w.NumPrompts != 8 {
		t.Errorf("workload = %+v", w)
	}
	if !bytes.Contains(run.Reported, []byte(`"p99_e2el_ms":876.8009717071254,"run_number":0,"max_num_seqs":4}`)) {
		t.Errorf("Reported = %s", run.Reported)
	}
}

func TestMooncakeConversation(t *testing.T) {
	path := shareddata.Path(t, convFile)
	r := openFile(t, path, Options{})
	var n, in, out int64
	var last trace.Time
	for r.Scan() {
		q, ok := r.Record().(*trace.Request)
		if !ok {
			t.Fatalf("bad record: %v", r.Record())
		}
		n++
		in += q.InputTokens.V
		out += q.OutputTokens.V
		if q.Arrival.V < last {
			t.Errorf("%s: arrival goes back", q.RequestID)
		}
		last = q.Arrival.V
		if q.BlockSize.V != 512 || len(q.HashIDs) != int((q.InputTokens.V+511)/512) {
			t.Errorf("%s: %d hash ids for %d tokens", q.RequestID, len(q.HashIDs), q.InputTokens.V)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 12031 {
		t.Errorf("rows = %d, want 12031", n)
	}
	if m := math.Round(float64(in) / float64(n)); m != 12035 {
		t.Errorf("mean input = %v, want 12035", m)
	}
	if m := math.Round(float64(out) / float64(n)); m != 343 {
		t.Errorf("mean output = %v, want 343", m)
	}
	if runs := r.Runs(); len(runs) != 1 || runs[0].BlockSize != 512 || runs[0].Source != "mooncake" {
		t.Errorf("runs = %+v", runs)
	}
}

func TestMooncakeGolden(t *testing.T) {
	path := "testdata/mooncake/few.jsonl"
	r := openFile(t, path, Options{})
	reqs, bad := readAll(t, r)
	var b strings.Builder
	for _, q := range reqs {
		fmt.Fprintln(&b, q)
	}
	for _, e := range bad {
		fmt.Fprintln(&b, e)
	}
	golden.Check(t, path+".string", []byte(b.String()))
}
