package calibrate

import (
	"math"
	"strings"
	"testing"
)

// perRequest is a run with per-request data: its TTFT quantiles, p99
// among them.
func perRequest(label string, rate, p50, p99, uncal, cal float64) saturationInput {
	return saturationInput{label: label, rate: rate, uncal: uncal, cal: cal, targets: []Target{
		{Metric: MetricTTFT, Stat: "p50", Observed: p50}, {Metric: MetricTTFT, Stat: "p90", Observed: (p50 + p99) / 2},
		{Metric: MetricTTFT, Stat: "p99", Observed: p99}, {Metric: MetricITL, Stat: "p99", Observed: 5 * p99},
	}}
}

// summaryOnly is a run whose source reported only its median TTFT (and a
// median ITL above any threshold, which must not count).
func summaryOnly(label string, rate, p50, uncal, cal float64) saturationInput {
	return saturationInput{label: label, rate: rate, uncal: uncal, cal: cal, targets: []Target{
		{Metric: MetricTTFT, Stat: "p50", Observed: p50, Reported: true},
		{Metric: MetricE2E, Stat: "p50", Observed: 30, Reported: true},
	}}
}

func TestSaturation(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name     string
		runs     []saturationInput
		observed string
		uncal    SaturationVerdict
		cal      SaturationVerdict
		noOrder  string // a part of NoOrder
		states   []string
	}{
		{
			name: "per-request sweep, offline run and unordered input",
			runs: []saturationInput{
				perRequest("#5 rate=inf", inf, 50, 90, 80, 95), // offline: not a step
				perRequest("#3 rate=4", 4, 0.4, 1.5, 0.6, 1.2),
				perRequest("#1 rate=1", 1, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=2", 2, 0.2, 0.5, 0.3, 1.1),
				perRequest("#4 rate=8", 8, 2, 20, 1.2, 30),
			},
			observed: "rate 4",
			uncal:    SaturationVerdict{"rate 8", "1 step late"},
			cal:      SaturationVerdict{"rate 2", "1 step early"},
			states:   []string{satNo, satNo, satYes, satYes},
		},
		{
			// rate 8's median already exceeds 1 s, so its p99 does; the
			// lower rates report medians under 1 s and no p99.
			name: "summary-only sweep",
			runs: []saturationInput{
				summaryOnly("#1 rate=1", 1, 0.22, 0.3, 0.4),
				summaryOnly("#2 rate=2", 2, 0.24, 0.5, 0.7),
				summaryOnly("#3 rate=4", 4, 0.60, 0.9, 20),
				summaryOnly("#4 rate=8", 8, 124, 3, 60),
			},
			observed: "not determined: rate 1, 2, 4 or rate 8",
			uncal:    SaturationVerdict{"rate 8", "not determined"},
			cal:      SaturationVerdict{"rate 4", "not determined"},
			states:   []string{satUnknown, satUnknown, satUnknown, satYes},
		},
		{
			// DataCrunch 70B's shape: every median under 1 s, no p99.
			name: "summary-only sweep, none known saturated",
			runs: []saturationInput{
				summaryOnly("#1 rate=1", 1, 0.086, 0.1, 0.2),
				summaryOnly("#2 rate=2", 2, 0.088, 0.1, 0.3),
				summaryOnly("#3 rate=16", 16, 0.614, 0.5, 80),
			},
			observed: "not determined: rate 1, 2, 16 or none",
			uncal:    SaturationVerdict{"none", "not determined"},
			cal:      SaturationVerdict{"rate 16", "not determined"},
			states:   []string{satUnknown, satUnknown, satUnknown},
		},
		{
			// Per-request runs fix the lower steps; a summary-only run
			// between them leaves one step open.
			name: "mixed sweep",
			runs: []saturationInput{
				perRequest("#1 rate=1", 1, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=2", 2, 0.2, 0.5, 1.4, 0.4),
				summaryOnly("#3 rate=4", 4, 0.7, 0.9, 0.9),
				summaryOnly("#4 rate=8", 8, 1.3, 2, 0.95),
				perRequest("#5 rate=16", 16, 3, 40, 8, 0.99),
			},
			observed: "not determined: rate 4 or rate 8",
			uncal:    SaturationVerdict{"rate 2", "at least 1 step early"},
			cal:      SaturationVerdict{"none", "late: none saturated"},
			states:   []string{satNo, satNo, satUnknown, satYes, satYes},
		},
		{
			// A p99 of exactly the threshold does not exceed it.
			name: "no run saturated",
			runs: []saturationInput{
				perRequest("#1 rate=1", 1, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=2", 2, 0.2, 1.0, 0.3, 1.0),
			},
			observed: "none",
			uncal:    SaturationVerdict{"none", "none saturated, as observed"},
			cal:      SaturationVerdict{"none", "none saturated, as observed"},
			states:   []string{satNo, satNo},
		},
		{
			name: "replay saturates where no run did",
			runs: []saturationInput{
				perRequest("#1 rate=1", 1, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=2", 2, 0.2, 0.9, 1.01, 0.5),
			},
			observed: "none",
			uncal:    SaturationVerdict{"rate 2", "early: no run observed saturated"},
			cal:      SaturationVerdict{"none", "none saturated, as observed"},
			states:   []string{satNo, satNo},
		},
		{
			name: "two runs at one rate",
			runs: []saturationInput{
				perRequest("#1 rate=4 dataset=random", 4, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=4 dataset=sharegpt", 4, 0.1, 0.3, 0.2, 0.3),
				perRequest("#3 rate=8 dataset=random", 8, 0.1, 0.3, 0.2, 0.3),
			},
			noOrder: "#1 rate=4 dataset=random and #2 rate=4 dataset=sharegpt both ran at rate 4",
		},
		{
			name: "one finite rate",
			runs: []saturationInput{
				perRequest("#1 rate=4", 4, 0.1, 0.3, 0.2, 0.3),
				perRequest("#2 rate=inf", inf, 10, 30, 20, 30),
				perRequest("#3", math.NaN(), 10, 30, 20, 30),
			},
			noOrder: "one run at a finite request rate (#1 rate=4, rate 4), no sweep",
		},
		{
			name:    "no finite rate",
			runs:    []saturationInput{perRequest("#1", math.NaN(), 10, 30, 20, 30)},
			noOrder: "no run records a finite request rate",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sat := saturationOf(tc.runs, 1)
			line := sat.Line()
			if tc.noOrder != "" {
				if !strings.Contains(sat.NoOrder, tc.noOrder) || len(sat.Steps) != 0 || !strings.Contains(line, "no step order") {
					t.Errorf("no order %q, want it to say %q: %s", sat.NoOrder, tc.noOrder, line)
				}
				return
			}
			if sat.NoOrder != "" {
				t.Fatalf("no step order: %s", sat.NoOrder)
			}
			if sat.Observed != tc.observed || sat.Uncalibrated != tc.uncal || sat.Calibrated != tc.cal {
				t.Errorf("observed %q, uncalibrated %v, calibrated %v; want %q, %v, %v", sat.Observed, sat.Uncalibrated, sat.Calibrated,
					tc.observed, tc.uncal, tc.cal)
			}
			var states []string
			for i, st := range sat.Steps {
				states = append(states, st.Observed)
				if i > 0 && !(st.Rate > sat.Steps[i-1].Rate) {
					t.Errorf("steps not in rate order: %v", sat.Steps)
				}
			}
			if strings.Join(states, ",") != strings.Join(tc.states, ",") {
				t.Errorf("step states %v, want %v", states, tc.states)
			}
			for _, want := range []string{"p99 TTFT > 1 s", "observed " + tc.observed, tc.cal.Verdict, "Rule: "} {
				if !strings.Contains(line, want) {
					t.Errorf("line lacks %q: %s", want, line)
				}
			}
		})
	}
}

// TestObservedSaturationEvidence: what a run's observation rests on is
// said: its p99, a reported median over the threshold, or the figures
// that leave p99 unknown.
func TestObservedSaturationEvidence(t *testing.T) {
	for _, tc := range []struct {
		run             saturationInput
		state, evidence string
	}{
		{perRequest("a", 1, 0.1, 1.5, 0, 0), satYes, "p99 1.500 s"},
		{summaryOnly("b", 1, 1.292, 0, 0), satYes, "reported p50 1.292 s > 1.000 s, so p99 is too"},
		{summaryOnly("c", 1, 0.614, 0, 0), satUnknown, "only reported p50 0.614 s: p99 unknown"},
		{saturationInput{targets: []Target{{Metric: MetricQueue, Stat: "p99", Observed: 9}}}, satUnknown, "no TTFT quantile"},
	} {
		state, ev := observedSaturation(tc.run.targets, 1)
		if state != tc.state || ev != tc.evidence {
			t.Errorf("%s: %s, %q; want %s, %q", tc.run.label, state, ev, tc.state, tc.evidence)
		}
	}
}
