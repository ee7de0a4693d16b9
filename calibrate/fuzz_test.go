package calibrate

import (
	"errors"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		cm, err := ParseCostModel("cm.yaml", data)
		if err != nil {
			return
		}
		for name, c := range cm.Coefficients {
			if _, ok := coefUnits[name]; !ok || !(c.Value > 0) {
				t.Fatalf("accepted coefficient %s = %+v", name, c)
			}
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
