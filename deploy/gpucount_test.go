package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A cluster file's or a setting's hardware names its GPUs as a run
// records them ("4xH200"), as ingest --hardware takes it.
func TestHardwareGPUCount(t *testing.T) {
	hw := func(v string) Setting { return Setting{"hardware", v, "--hardware"} }
	for _, tc := range []struct {
		settings []Setting
		run      trace.Run
		tp, pp   int
		header   string
		note     string // a note Resolve must give, "" for none about the record's hardware or TP
	}{
		{[]Setting{hw("4xH200")}, trace.Run{}, 4, 1, "llama-3.1-8b on 4×h200 (TP4), vllm, 1 worker", ""},
		{[]Setting{hw("H100 x 2")}, trace.Run{}, 2, 1, "llama-3.1-8b on 2×h100 (TP2), vllm, 1 worker", ""},
		{[]Setting{hw("8xH200"), {"tp", 4, "--tp"}, {"pp", 2, "--pp"}}, trace.Run{}, 4, 2, "llama-3.1-8b on 8×h200 (TP4 PP2), vllm, 1 worker", ""},
		// A GPU alone keeps the record's count; named as the record's,
		// it is no change to note.
		{[]Setting{hw("H200")}, trace.Run{Name: "r", Model: "llama-3.1-8b", Hardware: "8xH200"}, 8, 1, "llama-3.1-8b on 8×h200 (TP8), vllm, 1 worker", ""},
		// The setting's count is the server's TP over the record's.
		{[]Setting{hw("2xH200")}, trace.Run{Name: "r", Model: "llama-3.1-8b", Hardware: "4xH200", TP: 4}, 2, 1, "llama-3.1-8b on 2×h200 (TP2), vllm, 1 worker",
			"run r: records tp 4; replayed with 2 (--hardware)"},
	} {
		s, err := Resolve(DefaultCluster(), tc.run, Overrides{Settings: tc.settings, Measured: tc.run.Name != ""})
		if err != nil {
			t.Errorf("%v: %v", tc.settings, err)
			continue
		}
		notes := strings.Join(s.Notes, "\n")
		if s.Cluster.TP != tc.tp || max(s.Cluster.PP, 1) != tc.pp || s.Header() != tc.header {
			t.Errorf("%v: TP %d PP %d, %s; want TP %d PP %d, %s", tc.settings, s.Cluster.TP, s.Cluster.PP, s.Header(), tc.tp, tc.pp, tc.header)
		}
		if tc.note != "" && !strings.Contains(notes, tc.note) {
			t.Errorf("%v: notes %q lack %q", tc.settings, notes, tc.note)
		}
		if tc.note == "" && strings.Contains(notes, "records hardware") {
			t.Errorf("%v: a note on the same hardware: %q", tc.settings, notes)
		}
	}

	_, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{Settings: []Setting{hw("8xH200"), {"tp", 4, "--tp"}}})
	if err == nil || err.Error() != "--hardware 8×h200: names 8 GPUs a server, but tp 4 × pp 1 × dp 1 are 4 (give the GPU alone, or parallel sizes that multiply to 8)" {
		t.Errorf("a count the parallel sizes contradict: %v", err)
	}
	c, err := ParseCluster("c.yaml", []byte("hardware: 2xA100-40GB\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, trace.Run{}, Overrides{})
	if err != nil || s.Header() != "llama-3.1-8b on 2×a100-40gb (TP2), vllm, 1 worker" {
		t.Errorf("a cluster file's count: %v, %v", err, s)
	}
	// From a cluster file, the refusal names the file and line.
	c, err = ParseCluster("c.yaml", []byte("tp: 4\nhardware: 8xH200\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(c, trace.Run{}, Overrides{}); err == nil ||
		err.Error() != "c.yaml:2: hardware: 8×h200: names 8 GPUs a server, but tp 4 × pp 1 × dp 1 are 4 (give the GPU alone, or parallel sizes that multiply to 8)" {
		t.Errorf("a cluster file's count its tp contradicts: %v", err)
	}
	if _, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{Settings: []Setting{hw("4xnope")}}); err == nil || !strings.Contains(err.Error(), `unknown hardware "nope"`) {
		t.Errorf("an unknown GPU with a count: %v", err)
	}
}
