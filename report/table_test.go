package report

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/trace"
)

// A run of a sweep is shown by its name and by what sets it apart; a
// measured run by the deployment recorded with it.
func TestSummaryRunLabelAndDeployment(t *testing.T) {
	run := trace.Run{Name: "sweep.jsonl#3", Source: "sglang-bench", Model: "llama-3.1-405b",
		Hardware: "8xH200", TP: 8, Engine: "sglang", Extra: map[string]string{"engine_opt.mem_fraction_static": "0.87"}}
	s := analyze.Summarize(run, nil)
	s.Label = "#3 rate=4"
	var b strings.Builder
	if err := WriteStats(&b, []*analyze.Summary{s}, StatsOptions{}); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"Run:                                     sweep.jsonl#3 (#3 rate=4)\n",
		"Deployment:                              llama-3.1-405b on 8xH200 (TP8) sglang --mem_fraction_static=0.87\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	js, err := AnalysesJSON([]*analyze.Analysis{{Summary: s}}, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"run": "sweep.jsonl#3",` + "\n    \"label\": \"#3 rate=4\",",
		`"deployment": "llama-3.1-405b on 8xH200 (TP8) sglang --mem_fraction_static=0.87"`,
	} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %q:\n%s", want, js)
		}
	}

	// Nothing but a backend recorded: no deployment line, and a run
	// without a label keeps the plain Run line and no label key.
	bare := analyze.Summarize(trace.Run{Name: "a.json", Engine: "vllm"}, nil)
	b.Reset()
	if err := WriteStats(&b, []*analyze.Summary{bare}, StatsOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Deployment:") || !strings.Contains(b.String(), "Run:                                     a.json    \n") {
		t.Errorf("a bare run:\n%s", b.String())
	}
	if js, _ := AnalysesJSON([]*analyze.Analysis{{Summary: bare}}, StatsOptions{}); strings.Contains(string(js), `"label"`) {
		t.Errorf("a run without a label has one in JSON:\n%s", js)
	}
}
