package replay

import (
	"math"

	"github.com/opaltrace/opaltrace/trace"
)

// A ScalingPolicy bounds how fast the fleet may change, as an HPA's
// behavior.scaleUp.policies and behavior.scaleDown.policies do: by Value
// replicas (pods) or Value percent of the replicas at the period's start
// (percent) within any PeriodSec.
type ScalingPolicy struct {
	Type      string  `yaml:"type"` // pods or percent
	Value     int     `yaml:"value"`
	PeriodSec float64 `yaml:"period_s"`
}

// Scaling policy types and selections (HPA's Pods and Percent; Max, Min
// and Disabled).
const (
	PolicyPods      = "pods"
	PolicyPercent   = "percent"
	SelectMax       = "max"
	SelectMin       = "min"
	SelectDisabled  = "disabled"
	maxPolicyPeriod = 1800 // seconds, as the HPA's validation allows
)

// The HPA's default behavior (k8s.io/kubernetes pkg/apis/autoscaling/v2
// defaults): up by 4 replicas or 100 % within 15 s, whichever is more;
// down by 100 % within 15 s.
func defaultScaleUpPolicies() []ScalingPolicy {
	return []ScalingPolicy{{PolicyPods, 4, 15}, {PolicyPercent, 100, 15}}
}

func defaultScaleDownPolicies() []ScalingPolicy {
	return []ScalingPolicy{{PolicyPercent, 100, 15}}
}

// validatePolicies checks the policies and the selection of one
// direction (field: scale_up or scale_down).
func validatePolicies(field string, ps []ScalingPolicy, sel string, bad func(field, format string, args ...any)) {
	switch sel {
	case SelectMax, SelectMin, SelectDisabled:
	default:
		bad("autoscale."+field+"_select_policy", "unknown selection %q (want %s, %s or %s)", sel, SelectMax, SelectMin, SelectDisabled)
	}
	if len(ps) == 0 {
		bad("autoscale."+field+"_policies", "must hold at least one policy, as an HPA's")
	}
	for i, p := range ps {
		switch p.Type {
		case PolicyPods, PolicyPercent:
		default:
			bad("autoscale."+field+"_policies", "policy %d: unknown type %q (want %s or %s)", i+1, p.Type, PolicyPods, PolicyPercent)
		}
		if p.Value <= 0 || p.Value > math.MaxInt32 {
			bad("autoscale."+field+"_policies", "policy %d: value %d is not a whole number from 1 to %d (an HPA's int32)", i+1, p.Value, math.MaxInt32)
		}
		if !(p.PeriodSec > 0) || p.PeriodSec > maxPolicyPeriod {
			bad("autoscale."+field+"_policies", "policy %d: period_s %v is not in (0, %d]", i+1, p.PeriodSec, maxPolicyPeriod)
		}
	}
}

// A scaleEvent is a change of the replicas asked for, as the HPA stores
// them (storeScaleEvent): by how many, and when.
type scaleEvent struct {
	at     trace.Time
	change int
}

// changedWithin returns the replicas events added within period before
// now: those after now − period, as the HPA's getReplicasChangePerPeriod
// counts them.
func changedWithin(events []scaleEvent, now trace.Time, period float64) int {
	cutoff := now.Add(-trace.DurationSeconds(period))
	n := 0
	for _, e := range events {
		if e.at > cutoff {
			n += e.change
		}
	}
	return n
}

// limit returns the most replicas the scale-up policies allow (up) or the
// fewest the scale-down ones do (!up) from current at now, as the HPA's
// calculateScaleUpLimitWithScalingRules and
// calculateScaleDownLimitWithBehaviors: per policy, from the replicas at
// its period's start (current less what was added within it plus what
// was removed), and the most change (max) or the least (min) among them;
// disabled allows no change.
func (a *pool) limit(now trace.Time, current int, up bool) int {
	ps, sel := a.cfg.ScaleUpPolicies, a.cfg.ScaleUpSelectPolicy
	if !up {
		ps, sel = a.cfg.ScaleDownPolicies, a.cfg.ScaleDownSelectPolicy
	}
	if sel == SelectDisabled {
		return current
	}
	// Up, max takes the largest limit, min the smallest; down, max
	// (the most change) takes the smallest, min the largest.
	most := (sel == SelectMax) == up
	result, first := 0, true
	for _, p := range ps {
		start := current - changedWithin(a.ups, now, p.PeriodSec) + changedWithin(a.downs, now, p.PeriodSec)
		var proposed int
		switch {
		case up && p.Type == PolicyPods:
			proposed = start + p.Value
		case up:
			// Rounded up, as the HPA does, so that a small fleet
			// can grow at all.
			proposed = int(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		case p.Type == PolicyPods:
			proposed = start - p.Value
		default:
			// Truncated, as the HPA's int32 conversion does.
			proposed = int(float64(start) * (1 - float64(p.Value)/100))
		}
		if first || (most && proposed > result) || (!most && proposed < result) {
			result, first = proposed, false
		}
	}
	return result
}

// rateLimit bounds a stabilized recommendation by the policies and the
// replica range, as the HPA's convertDesiredReplicasWithBehaviorRate
// does: a limit that would move the fleet the other way holds it where
// it is.
func (a *pool) rateLimit(now trace.Time, current, desired int) int {
	switch {
	case desired > current:
		most := min(a.cfg.MaxReplicas, max(a.limit(now, current, true), current))
		return min(desired, most)
	case desired < current:
		least := max(a.hpaMin(), min(a.limit(now, current, false), current))
		return max(desired, least)
	}
	return desired
}

// scaled records a change of the replicas asked for from before to after
// at now, as the HPA's storeScaleEvent does (store).
func (a *pool) scaled(now trace.Time, before, after int) {
	switch {
	case after > before:
		a.ups = store(a.ups, scaleEvent{now, after - before}, a.cfg.ScaleUpPolicies)
	case after < before:
		a.downs = store(a.downs, scaleEvent{now, before - after}, a.cfg.ScaleDownPolicies)
	}
}

// store adds ev to the events of its direction, whose policies are ps, as
// the HPA's storeScaleEvent does: in the place of the last event older
// than ps's longest period (markScaleEventsOutdated's), else at the end.
//
// Note: one old event gives way per new one, and the others stay and
// still count where a period reaches them: a scale-down policy of a
// longer period than the scale-up ones counts the scale-ups within it
// that no later scale-up replaced, as the HPA does.
func store(events []scaleEvent, ev scaleEvent, ps []ScalingPolicy) []scaleEvent {
	longest := 0.0
	for _, p := range ps {
		longest = max(longest, p.PeriodSec)
	}
	cutoff := ev.at.Add(-trace.DurationSeconds(longest))
	old := -1
	for i, e := range events {
		if e.at < cutoff {
			old = i
		}
	}
	if old >= 0 {
		events[old] = ev
		return events
	}
	return append(events, ev)
}
