package replay

import (
	"fmt"
	"math"
	"strings"
)

// An AutoscaleMetric is one metric the fleet is sized by, with its target
// per worker and, for scale to zero, its activation target (KEDA's
// activationThreshold: the metric's total is active above it).
//
// AutoscaleConfig.Metrics holds several, as an HPA's spec.metrics or a
// ScaledObject's triggers do: the HPA proposes a replica count for each
// (its computeReplicasForMetric: the current count while the metric's
// ratio to its target is within the tolerances) and takes the largest
// (computeReplicasForMetrics); KEDA's scale loop is active when any of
// them is (RequestScale: any trigger's IsActive).
type AutoscaleMetric struct {
	Metric           string  `yaml:"metric"`
	Target           float64 `yaml:"target"`
	ActivationTarget float64 `yaml:"activation_target,omitempty"`
}

// metricList returns the metrics the fleet is sized by: Metrics, or the
// one of Metric, Target and ActivationTarget.
func (a AutoscaleConfig) metricList() []AutoscaleMetric {
	if len(a.Metrics) > 0 {
		return a.Metrics
	}
	return []AutoscaleMetric{{a.Metric, a.Target, a.ActivationTarget}}
}

// MetricNames returns the metrics' names, joined by "+".
func (a AutoscaleConfig) MetricNames() string {
	var names []string
	for _, m := range a.metricList() {
		names = append(names, m.Metric)
	}
	return strings.Join(names, "+")
}

// validateMetrics checks the metrics: their names and targets, under the
// keys that gave them (autoscale.metric and autoscale.target, or
// autoscale.metrics with the metric's place).
func (a AutoscaleConfig) validateMetrics(bad func(field, format string, args ...any)) {
	list := len(a.Metrics) > 0
	if list && (a.Metric != "" || a.Target != 0 || a.ActivationTarget != 0) {
		bad("autoscale.metrics", "give metric and target, or metrics, not both")
	}
	for k, m := range a.metricList() {
		name, target, where := "autoscale.metric", "autoscale.target", ""
		if list {
			name, target, where = "autoscale.metrics", "autoscale.metrics", fmt.Sprintf("metric %d: ", k+1)
		}
		switch m.Metric {
		case MetricQueueDepth, MetricInFlight, MetricKVUsage, MetricRequestRate, MetricSLOAttainment, MetricITLAttainment:
		default:
			bad(name, "%sunknown metric %q (want %s, %s, %s, %s, %s or %s)", where, m.Metric, MetricQueueDepth, MetricInFlight, MetricKVUsage, MetricRequestRate, MetricSLOAttainment, MetricITLAttainment)
		}
		if !(m.Target > 0) || math.IsInf(m.Target, 0) {
			bad(target, "%s%v is not a positive number", where, m.Target)
		}
		if attainment(m.Metric) && !(m.Target <= 1) {
			bad(target, "%s%v is not an attainment in (0, 1]", where, m.Target)
		}
		if m.Metric == MetricSLOAttainment && !(a.SLOTTFTSec > 0) {
			bad("autoscale.slo_ttft_s", "slo_attainment needs a TTFT objective")
		}
		if m.Metric == MetricITLAttainment && !(a.SLOITLSec > 0) {
			bad("autoscale.slo_itl_s", "itl_slo_attainment needs an ITL objective")
		}
		if !(m.ActivationTarget >= 0) || math.IsInf(m.ActivationTarget, 0) {
			f := "autoscale.activation_target"
			if list {
				f = "autoscale.metrics"
			}
			bad(f, "%sactivation target %v is not a non-negative number", where, m.ActivationTarget)
		}
	}
}

// metricValue is metric m's value per worker over current replicas at an
// HPA sync.
func (e *engine) metricValue(a *pool, m AutoscaleMetric, current int) float64 {
	switch m.Metric {
	case MetricRequestRate:
		return float64(a.arrivals) / a.period.Seconds() / float64(current)
	case MetricSLOAttainment:
		if a.done == 0 {
			return m.Target // no completions: no signal
		}
		return float64(a.met) / float64(a.done)
	case MetricITLAttainment:
		if a.itlDone == 0 {
			return m.Target // no completions of two tokens: no signal
		}
		return float64(a.itlMet) / float64(a.itlDone)
	}
	v := e.metricTotal(a, m.Metric) / float64(current)
	if m.Metric == MetricKVUsage {
		v /= float64(a.k) // a server's is its ranks' mean
	}
	return v
}

// propose is the HPA's replica count for metric m at value over current
// replicas: current while the ratio to the target is within the
// tolerances, else ⌈current · ratio⌉ (the target over the value for
// the attainments, where more is better; none attained asks for all).
func (a *pool) propose(m AutoscaleMetric, current int, value float64) int {
	ratio := value / m.Target
	if attainment(m.Metric) {
		switch {
		case value == 0:
			ratio = math.Inf(1)
		default:
			ratio = m.Target / value
		}
	}
	// The HPA's Tolerances.isWithin.
	if 1-*a.cfg.ScaleDownTolerance <= ratio && ratio <= 1+*a.cfg.ScaleUpTolerance {
		return current
	}
	if math.IsInf(ratio, 1) {
		return a.cfg.MaxReplicas
	}
	return int(math.Ceil(float64(current) * ratio))
}

// attainment reports whether metric is a fraction of completions that met
// an objective (more is better).
func attainment(metric string) bool {
	return metric == MetricSLOAttainment || metric == MetricITLAttainment
}
