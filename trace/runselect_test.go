package trace

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func sweepRuns() []Run {
	mk := func(name, file string, rate float64, dataset string) Run {
		return Run{Name: name, File: "/data/" + file, Model: "llama-3.3-70b", TP: 4,
			Workload: &Workload{Dataset: dataset, InputLen: 1024, RequestRate: Rate(rate), NumPrompts: 300}}
	}
	return []Run{
		mk("online.jsonl#1", "online.jsonl", 1, "random"),
		mk("online.jsonl#2", "online.jsonl", 2, "random"),
		mk("online.jsonl#3", "online.jsonl", 8, "random"),
		mk("online.jsonl#4", "online.jsonl", 8, "sharegpt"),
		mk("offline.jsonl#1", "offline.jsonl", math.Inf(1), "random"),
	}
}

func TestSelectRuns(t *testing.T) {
	runs := sweepRuns()
	for _, tc := range []struct {
		sels []string
		want []int
	}{
		{nil, []int{0, 1, 2, 3, 4}},
		{[]string{"2"}, []int{1}},
		{[]string{"2-3"}, []int{1, 2}},
		{[]string{"online.jsonl#4"}, []int{3}},
		{[]string{"online*"}, []int{0, 1, 2, 3}},
		{[]string{"rate=8"}, []int{2, 3}},
		{[]string{"rate=8.0&dataset=random"}, []int{2}},
		{[]string{"rate=inf"}, []int{4}},
		{[]string{"rate=1", "rate=inf"}, []int{0, 4}}, // a union, in dataset order
		{[]string{"file=off*"}, []int{4}},
		{[]string{"tp=4&1"}, []int{0}},
	} {
		sels, err := ParseRunSelectors(tc.sels)
		if err != nil {
			t.Fatalf("%q: %v", tc.sels, err)
		}
		got, err := SelectRuns(runs, sels)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.sels, got, err, tc.want)
		}
	}
}

func TestSelectRunsErrors(t *testing.T) {
	for _, text := range []string{"rate=fast", "colour=red", "0", "3-1", "a&", "[", "rate"} {
		sel, err := ParseRunSelector(text)
		if err == nil {
			// "rate" is a valid name glob; it just matches nothing.
			if _, err = SelectRuns(sweepRuns(), []RunSelector{sel}); err == nil {
				t.Errorf("%q: no error", text)
			}
			continue
		}
		if !strings.Contains(err.Error(), text) {
			t.Errorf("%q: error %q does not quote the selector", text, err)
		}
	}
	sel, _ := ParseRunSelector("rate=3")
	_, err := SelectRuns(sweepRuns(), []RunSelector{sel})
	if err == nil || !strings.Contains(err.Error(), "#3 file=online.jsonl dataset=random rate=8") {
		t.Errorf("an empty selection does not list the runs by their labels: %v", err)
	}
	// Of many runs, the first runListMost, and a count of the rest.
	var many []Run
	for i := range 30 {
		many = append(many, Run{Name: fmt.Sprintf("r%d", i)})
	}
	_, err = SelectRuns(many, []RunSelector{sel})
	if err == nil || !strings.HasSuffix(err.Error(), "#12 r11; and 18 more)") || strings.Contains(err.Error(), "r12") {
		t.Errorf("30 runs, none picked: %v; want 12 listed and the rest counted", err)
	}
}

func TestRunLabels(t *testing.T) {
	got := RunLabels(sweepRuns())
	want := []string{
		"#1 file=online.jsonl dataset=random rate=1",
		"#2 file=online.jsonl dataset=random rate=2",
		"#3 file=online.jsonl dataset=random rate=8",
		"#4 file=online.jsonl dataset=sharegpt rate=8",
		"#5 file=offline.jsonl dataset=random rate=inf",
	}
	if !slices.Equal(got, want) {
		t.Errorf("labels:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := RunLabels(sweepRuns()[:1]); got[0] != "online.jsonl#1" {
		t.Errorf("one run is labelled %q, want its name", got[0])
	}
	same := []Run{{Name: "a"}, {Name: "b"}}
	if got := RunLabels(same); !slices.Equal(got, []string{"#1 a", "#2 b"}) {
		t.Errorf("runs alike but for their names: %q", got)
	}
}

func TestRunFieldLabels(t *testing.T) {
	if got, want := RunFieldLabels(sweepRuns()), RunLabels(sweepRuns()); !slices.Equal(got, want) {
		t.Errorf("a sweep: %q, want RunLabels' %q", got, want)
	}
	if got := RunFieldLabels(sweepRuns()[:1]); got != nil {
		t.Errorf("one run: %q, want none", got)
	}
	if got := RunFieldLabels([]Run{{Name: "a"}, {Name: "b"}}); got != nil {
		t.Errorf("runs alike but for their names: %q, want none (the labels would repeat the names)", got)
	}
}
