package ingest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A side file that does not parse is named with the line where it fails:
// an engine-side run's meta.json (its deployment: fatal, nothing is
// written) and a client tool's summary beside its per-request file (a
// warning: the requests are kept, the run has no reported summary).
func TestSideFileErrorLine(t *testing.T) {
	write := func(t *testing.T, dir, name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(t *testing.T, path string) ([]trace.Run, Stats, error) {
		return Files([]string{path}, Options{}, func(*trace.Request) error { return nil }, func(*SyntaxError) {})
	}
	reqs, err := os.ReadFile("testdata/vllmengine/requests.jsonl")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("meta.json", func(t *testing.T) {
		dir := t.TempDir()
		main := write(t, dir, "requests.jsonl", string(reqs))
		meta := write(t, dir, "meta.json", "{\n  \"model\": \"m\",\n  \"engine_kwargs\": {\"tensor_parallel_size\": \"two\"}\n}\n")
		_, _, err := read(t, main)
		var se *SyntaxError
		if !errors.As(err, &se) || se.File != meta || se.Line != 3 || !strings.Contains(se.Msg, "tensor_parallel_size") {
			t.Errorf("error %v, want %s:3 naming tensor_parallel_size", err, meta)
		}
	})
	for _, c := range []struct{ name, main, mainBody, summary string }{
		{"aiperf", "p.jsonl", `{"metadata": {"x_request_id": "a", "timestamp_ns": 1000}, "metrics": {"ttft": {"value": 5, "unit": "ms"}, "request_latency": {"value": 9, "unit": "ms"}, "output_sequence_length": {"value": 3, "unit": "tokens"}, "input_sequence_length": {"value": 4, "unit": "tokens"}}, "error": null}` + "\n", "p_aiperf.json"},
		{"llmperf", "m_individual_responses.json", `[{"error_code": null, "error_msg": "", "ttft_s": 0.1, "end_to_end_latency_s": 0.5, "number_input_tokens": 4, "number_output_tokens": 3}]`, "m_summary.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			main := write(t, dir, c.main, c.mainBody)
			summary := write(t, dir, c.summary, "{\n  \"model\": \"m\",\n  \"num_concurrent_requests\": 2,\n  x\n}\n")
			runs, st, err := read(t, main)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 || len(runs[0].Reported) != 0 || st.Requests != 1 {
				t.Fatalf("runs %+v, %d requests", runs, st.Requests)
			}
			if len(st.Warnings) != 1 || st.Warnings[0].File != summary || st.Warnings[0].Line != 4 ||
				!strings.Contains(st.Warnings[0].Msg, "not kept") {
				t.Errorf("warnings %v, want one at %s:4", st.Warnings, summary)
			}
		})
	}
}

// FuzzVLLMEngineSideFiles reads the engine-side run of testdata with a
// fuzzed meta.json, the config.json above it and timeseries.csv: no
// panic; a failure is an error or a bad record naming the side file.
func FuzzVLLMEngineSideFiles(f *testing.F) {
	meta, err := os.ReadFile("testdata/vllmengine/meta.json")
	if err != nil {
		f.Fatal(err)
	}
	ts, err := os.ReadFile("testdata/vllmengine/timeseries.csv")
	if err != nil {
		f.Fatal(err)
	}
	reqs, err := os.ReadFile("testdata/vllmengine/requests.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(meta, []byte(`{"nodes": [{"instances": [{"hardware": "RTX4090", "num_npus": 1}]}]}`), ts)
	f.Add([]byte(`{"model": "m"}`), []byte(`{"nodes": 1}`), []byte("t,prompt_throughput\n"))
	f.Fuzz(func(t *testing.T, meta, config, ts []byte) {
		dir := t.TempDir()
		run := filepath.Join(dir, "run")
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"run/requests.jsonl": reqs, "run/meta.json": meta, "config.json": config, "run/timeseries.csv": ts} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		main := filepath.Join(run, "requests.jsonl")
		_, _, err := Files([]string{main}, Options{}, func(*trace.Request) error { return nil }, func(e *SyntaxError) {
			if e.File != main && e.File != filepath.Join(run, "timeseries.csv") || e.Line < 1 || e.Msg == "" {
				t.Fatalf("bad record %#v", e)
			}
		})
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || (se.File != filepath.Join(run, "meta.json") && se.File != filepath.Join(dir, "config.json")) || se.Line < 1 {
				t.Fatalf("error %v: not one naming a side file and line", err)
			}
		}
	})
}

// A whole-document input that breaks on line 4 is a bad record at line 4,
// not at line 1, whatever the format: a truncated 200 MB export names
// where it ends.
func TestWholeDocumentErrorLine(t *testing.T) {
	for _, c := range []struct{ format, head string }{
		{guideLLMName, `{"benchmarks": [`},
		{inferencePerfName, `{"load_summary": {"count": 1,`},
		{opalName, `{"finished_requests": 1,`},
		{genAIPerfName, `{"experiments": [`},
		{agenticName, `{"block_size": 16,`},
	} {
		input := c.head + "\n\n\n  \"x\": tru\n}\n"
		r, err := NewReader(strings.NewReader(input), "doc", Options{Format: c.format})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for r.Scan() {
			if e, ok := r.Record().(*SyntaxError); ok {
				got = append(got, e.Error())
			}
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], "doc:4: ") {
			t.Errorf("%s: %q, want one bad record at doc:4", c.format, got)
		}
	}
}
