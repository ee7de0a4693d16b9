package replay

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// Scale to zero, as KEDA drives it (AutoscaleConfig.toZero): min_replicas
// 0 (KEDA's minReplicaCount 0) or idle_replicas 0 (idleReplicaCount). The
// HPA keeps the fleet within [max(min_replicas, 1), max_replicas]; every
// polling_interval_s KEDA's scale loop (its RequestScale) asks whether the
// metric's total is above activation_target (a scaler's
// activationThreshold: isActive is value > threshold) and
//   - active with no replicas: scales the fleet to max(min_replicas, 1)
//     and marks the time active (scaleFromZero);
//   - active otherwise: marks the time active (LastActiveTime);
//   - not active with replicas: scales to zero once cooldown_s has passed
//     since it was last active, or at once if it never was (scaleToZero:
//     a nil LastActiveTime does not wait).
//
// With no replicas the HPA does nothing (Kubernetes disables scaling of a
// target at zero). The workers taken away drain, as at any scale-down.
// A request that arrives while no worker is ready (the fleet at zero, or
// its first workers still starting) waits at the gateway, as the KEDA HTTP
// add-on's interceptor holds it, and goes to the router, in arrival
// order, when a worker is ready: its record's worker_arrival is then, its
// TTFT counts the wait; past gateway_timeout_s, when set, the gateway
// fails it (the interceptor's KEDA_CONDITION_WAIT_TIMEOUT). The gateway's
// held requests count in queue_depth and in_flight, as the interceptor's
// pending requests are what a fleet at zero is woken by; kv_usage comes
// from the workers alone, so validate refuses metrics of which none would
// wake a fleet at zero, and slo_attainment, a fraction with no total to be
// active, with scale to zero at all. A fleet at zero that nothing will
// wake rejects what it holds (strand) rather than polling for ever.
//
// Note: KEDA's scalers are polled; an HTTP add-on that pushes activity
// (its external-push scaler) wakes the fleet at once: a small
// polling_interval_s models it.

// toZero reports whether the fleet may scale to zero.
func (a AutoscaleConfig) toZero() bool {
	return a.MinReplicas != nil && *a.MinReplicas == 0 || a.IdleReplicas != nil
}

// hpaMin is the least fleet the HPA keeps: min_replicas, at least 1.
func (a *pool) hpaMin() int { return max(*a.cfg.MinReplicas, 1) }

// The autoscaler's events (evAutoscale's arg, modulo syncKinds; the
// HPA's sync of pool k is syncHPA + k·syncKinds: hpaSync).
const (
	syncHPA     int32 = iota // the HPA's sync
	syncKEDA                 // KEDA's poll of the metric (scale to zero)
	syncReady                // a worker's start-up ends: held requests may go
	syncGateway              // the gateway gives up on the requests held longest
	syncPlanner              // the planner's adjustment (planner.go)
	syncKinds
)

// hpaSync is the event arg of pool p's HPA sync.
func hpaSync(p *pool) int32 { return syncHPA + p.index*syncKinds }

func ptrInt(v int) *int { return &v }

// validateToZero checks the settings of scale to zero; given is the
// configuration before its defaults.
func (a AutoscaleConfig) validateToZero(given AutoscaleConfig, bad func(field, format string, args ...any)) {
	if a.IdleReplicas != nil {
		if *a.IdleReplicas != 0 {
			bad("autoscale.idle_replicas", "%d: KEDA takes 0 alone (the HPA cannot hold fewer replicas than its minimum otherwise)", *a.IdleReplicas)
		}
		if *a.MinReplicas < 1 {
			bad("autoscale.idle_replicas", "needs min_replicas of 1 or more, as KEDA's idleReplicaCount must be less than minReplicaCount")
		}
	}
	if !a.toZero() {
		for _, f := range []struct {
			name  string
			given bool
		}{
			{"activation_target", given.ActivationTarget != 0 || slices.ContainsFunc(given.Metrics, func(m AutoscaleMetric) bool { return m.ActivationTarget != 0 })},
			{"polling_interval_s", given.PollingIntervalSec != 0},
			{"cooldown_s", given.CooldownSec != nil},
			{"gateway_timeout_s", given.GatewayTimeoutSec != 0},
		} {
			if f.given {
				bad("autoscale."+f.name, "applies to scale to zero alone (min_replicas: 0 or idle_replicas: 0)")
			}
		}
		return
	}
	// Each metric's total is its activity, and one that the gateway's
	// held requests move must be among them.
	key, wakes := "autoscale.metric", false
	if len(a.Metrics) > 0 {
		key = "autoscale.metrics"
	}
	for _, m := range a.metricList() {
		switch m.Metric {
		case MetricSLOAttainment, MetricITLAttainment:
			bad(key, "%s is a fraction of completions, with no total to be active or not: scale to zero needs %s, %s or %s",
				m.Metric, MetricQueueDepth, MetricInFlight, MetricRequestRate)
		case MetricQueueDepth, MetricInFlight, MetricRequestRate:
			wakes = true
		}
	}
	if !wakes {
		bad(key, "%s comes from the workers alone, so a fleet at zero would never wake: scale to zero needs %s, %s or %s",
			a.MetricNames(), MetricQueueDepth, MetricInFlight, MetricRequestRate)
	}
	if !(a.PollingIntervalSec > 0) || a.PollingIntervalSec > 86400 {
		bad("autoscale.polling_interval_s", "%v is not a number of seconds in (0, 86400]", a.PollingIntervalSec)
	}
	if c := *a.CooldownSec; !(c >= 0) || c > 86400*365 {
		bad("autoscale.cooldown_s", "%v is not a number of seconds in [0, 31536000]", c)
	}
	if g := a.GatewayTimeoutSec; !(g >= 0) || g > 86400*365 {
		bad("autoscale.gateway_timeout_s", "%v is not a number of seconds in [0, 31536000]", g)
	}
}

// autoscaleEvent handles the autoscaler's event of kind arg at now.
func (e *engine) autoscaleEvent(now trace.Time, arg int32) error {
	switch arg % syncKinds {
	case syncHPA:
		e.autoscale(now, e.scale.pools[arg/syncKinds])
		return e.unhold(now)
	case syncKEDA:
		return e.pollKEDA(now)
	case syncGateway:
		return e.gatewayTimeouts(now)
	case syncPlanner:
		e.planAdjust(now)
		return nil
	default:
		e.promote(now)
		return e.unhold(now)
	}
}

// pollKEDA is KEDA's scale loop at now (see the comment at the top).
func (e *engine) pollKEDA(now trace.Time) error {
	e.promote(now)
	a := e.scale
	values, active := a.values[:0], false
	for _, m := range a.ms {
		v := float64(a.polled) / a.cfg.PollingIntervalSec
		if m.Metric != MetricRequestRate {
			v = e.metricTotal(a.pool, m.Metric)
		}
		values = append(values, v)
		active = active || v > m.ActivationTarget
	}
	a.values = values
	a.polled = 0
	ready, starting, _ := a.count()
	current := (ready + starting) / a.k
	switch {
	case active && current == 0:
		e.resize(now, a.pool, 0, min(a.hpaMin(), a.cfg.MaxReplicas), false)
		a.lastActive, a.wasActive = now, true
	case active:
		a.lastActive, a.wasActive = now, true
	case current > 0 && (!a.wasActive || now.Sub(a.lastActive) > trace.DurationSeconds(*a.cfg.CooldownSec)):
		e.resize(now, a.pool, current, 0, true)
	}
	e.promote(now)
	e.view.setReady(a)
	a.note(now)
	if !active && ready+starting == 0 && len(a.held) > 0 && !e.q.any(func(ev *event) bool { return ev.kind != evAutoscale }) {
		// Nothing is on its way (no arrival, timeout or worker) and
		// nothing else changes the metric: the held requests would
		// wait for ever, as behind an interceptor KEDA never wakes.
		if err := e.strand(now, values); err != nil {
			return err
		}
	}
	if !e.allDone() {
		e.q.push(now.Add(trace.DurationSeconds(a.cfg.PollingIntervalSec)), evAutoscale, syncKEDA)
	}
	return e.unhold(now)
}

// strand rejects the requests held at the gateway at now: the fleet is at
// zero and the metrics' totals, values, will stay at or below their
// activation targets.
func (e *engine) strand(now trace.Time, values []float64) error {
	a := e.scale
	var why []string
	for k, m := range a.ms {
		why = append(why, fmt.Sprintf("%s %g, not above activation_target %g", m.Metric, values[k], m.ActivationTarget))
	}
	msg := fmt.Sprintf("no worker: the fleet at zero never woke (%s, and nothing more on its way)", strings.Join(why, "; "))
	return e.failFront(now, len(a.held), msg)
}

// failFront rejects at now, with msg, the k requests held longest at the
// gateway.
func (e *engine) failFront(now trace.Time, k int, msg string) error {
	a := e.scale
	e.heldChanges(now)
	expired := a.held[:k]
	a.held = a.held[k:]
	for _, r := range expired {
		if err := e.failHeld(now, r, msg); err != nil {
			return err
		}
	}
	clear(expired) // recycled: the array holds them no longer
	return nil
}

// failHeld emits the record of request r, held at the gateway, rejected
// at now with msg, and sends its client's next request.
func (e *engine) failHeld(now trace.Time, r *reqState, msg string) error {
	if e.timeout > 0 {
		e.live[r.idx] = nil
	}
	o := e.rejected(now, r.in, r.idx, r.prompt, r.maxOut, r.sent, r.arrival, msg)
	idx := r.idx
	e.recycle(r)
	e.clientNext(now, idx)
	return e.emit(o)
}

// held reports whether request r, arrived at now, must wait at the
// gateway: no worker is ready, or earlier requests wait there still.
// Those go first once a worker is ready.
func (e *engine) held(now trace.Time, r *reqState) (bool, error) {
	a := e.scale
	a.polled++
	e.promote(now)
	if err := e.unhold(now); err != nil {
		return false, err
	}
	if len(e.view.ready) > 0 {
		return false, nil
	}
	r.worker = noWorker
	e.heldChanges(now)
	a.held = append(a.held, r)
	e.armGateway()
	return true, nil
}

// noWorker is the worker of a request held at the gateway.
const noWorker = -1

// unhold sends the requests held at the gateway to the router, in the
// order they came, while a worker is ready.
func (e *engine) unhold(now trace.Time) error {
	a := e.scale
	if len(a.held) > 0 && len(e.view.ready) > 0 {
		e.heldChanges(now)
	}
	for len(a.held) > 0 && len(e.view.ready) > 0 {
		r := a.held[0]
		a.held[0] = nil
		a.held = a.held[1:]
		e.stats.Held++
		e.stats.HeldMaxSec = max(e.stats.HeldMaxSec, now.Sub(r.arrival).Seconds())
		if err := e.dispatch(now, r); err != nil {
			return err
		}
	}
	if len(a.held) == 0 {
		a.held = nil // its front, sliced off, is not reused
	}
	return nil
}

// heldChanges adds the requests held at the gateway since the last change
// of their number to the per-second statistics, before it changes at now.
func (e *engine) heldChanges(now trace.Time) {
	a := e.scale
	if e.sec != nil && len(a.held) > 0 {
		e.sec.held(a.heldSince, now, len(a.held))
	}
	a.heldSince = now
}

// armGateway queues the gateway's timeout of the request held longest,
// when the gateway has one and no earlier event is queued: the held are
// in arrival order, so their timeouts come in that order too.
func (e *engine) armGateway() {
	a := e.scale
	if a.cfg.GatewayTimeoutSec == 0 || len(a.held) == 0 {
		return
	}
	at := a.held[0].arrival.Add(trace.DurationSeconds(a.cfg.GatewayTimeoutSec))
	if at < a.gateAt {
		a.gateAt = at
		e.q.push(at, evAutoscale, syncGateway)
	}
}

// gatewayTimeouts fails, at now, the held requests whose wait reached the
// gateway's timeout, and queues the next one's.
func (e *engine) gatewayTimeouts(now trace.Time) error {
	a := e.scale
	if now == a.gateAt {
		a.gateAt = never
	}
	wait := trace.DurationSeconds(a.cfg.GatewayTimeoutSec)
	k := 0
	for k < len(a.held) && now.Sub(a.held[k].arrival) >= wait {
		k++
	}
	if k > 0 {
		msg := fmt.Sprintf("no ready worker within autoscale.gateway_timeout_s (%g s): the gateway gave up, as the KEDA HTTP add-on's interceptor does", a.cfg.GatewayTimeoutSec)
		if err := e.failFront(now, k, msg); err != nil {
			return err
		}
	}
	e.armGateway()
	return nil
}

// dropHeld removes request r, whose client gave up at now, from the
// gateway.
func (e *engine) dropHeld(r *reqState, now trace.Time) {
	a := e.scale
	e.heldChanges(now)
	for i, h := range a.held {
		if h == r {
			a.held = append(a.held[:i], a.held[i+1:]...)
			return
		}
	}
}
