package calibrate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DefaultSaturationTTFT is the p99 TTFT above which a run counts as
// saturated: issue 13's "where p99 TTFT first exceeds 1 s".
const DefaultSaturationTTFT = 1.0

// SaturationRule says how a run's saturation is read from what it
// observed, as the outputs print it.
const SaturationRule = "a run reporting no p99 TTFT counts as saturated when a lower quantile it reports (p90, p50) exceeds the threshold, since p99 is at least as high, and as unknown otherwise"

// A Saturation is the load step of a sweep where p99 TTFT first exceeds
// a threshold, observed and as the uncalibrated and the calibrated
// replays predict it. The steps are the distinct finite request rates of
// the fitted and held-out runs, in increasing order; offline runs (rate
// inf) and runs that record no rate are not steps.
type Saturation struct {
	ThresholdSec float64          `yaml:"threshold_s" json:"threshold_s"`
	Steps        []SaturationStep `yaml:"steps" json:"steps"`
	// Observed is the step where the runs saturated: "rate 16", "none",
	// or, when runs before the first known saturated one report no p99,
	// the steps it may be ("not determined: rate 1, 2, 4 or rate 8").
	Observed     string            `yaml:"observed" json:"observed"`
	Uncalibrated SaturationVerdict `yaml:"uncalibrated" json:"uncalibrated"`
	Calibrated   SaturationVerdict `yaml:"calibrated" json:"calibrated"`
	// NoOrder, when set, says why the runs have no step order (fewer
	// than two finite rates, or two runs at one rate); nothing else is
	// then set but the threshold.
	NoOrder string `yaml:"no_order,omitempty" json:"no_order,omitempty"`
}

// A SaturationStep is one finite rate of a sweep: what its run observed
// and its replays' p99 TTFT (seconds).
type SaturationStep struct {
	Label string  `yaml:"label" json:"label"`
	Rate  float64 `yaml:"rate" json:"rate"`
	// Observed is "saturated", "not saturated" or "unknown"; Evidence
	// says from which figure ("p99 1.234 s", "reported p50 1.292 s").
	Observed     string  `yaml:"observed" json:"observed"`
	Evidence     string  `yaml:"evidence" json:"evidence"`
	Uncalibrated float64 `yaml:"uncalibrated_p99_s" json:"uncalibrated_p99_s"`
	Calibrated   float64 `yaml:"calibrated_p99_s" json:"calibrated_p99_s"`
}

// A SaturationVerdict is where a replay saturates and how that compares
// with the observed step: "same step", "1 step early", "2 steps late",
// "none saturated, as observed", or, when the observed step is not
// determined, "at least 1 step early", "not determined" and the like.
type SaturationVerdict struct {
	Step    string `yaml:"step" json:"step"`
	Verdict string `yaml:"verdict" json:"verdict"`
}

// The observed states of a step.
const (
	satYes     = "saturated"
	satNo      = "not saturated"
	satUnknown = "unknown"
)

// saturationInput is one run for saturationOf: its label, request rate
// (NaN when unrecorded), observed targets, and its replays' p99 TTFT.
type saturationInput struct {
	label      string
	rate       float64
	targets    []Target
	uncal, cal float64
}

// observedSaturation reads whether a run's p99 TTFT exceeded threshold
// from its targets, by SaturationRule.
func observedSaturation(ts []Target, threshold float64) (state, evidence string) {
	byStat := map[string]Target{}
	for _, t := range ts {
		if t.Metric == MetricTTFT {
			byStat[t.Stat] = t
		}
	}
	if t, ok := byStat["p99"]; ok {
		state = satNo
		if t.Observed > threshold {
			state = satYes
		}
		return state, "p99 " + seconds(t.Observed)
	}
	var shown []string
	for _, s := range []string{"p90", "p50"} {
		t, ok := byStat[s]
		if !ok {
			continue
		}
		if t.Observed > threshold {
			return satYes, fmt.Sprintf("%s %s > %s, so p99 is too", reportedName(t), seconds(t.Observed), seconds(threshold))
		}
		shown = append(shown, reportedName(t)+" "+seconds(t.Observed))
	}
	if len(shown) == 0 {
		return satUnknown, "no TTFT quantile"
	}
	return satUnknown, "only " + strings.Join(shown, ", ") + ": p99 unknown"
}

func reportedName(t Target) string {
	if t.Reported {
		return "reported " + t.Stat
	}
	return t.Stat
}

func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) + " s" }

// saturationOf finds the saturation step of runs at threshold (seconds).
func saturationOf(runs []saturationInput, threshold float64) *Saturation {
	sat := &Saturation{ThresholdSec: threshold}
	var steps []saturationInput
	for _, r := range runs {
		if !math.IsNaN(r.rate) && !math.IsInf(r.rate, 0) {
			steps = append(steps, r)
		}
	}
	slices.SortStableFunc(steps, func(a, b saturationInput) int { return cmp.Compare(a.rate, b.rate) })
	for i := 1; i < len(steps); i++ {
		if steps[i].rate == steps[i-1].rate {
			sat.NoOrder = fmt.Sprintf("%s and %s both ran at rate %s", steps[i-1].label, steps[i].label, rateText(steps[i].rate))
			return sat
		}
	}
	switch len(steps) {
	case 0:
		sat.NoOrder = "no run records a finite request rate"
		return sat
	case 1:
		sat.NoOrder = fmt.Sprintf("one run at a finite request rate (%s, rate %s), no sweep", steps[0].label, rateText(steps[0].rate))
		return sat
	}
	n := len(steps)
	// The observed first saturated step lies in [lo, hi]: hi is the
	// first step known saturated (n: none), lo the first step before it
	// that may be (unknown), else hi.
	lo, hi := -1, n
	for i, s := range steps {
		state, ev := observedSaturation(s.targets, threshold)
		sat.Steps = append(sat.Steps, SaturationStep{Label: s.label, Rate: s.rate, Observed: state, Evidence: ev,
			Uncalibrated: s.uncal, Calibrated: s.cal})
		if state == satUnknown && lo < 0 && hi == n {
			lo = i
		}
		if state == satYes && hi == n {
			hi = i
		}
	}
	if lo < 0 {
		lo = hi
	}
	name := func(i int) string {
		if i == n {
			return "none"
		}
		return "rate " + rateText(steps[i].rate)
	}
	if lo == hi {
		sat.Observed = name(hi)
	} else {
		// The candidates: the unknown steps before hi, then hi.
		var cands []string
		for i := lo; i < hi; i++ {
			if sat.Steps[i].Observed == satUnknown {
				cands = append(cands, rateText(steps[i].rate))
			}
		}
		last := "or rate " + rateText(steps[min(hi, n-1)].rate)
		if hi == n {
			last = "or none"
		}
		sat.Observed = fmt.Sprintf("not determined: rate %s %s", strings.Join(cands, ", "), last)
	}
	first := func(p99 func(SaturationStep) float64) int {
		for i, s := range sat.Steps {
			if p99(s) > threshold {
				return i
			}
		}
		return n
	}
	verdict := func(k int) SaturationVerdict {
		v := SaturationVerdict{Step: name(k)}
		switch {
		case lo == hi && k == hi && k == n:
			v.Verdict = "none saturated, as observed"
		case lo == hi && k == hi:
			v.Verdict = "same step"
		case k < lo && lo == n:
			v.Verdict = "early: no run observed saturated"
		case k < lo:
			v.Verdict = stepsText(lo-k, lo != hi) + " early"
		case k > hi && k == n:
			v.Verdict = "late: none saturated"
		case k > hi:
			v.Verdict = stepsText(k-hi, false) + " late"
		default:
			v.Verdict = "not determined"
		}
		return v
	}
	sat.Uncalibrated = verdict(first(func(s SaturationStep) float64 { return s.Uncalibrated }))
	sat.Calibrated = verdict(first(func(s SaturationStep) float64 { return s.Calibrated }))
	return sat
}

// stepsText is "1 step", "2 steps", "at least 1 step".
func stepsText(k int, atLeast bool) string {
	s := strconv.Itoa(k) + " step"
	if k != 1 {
		s += "s"
	}
	if atLeast {
		s = "at least " + s
	}
	return s
}

func rateText(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

// Line is the saturation verdict as one line of text: the threshold,
// the observed step and each replay's step and verdict, then why any
// step's observation is unknown.
func (s *Saturation) Line() string { return s.line("saturation") }

// line is Line with its first word given ("**Saturation**" in Markdown).
func (s *Saturation) line(word string) string {
	head := fmt.Sprintf("%s (first rate whose p99 TTFT > %s s): ", word, strconv.FormatFloat(s.ThresholdSec, 'g', -1, 64))
	if s.NoOrder != "" {
		return head + "no step order: " + s.NoOrder
	}
	var b strings.Builder
	b.WriteString(head)
	fmt.Fprintf(&b, "observed %s; uncalibrated %s (%s); calibrated %s (%s)",
		s.Observed, s.Uncalibrated.Step, s.Uncalibrated.Verdict, s.Calibrated.Step, s.Calibrated.Verdict)
	var steps []string
	for _, st := range s.Steps {
		steps = append(steps, fmt.Sprintf("rate %s: %s (%s), replayed p99 %s uncalibrated, %s calibrated", rateText(st.Rate), st.Observed, st.Evidence,
			seconds(st.Uncalibrated), seconds(st.Calibrated)))
	}
	fmt.Fprintf(&b, ". Steps: %s. Rule: %s.", strings.Join(steps, "; "), SaturationRule)
	return b.String()
}
