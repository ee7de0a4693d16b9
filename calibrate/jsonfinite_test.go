package calibrate

import (
	"encoding/json"
	"math"
	"testing"
)

// A replay whose every request was rejected has NaN statistics: the
// table's JSON must still be written, with null where a figure is
// undefined and every other field as encoding/json writes it.
func TestErrorTableJSONUndefined(t *testing.T) {
	rows := []ErrorRow{
		{Run: "r", Label: "#1 rate=4", Target: "ttft p50", Set: "holdout", Observed: 0.5, Uncalibrated: math.NaN(), Calibrated: 0.25, UncalErr: math.NaN(), CalErr: -0.5, Reported: true},
		{Run: "r", Label: "#2", Target: "itl p50", Set: "train", Observed: 0.1, Uncalibrated: math.Inf(1), Calibrated: 0.1, UncalErr: math.Inf(1), CalErr: 0},
	}
	sat := Saturation{ThresholdSec: 1, Steps: []SaturationStep{{Label: "#1 rate=4", Rate: 4, Observed: "unknown", Uncalibrated: math.NaN(), Calibrated: 2}}}
	b, err := json.Marshal(struct {
		Rows       []ErrorRow  `json:"rows"`
		Saturation *Saturation `json:"saturation"`
	}{rows, &sat})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rows":[` +
		`{"run":"r","label":"#1 rate=4","target":"ttft p50","set":"holdout","observed_s":0.5,"uncalibrated_s":null,"calibrated_s":0.25,"uncalibrated_rel_err":null,"calibrated_rel_err":-0.5,"reported":true},` +
		`{"run":"r","label":"#2","target":"itl p50","set":"train","observed_s":0.1,"uncalibrated_s":null,"calibrated_s":0.1,"uncalibrated_rel_err":null,"calibrated_rel_err":0}],` +
		`"saturation":{"threshold_s":1,"steps":[{"label":"#1 rate=4","rate":4,"observed":"unknown","evidence":"","uncalibrated_p99_s":null,"calibrated_p99_s":2}],` +
		`"observed":"","uncalibrated":{"step":"","verdict":""},"calibrated":{"step":"","verdict":""}}}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	// Finite figures are written byte for byte as without the methods:
	// the same fields, in the same order (a field added to either type
	// and not to its MarshalJSON fails here).
	type plainRow ErrorRow
	type plainStep SaturationStep
	for _, r := range []ErrorRow{{Run: "r", Label: "l", Target: "t", Set: "train", Observed: 0.5, Uncalibrated: 0.4, Calibrated: 0.45, UncalErr: -0.2, CalErr: -0.1, Reported: true}, {Observed: 1}} {
		got, _ := json.Marshal(r)
		old, _ := json.Marshal(plainRow(r))
		if string(got) != string(old) {
			t.Errorf("finite row:\n got %s\nwant %s", got, old)
		}
	}
	st := SaturationStep{Label: "l", Rate: 8, Observed: "saturated", Evidence: "p99 1.5 s", Uncalibrated: 0.3, Calibrated: 1.5}
	got, _ := json.Marshal(st)
	old, _ := json.Marshal(plainStep(st))
	if string(got) != string(old) {
		t.Errorf("finite step:\n got %s\nwant %s", got, old)
	}
}
