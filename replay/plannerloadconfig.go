package replay

import (
	"cmp"
	"fmt"
	"math"
)

// The dynamo policy's settings (plannerload.go): its optimization
// targets and their thresholds, what each takes and refuses, and an
// aggregated fleet's planner (Config.Planner).

// Optimization targets of the dynamo policy (PlannerConfig.
// OptimizationTarget).
const (
	TargetThroughput = "throughput"
	TargetLatency    = "latency"
	TargetLoad       = "load"
)

// validateLoad reports what the dynamo policy cannot take in p (its
// defaults set no SLA setting, so any is the file's).
func (p PlannerConfig) validateLoad(key string, agg bool, bad func(field, format string, args ...any)) {
	for _, f := range []struct {
		name  string
		given bool
	}{{"ttft_s", p.TTFTSec != 0}, {"itl_s", p.ITLSec != 0}, {"predictor", p.Predictor != ""}, {"predictor_log1p", p.PredictorLog1p},
		{"kalman_q_level", p.KalmanQLevel != 0}, {"kalman_q_trend", p.KalmanQTrend != 0}, {"kalman_r", p.KalmanR != 0},
		{"no_correction", p.NoCorrection}} {
		if f.given {
			bad(key+f.name, "an SLA planner setting: policy %s scales on load thresholds (policy %s takes it)", PlannerDynamoLoad, PlannerDynamoSLA)
		}
	}
	thresholds := p.PrefillScaleUpQueueTokens != nil || p.PrefillScaleDownQueueTokens != nil || p.DecodeScaleUpKVRate != nil || p.DecodeScaleDownKVRate != nil
	switch t := p.OptimizationTarget; t {
	case "", TargetThroughput, TargetLatency:
		if thresholds {
			bad(key+"optimization_target", "%s has its own thresholds: the queue tokens and KV rates are optimization_target load's", cmp.Or(t, TargetThroughput))
		}
	case TargetLoad:
		up, down, kvUp, kvDown := p.PrefillScaleUpQueueTokens, p.PrefillScaleDownQueueTokens, p.DecodeScaleUpKVRate, p.DecodeScaleDownKVRate
		if agg {
			// Dynamo's aggregated mode decides on the KV demand alone.
			switch {
			case up != nil || down != nil:
				bad(key+"prefill_scale_up_queue_tokens", "an aggregated fleet scales on its engines' KV demand alone (decode_scale_up_kv_rate, decode_scale_down_kv_rate)")
			case kvUp == nil || kvDown == nil:
				bad(key+"optimization_target", "load needs decode_scale_up_kv_rate and decode_scale_down_kv_rate")
			case !(*kvDown >= 0 && *kvUp > *kvDown && *kvUp <= 100):
				bad(key+"decode_scale_up_kv_rate", "%v %% is not above decode_scale_down_kv_rate (%v %%, 0 or more) and at most 100", *kvUp, *kvDown)
			}
			return
		}
		switch {
		case up == nil || down == nil || kvUp == nil || kvDown == nil:
			bad(key+"optimization_target", "load needs prefill_scale_up_queue_tokens, prefill_scale_down_queue_tokens, decode_scale_up_kv_rate and decode_scale_down_kv_rate")
		case *down < 0 || *up <= *down:
			bad(key+"prefill_scale_up_queue_tokens", "%d tokens is not above prefill_scale_down_queue_tokens (%d, 0 or more)", *up, *down)
		case !(*kvDown >= 0 && *kvUp > *kvDown && *kvUp <= 100):
			bad(key+"decode_scale_up_kv_rate", "%v %% is not above decode_scale_down_kv_rate (%v %%, 0 or more) and at most 100", *kvUp, *kvDown)
		}
	default:
		bad(key+"optimization_target", "%q is not %s, %s or %s", t, TargetThroughput, TargetLatency, TargetLoad)
	}
}

// validatePlanner reports what c's planner of an aggregated fleet
// (Config.Planner) cannot be: its own settings, and the fleet it sizes.
func (c Config) validatePlanner(bad func(field, format string, args ...any)) {
	p := c.Planner.withDefaults()
	if !p.on() {
		return
	}
	p.validate("planner.", true, bad)
	switch {
	case c.Disaggregation.on():
		bad("planner", "sizes an aggregated fleet: with disaggregation, disaggregation.planner sizes the pools")
	case c.Autoscale.on():
		bad("planner", "sizes the fleet: not with autoscale")
	case c.Workers%p.replicaWorkers() != 0:
		bad("planner", "the fleet's workers (%d) are not whole engines of %d workers each", c.Workers, p.replicaWorkers())
	case c.Workers*p.GPUsPerWorker > p.MaxGPUBudget:
		bad("planner.max_gpu_budget", "%d GPUs, fewer than the %d workers at the start take", p.MaxGPUBudget, c.Workers)
	}
}

// mostAgg is the most engines of an aggregated fleet the budget allows.
func (p PlannerConfig) mostAgg() int { return p.MaxGPUBudget / p.engineGPUs(false) }

// poolAgg is the AutoscaleConfig that stands for the planner in the
// autoscaler's one pool of an aggregated fleet.
func (p PlannerConfig) poolAgg() AutoscaleConfig {
	a := p.pool(false)
	a.MaxReplicas = p.mostAgg()
	return a
}

// loadThresholds are a target's: a prefill engine's load scales its pool
// up at up or more, down when every engine's is below down (at most
// down when downAtMost); a decode engine's up above kvUp (at kvUp or
// more when kvUpAt), down below kvDown (at most kvDown when
// kvDownAtMost).
type loadThresholds struct {
	up, down, kvUp, kvDown           float64
	perContext                       bool // prefill load in context lengths (else tokens)
	downAtMost, kvUpAt, kvDownAtMost bool
}

// thresholds returns the dynamo policy's thresholds for p's target.
func (p PlannerConfig) thresholds() loadThresholds {
	switch p.OptimizationTarget {
	case TargetLatency:
		return loadThresholds{up: 0.1, down: 0, kvUp: 0.4, kvDown: 0.1, perContext: true, downAtMost: true}
	case TargetLoad:
		// An aggregated fleet's has no prefill thresholds.
		value := func(v *int64) float64 {
			if v == nil {
				return math.NaN()
			}
			return float64(*v)
		}
		return loadThresholds{up: value(p.PrefillScaleUpQueueTokens), down: value(p.PrefillScaleDownQueueTokens),
			kvUp: *p.DecodeScaleUpKVRate / 100, kvDown: *p.DecodeScaleDownKVRate / 100, downAtMost: true, kvUpAt: true, kvDownAtMost: true}
	}
	return loadThresholds{up: 1, down: 0.1, kvUp: 1, kvDown: 0.6, perContext: true}
}

// ThresholdsText says the dynamo policy's thresholds (of p with its
// defaults; of an aggregated fleet's planner when agg), for the replay's
// summary: "prefill queue ≥ 1 × context
// length up, all < 0.1 × context length down; decode KV demand > 100 %
// up, all < 60 % down".
func (p PlannerConfig) ThresholdsText(agg bool) string {
	th := p.withDefaults().thresholds()
	if agg {
		// "KV demand with queued prompts > 100 % up, all < 60 % down"
		return fmt.Sprintf("KV demand with queued prompts %s %g %% up, all %s %g %% down",
			sign(th.kvUpAt, ">", "≥"), 100*th.kvUp, sign(th.kvDownAtMost, "<", "≤"), 100*th.kvDown)
	}
	amount := func(v float64) string {
		if th.perContext {
			return fmt.Sprintf("%g × context length", v)
		}
		return fmt.Sprintf("%g tokens", v)
	}
	return fmt.Sprintf("prefill queue ≥ %s up, all %s %s down; decode KV demand %s %g %% up, all %s %g %% down",
		amount(th.up), sign(th.downAtMost, "<", "≤"), amount(th.down), sign(th.kvUpAt, ">", "≥"), 100*th.kvUp,
		sign(th.kvDownAtMost, "<", "≤"), 100*th.kvDown)
}

// sign returns inclusive when or, else strict: a threshold's comparison.
func sign(or bool, strict, inclusive string) string {
	if or {
		return inclusive
	}
	return strict
}
