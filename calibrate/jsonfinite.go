package calibrate

import (
	"encoding/json"
	"math"
)

// JSON has no NaN or infinity, and encoding/json refuses to write them,
// so the error table's JSON would fail as a whole when one replay
// produced no statistic (every request of it rejected: its quantiles are
// NaN). The figures that can be undefined are written as null instead,
// as pandas' to_json writes a missing value; YAML keeps .nan and .inf.

// finite returns v, or nil when v is NaN or infinite.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// MarshalJSON writes r with null for an undefined figure, its fields in
// ErrorRow's order.
func (r ErrorRow) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Run          string   `json:"run"`
		Label        string   `json:"label"`
		Target       string   `json:"target"`
		Set          string   `json:"set"`
		Observed     *float64 `json:"observed_s"`
		Uncalibrated *float64 `json:"uncalibrated_s"`
		Calibrated   *float64 `json:"calibrated_s"`
		UncalErr     *float64 `json:"uncalibrated_rel_err"`
		CalErr       *float64 `json:"calibrated_rel_err"`
		Reported     bool     `json:"reported,omitempty"`
	}{r.Run, r.Label, r.Target, r.Set, finite(r.Observed), finite(r.Uncalibrated), finite(r.Calibrated), finite(r.UncalErr), finite(r.CalErr), r.Reported})
}

// MarshalJSON writes s with null for an undefined figure, its fields in
// SaturationStep's order. A step's rate is finite by construction
// (offline runs are not steps).
func (s SaturationStep) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Label        string   `json:"label"`
		Rate         float64  `json:"rate"`
		Observed     string   `json:"observed"`
		Evidence     string   `json:"evidence"`
		Uncalibrated *float64 `json:"uncalibrated_p99_s"`
		Calibrated   *float64 `json:"calibrated_p99_s"`
	}{s.Label, s.Rate, s.Observed, s.Evidence, finite(s.Uncalibrated), finite(s.Calibrated)})
}
