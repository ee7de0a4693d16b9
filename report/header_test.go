package report

import (
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// An autoscaled replay's fleet (its "fleet" extra key, a line a pool) is
// a header line of its dataset, the lines joined; a run without one adds
// none.
func TestDatasetHeaderFleet(t *testing.T) {
	runs := []trace.Run{
		{Name: "a", Source: "simulated", Extra: map[string]string{"deployment": "m on 1×h100 (TP1), vllm, 2 workers",
			"fleet": "pools autoscaled: 0.120 GPU-hours\nprefill pool (autoscaled on queue_depth): ready workers 1.00 to 4.00", "gpu_hours": "0.12"}},
		{Name: "b", Source: "simulated", Extra: map[string]string{"deployment": "m on 1×h100 (TP1), vllm, 2 workers"}},
	}
	var fleet *headerItem
	for _, it := range datasetHeader(runs) {
		if it.Label == "fleet" {
			fleet = &it
		}
	}
	want := []string{"pools autoscaled: 0.120 GPU-hours; prefill pool (autoscaled on queue_depth): ready workers 1.00 to 4.00"}
	if fleet == nil || !slices.Equal(fleet.Values, want) {
		t.Errorf("fleet header %+v, want %q", fleet, want)
	}
	for _, it := range datasetHeader(runs[1:]) {
		if it.Label == "fleet" {
			t.Errorf("a run without a fleet has the header line %+v", it)
		}
	}
}
