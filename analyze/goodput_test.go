package analyze

import "testing"

// FuzzParseSLO: --goodput never panics, and what it accepts prints back
// to the same objectives.
func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"ttft:200", "ttft:200 tpot:50", "e2el:1000,tpot:0", "tpot:1e3", ":", "ttft:-1", "x:1", "ttft:NaN", "tpot:inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slo, err := ParseSLO([]string{s})
		if err != nil {
			return
		}
		again, err := ParseSLO([]string{slo.String()})
		if err != nil || again != slo {
			t.Errorf("%q → %q → %+v, %v", s, slo.String(), again, err)
		}
	})
}
