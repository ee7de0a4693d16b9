package calibrate

import (
	"errors"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
)

func FuzzParseTable(f *testing.F) {
	f.Add([]byte(`{"1024": 0.0173629, "2048": 0.0361147}`))
	f.Add([]byte("prompt_tokens,seconds,cached_tokens\n# comment\n512,0.01,0\n1024\t0.02\t128\n"))
	f.Add([]byte(`{"x": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		pts, err := ParseTable("t", data)
		if err != nil {
			var te *TableError
			if !errors.As(err, &te) || te.Line < 1 {
				t.Fatalf("error %v is not a TableError with a line", err)
			}
			return
		}
		for _, p := range pts {
			if p.Tokens <= 0 || p.Context < 0 || !(p.Seconds > 0) {
				t.Fatalf("accepted %+v", p)
			}
		}
	})
}

func FuzzParseCostModel(f *testing.F) {
	f.Add([]byte("opaltrace_cost_model: 1\nform: roofline\ncoefficients:\n  mfu: {value: 0.5, unit: x, from: y}\n"))
	f.Add([]byte("opaltrace_cost_model: 1\nform: opal\ncoefficients:\n  opal_a: {value: 4}\n"))
	dep := deployment(f, "llama-3.1-8b")
	f.Fuzz(func(t *testing.T, data []byte) {
		cm, err := ParseCostModel("cm.yaml", data)
		if err != nil {
			return
		}
		for name, c := range cm.Coefficients {
			lo, hi, _ := coefRange(name)
			if _, ok := coefUnits[name]; !ok || !(c.Value >= lo && c.Value <= hi) {
				t.Fatalf("accepted coefficient %s = %+v", name, c)
			}
		}
		// Whatever is accepted prices a step, and the largest batch a
		// worker runs, at a positive time that did not overflow.
		d := *dep
		sm, err := cm.StepModel(&d)
		if err != nil {
			return
		}
		b := &model.Batch{Prefill: []model.PrefillChunk{{Tokens: 8192, Context: 120_000}}, Decode: make([]int64, 1024)}
		if st := sm.StepTime(b); st <= 0 || st > 100*time.Hour {
			t.Fatalf("accepted %v: a step takes %v", cm.Coefficients, st)
		}
		if _, err := cm.Marshal(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestParseTableErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\n\"1024\": 0.02,\n\"x\": 1\n}", `t:3: prompt_len: key "x" is not an integer`},
		{"{\n\"1024\": -1\n}", "t:2: seconds: -1 is not a positive duration"},
		{"{\n\"1024\": \"fast\"\n}", "t:2: 1024: value fast is not a number of seconds"},
		{"{\"10\": 1, \"10\": 2}", "t:1: prompt_len: 10 appears twice"},
		{"n,s\n100,0.1\nabc,0.2\n", `t:3: prompt_tokens: "abc" is not an integer`},
		{"100,0.1,5,6\n", "t:1: row: 4 columns"},
		{"100,x\n", `t:1: seconds: "x" is not a number`},
		{"{}", "t:1: table: no measurements"},
		{"", "t:1: table: no measurements"},
	} {
		_, err := ParseTable("t", []byte(tc.in))
		if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
			t.Errorf("ParseTable(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	pts, err := ParseTable("t", []byte("n,s,c\n2048,0.2,0\n512,0.05,0\n512,0.04,64\n"))
	if err != nil || len(pts) != 3 || pts[0].Tokens != 512 || pts[1].Tokens != 2048 || pts[2].Context != 64 {
		t.Errorf("sorted points %+v, %v", pts, err)
	}
}

// TestParseCostModelErrors: every bad cost model is an error naming the
// file, the line and the key, with its exact text.
func TestParseCostModelErrors(t *testing.T) {
	head := "opaltrace_cost_model: 1\nform: roofline\ncoefficients:\n"
	for _, tc := range []struct{ in, want string }{
		{head + "  mfu: {value: 2}\n", "cm.yaml:4: coefficients.mfu: 2 is not a fraction of peak in [0.001, 1]"},
		{head + "  bandwidth_efficiency: {value: 1.5, from: replay fit}\n  mfu: {value: 2.5, from: replay fit}\n", "cm.yaml:4: coefficients.bandwidth_efficiency: 1.5 is not a fraction of peak in [0.001, 1]"},
		{head + "  mfu: {value: 1e-300}\n", "cm.yaml:4: coefficients.mfu: 1e-300 is not a fraction of peak in [0.001, 1]"},
		{head + "  step_overhead_s: {value: 1e-4}\n  nvme_latency_s: {value: 1e300}\n", "cm.yaml:5: coefficients.nvme_latency_s: 1e+300 is not a time in seconds (1 ns to an hour) in [1e-09, 3600]"},
		{head + "  pcie_bandwidth_bytes_per_s: {value: 1e-300}\n", "cm.yaml:4: coefficients.pcie_bandwidth_bytes_per_s: 1e-300 is not a bandwidth in B/s (1 MB/s to 1 PB/s) in [1e+06, 1e+15]"},
		{head + "  bandwidth_efficiency: {value: .nan}\n", "cm.yaml:4: coefficients.bandwidth_efficiency: NaN is not a fraction of peak in [0.001, 1]"},
		{head + "  opal_a: {value: -4}\n", "cm.yaml:4: coefficients.opal_a: -4 is not a FLOP coefficient in [0.001, 1e+06]"},
		{head + "  mfu_typo: {value: 0.5}\n", "cm.yaml:4: coefficients.mfu_typo: unknown coefficient"},
		{"opaltrace_cost_model: 2\n", "cm.yaml:1: opaltrace_cost_model: version 2, want 1"},
		{"opaltrace_cost_model: 1\nform: magic\n", `cm.yaml:2: form: "magic", want roofline or opal`},
		{"opaltrace_cost_model: 1\n\nextra: 1\n", "cm.yaml:3: extra: unknown key"},
		{"", "cm.yaml:1: empty cost model (want opaltrace_cost_model: 1 and coefficients)"},
		{"# nothing\n", "cm.yaml:1: empty cost model (want opaltrace_cost_model: 1 and coefficients)"},
		{head + "  mfu: {value: 0.5}\n---\nopaltrace_cost_model: 1\n", "cm.yaml:5: a second YAML document: a cost model is one document"},
	} {
		_, err := ParseCostModel("cm.yaml", []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}
