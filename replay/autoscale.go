package replay

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// An AutoscaleConfig sizes the fleet as Kubernetes' Horizontal Pod
// Autoscaler does (KEDA drives the same algorithm from external metrics):
// every SyncPeriodSec it sums Metric over the ready workers, divides by
// the replicas asked for (an AverageValue target) and recommends
// ⌈replicas · value / target⌉ (target / value for slo_attainment, where
// more is better), unless the ratio is within the tolerances of 1; a
// scale-up takes the least recommendation of the last
// ScaleUpStabilizationSec, a scale-down the greatest of the last
// ScaleDownStabilizationSec; the scaling policies then bound the change
// (ScaleUpPolicies, ScaleDownPolicies: the HPA's behavior policies, its
// defaults up by 4 replicas or 100 % within 15 s, whichever is more, and
// down by 100 % within 15 s), and the result is clamped to [MinReplicas,
// MaxReplicas]. A new worker is ready ContainerStartSec plus its weights
// over the storage link (WeightsGB / StorageGBps) after it is asked for,
// with an empty KV cache; scale-down takes starting workers first, then
// the newest ready ones (as a ReplicaSet deletes pods), which drain: no
// new requests, and they stop when their last request leaves.
// Config.Workers is the fleet at the start.
type AutoscaleConfig struct {
	// Metric is queue_depth (waiting requests per worker), in_flight
	// (waiting and running requests per worker: vLLM's
	// num_requests_waiting plus num_requests_running), kv_usage
	// (fraction of KV blocks in use), request_rate (arrivals per second
	// per worker over the last sync period), slo_attainment (fraction
	// of the requests completed in the last sync period whose TTFT met
	// SLOTTFTSec) or itl_slo_attainment (MetricITLAttainment: whose
	// mean ITL met SLOITLSec); "" turns autoscaling off.
	Metric string  `yaml:"metric,omitempty"`
	Target float64 `yaml:"target,omitempty"`
	// Metrics, in place of Metric and Target (and ActivationTarget),
	// sizes the fleet by several metrics at once (autoscalemetrics.go).
	Metrics []AutoscaleMetric `yaml:"metrics,omitempty"`

	// MinReplicas is the least fleet (default 1); 0 lets the fleet
	// scale to zero as KEDA does (scaletozero.go), the HPA's own least
	// then 1. A pointer, so that 0 is a fleet.
	MinReplicas *int `yaml:"min_replicas,omitempty"`
	MaxReplicas int  `yaml:"max_replicas,omitempty"` // default Workers
	// IdleReplicas is KEDA's idleReplicaCount: set (to 0, the one value
	// KEDA takes), the fleet of MinReplicas ≥ 1 goes to zero when idle
	// and wakes to MinReplicas.
	IdleReplicas *int `yaml:"idle_replicas,omitempty"`
	// KEDA's scale to zero: every PollingIntervalSec (default 30 s) the
	// metric's total (not per worker) is active when above
	// ActivationTarget (activationThreshold, default 0); an active
	// metric wakes a fleet at zero, and a fleet that has not been
	// active for CooldownSec (cooldownPeriod, default 300 s) goes to
	// zero.
	ActivationTarget   float64  `yaml:"activation_target,omitempty"`
	PollingIntervalSec float64  `yaml:"polling_interval_s,omitempty"`
	CooldownSec        *float64 `yaml:"cooldown_s,omitempty"`
	// GatewayTimeoutSec bounds a request's wait at the gateway for a
	// ready worker (0: none): past it the gateway fails the request, as
	// the KEDA HTTP add-on's interceptor does after its
	// KEDA_CONDITION_WAIT_TIMEOUT (1.5 s there by default).
	GatewayTimeoutSec float64 `yaml:"gateway_timeout_s,omitempty"`
	// SyncPeriodSec is the HPA controller's sync period (default 15 s).
	SyncPeriodSec float64 `yaml:"sync_period_s,omitempty"`
	// Tolerance is the HPA's (its controller's
	// --horizontal-pod-autoscaler-tolerance, default 0.1): no change
	// while the metric's ratio to the target is within it of 1.
	// ScaleUpTolerance and ScaleDownTolerance, when set, replace it on
	// their side of 1 (behavior.scaleUp.tolerance and
	// behavior.scaleDown.tolerance, Kubernetes 1.33's configurable
	// tolerance): the ratio r changes nothing while 1 − down ≤ r ≤ 1 +
	// up. Pointers, so that 0 is a tolerance.
	Tolerance          *float64 `yaml:"tolerance,omitempty"`
	ScaleUpTolerance   *float64 `yaml:"scale_up_tolerance,omitempty"`
	ScaleDownTolerance *float64 `yaml:"scale_down_tolerance,omitempty"`
	// Stabilisation windows (HPA behavior defaults: 0 s up, 300 s down).
	ScaleUpStabilizationSec   *float64 `yaml:"scale_up_stabilization_s,omitempty"`
	ScaleDownStabilizationSec *float64 `yaml:"scale_down_stabilization_s,omitempty"`
	// Scaling policies and how one is chosen among them (max: the one
	// allowing the most change, min: the least, disabled: no change
	// that way), as behavior.scaleUp and behavior.scaleDown set them
	// (default: the HPA's, autoscalepolicy.go).
	ScaleUpPolicies       []ScalingPolicy `yaml:"scale_up_policies,omitempty"`
	ScaleUpSelectPolicy   string          `yaml:"scale_up_select_policy,omitempty"`
	ScaleDownPolicies     []ScalingPolicy `yaml:"scale_down_policies,omitempty"`
	ScaleDownSelectPolicy string          `yaml:"scale_down_select_policy,omitempty"`

	// Start-up time of a new worker: container start plus the weights
	// over the storage link.
	ContainerStartSec float64 `yaml:"container_start_s,omitempty"`
	WeightsGB         float64 `yaml:"weights_gb,omitempty"`
	StorageGBps       float64 `yaml:"storage_gbps,omitempty"`

	// SLOTTFTSec is the TTFT objective of slo_attainment, SLOITLSec
	// the ITL objective of itl_slo_attainment.
	SLOTTFTSec float64 `yaml:"slo_ttft_s,omitempty"`
	SLOITLSec  float64 `yaml:"slo_itl_s,omitempty"`
	// GPUsPerWorker prices the fleet in GPU-hours (default 1; from a
	// cluster file, the worker's GPUs: deploy).
	GPUsPerWorker int `yaml:"gpus_per_worker,omitempty"`

	// ReplicaWorkers is how many workers a replica is (default 1):
	// with data parallelism a server (a pod) of that many ranks, which
	// the autoscaler starts, counts and drains together (deploy sets
	// it from dp or enable_dp_attention). Replicas are then servers:
	// MinReplicas and MaxReplicas count them, and the fleet starts with
	// Config.Workers / ReplicaWorkers of them. The metrics are the
	// HPA's per pod: a server's queue_depth, in_flight and
	// request_rate are its ranks' summed, its kv_usage their mean. A
	// draining server stops when the last of its ranks is idle, and
	// its ranks' GPUs count until then.
	ReplicaWorkers int `yaml:"-"`
}

// replicaWorkers is ReplicaWorkers, 1 if unset.
func (a AutoscaleConfig) replicaWorkers() int { return max(a.ReplicaWorkers, 1) }

// mostWorkers is the workers of MaxReplicas replicas: the slots the
// autoscaler may fill.
func (a AutoscaleConfig) mostWorkers() int { return a.MaxReplicas * a.replicaWorkers() }

// Autoscaling metrics.
const (
	MetricQueueDepth    = "queue_depth"
	MetricInFlight      = "in_flight"
	MetricKVUsage       = "kv_usage"
	MetricRequestRate   = "request_rate"
	MetricSLOAttainment = "slo_attainment"
	// MetricITLAttainment is the fraction of the requests completed in
	// the sync period, of two output tokens or more, whose mean ITL
	// ((E2E − TTFT) / (output − 1): their TPOT) met SLOITLSec: the
	// objective a decode pool is sized for.
	MetricITLAttainment = "itl_slo_attainment"
)

func (a AutoscaleConfig) on() bool { return a.Metric != "" || len(a.Metrics) > 0 }

// On reports whether the autoscaler is on (a metric is given).
func (a AutoscaleConfig) On() bool { return a.on() }

// withDefaults fills the zero settings of an autoscaler that is on, of a
// fleet (or pool) of workers at the start: MaxReplicas defaults to its
// replicas.
func (a AutoscaleConfig) withDefaults(workers int) AutoscaleConfig {
	if !a.on() {
		return a
	}
	if a.MinReplicas == nil {
		a.MinReplicas = ptrInt(1)
	}
	if a.MaxReplicas == 0 {
		a.MaxReplicas = max(workers/a.replicaWorkers(), *a.MinReplicas, 1)
	}
	if a.toZero() {
		if a.PollingIntervalSec == 0 {
			a.PollingIntervalSec = 30
		}
		if a.CooldownSec == nil {
			a.CooldownSec = ptr(300)
		}
	}
	if a.SyncPeriodSec == 0 {
		a.SyncPeriodSec = 15
	}
	if a.Tolerance == nil {
		a.Tolerance = ptr(0.1)
	}
	if a.ScaleUpTolerance == nil {
		a.ScaleUpTolerance = ptr(*a.Tolerance)
	}
	if a.ScaleDownTolerance == nil {
		a.ScaleDownTolerance = ptr(*a.Tolerance)
	}
	if a.ScaleUpStabilizationSec == nil {
		a.ScaleUpStabilizationSec = ptr(0)
	}
	if a.ScaleDownStabilizationSec == nil {
		a.ScaleDownStabilizationSec = ptr(300)
	}
	if a.ScaleUpPolicies == nil {
		a.ScaleUpPolicies = defaultScaleUpPolicies()
	}
	if a.ScaleDownPolicies == nil {
		a.ScaleDownPolicies = defaultScaleDownPolicies()
	}
	if a.ScaleUpSelectPolicy == "" {
		a.ScaleUpSelectPolicy = SelectMax
	}
	if a.ScaleDownSelectPolicy == "" {
		a.ScaleDownSelectPolicy = SelectMax
	}
	if a.GPUsPerWorker == 0 {
		a.GPUsPerWorker = 1
	}
	return a
}

func (a AutoscaleConfig) validate(workers int, bad func(field, format string, args ...any)) {
	if !a.on() {
		return
	}
	a.validateMetrics(bad)
	nonneg := func(field string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) {
			bad("autoscale."+field, "%v is not a non-negative number", v)
		}
	}
	if k := a.replicaWorkers(); workers%k != 0 {
		bad("autoscale", "the workers (%d) are not whole replicas of %d workers each", workers, k)
	}
	given := a
	a = a.withDefaults(workers)
	if *a.MinReplicas < 0 || a.MaxReplicas < max(*a.MinReplicas, 1) || a.MaxReplicas > 4096 {
		bad("autoscale.max_replicas", "replicas [%d, %d] are not 0 ≤ min ≤ max, 1 ≤ max ≤ 4096", *a.MinReplicas, a.MaxReplicas)
	}
	a.validateToZero(given, bad)
	if !(a.SyncPeriodSec > 0) || a.SyncPeriodSec > 86400 {
		bad("autoscale.sync_period_s", "%v is not a number of seconds in (0, 86400]", a.SyncPeriodSec)
	}
	nonneg("tolerance", *a.Tolerance)
	nonneg("scale_up_tolerance", *a.ScaleUpTolerance)
	nonneg("scale_down_tolerance", *a.ScaleDownTolerance)
	nonneg("scale_up_stabilization_s", *a.ScaleUpStabilizationSec)
	nonneg("scale_down_stabilization_s", *a.ScaleDownStabilizationSec)
	validateStartup("autoscale.", a.ContainerStartSec, a.WeightsGB, a.StorageGBps, bad)
	if a.GPUsPerWorker < 0 {
		bad("autoscale.gpus_per_worker", "negative (%d)", a.GPUsPerWorker)
	}
	validatePolicies("scale_up", a.ScaleUpPolicies, a.ScaleUpSelectPolicy, bad)
	validatePolicies("scale_down", a.ScaleDownPolicies, a.ScaleDownSelectPolicy, bad)
}

// validateStartup checks a new worker's start-up settings, the keys
// under key ("autoscale.", "disaggregation.planner."): the container's
// start, its weights and the storage link they come over.
func validateStartup(key string, start, weights, storage float64, bad func(field, format string, args ...any)) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"container_start_s", start}, {"weights_gb", weights}, {"storage_gbps", storage}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			bad(key+f.name, "%v is not a non-negative number", f.v)
		}
	}
	if weights > 0 && storage == 0 {
		bad(key+"storage_gbps", "weights_gb %v needs a storage bandwidth", weights)
	}
}

// startup is how long a new worker takes to be ready.
func (a AutoscaleConfig) startup() time.Duration {
	s := a.ContainerStartSec
	if a.WeightsGB > 0 {
		s += a.WeightsGB / a.StorageGBps
	}
	return trace.DurationSeconds(s)
}

// A FleetSecond is the fleet during one simulated second: time-weighted
// means of the workers ready, starting and draining, and with
// prefill/decode disaggregation the ready ones of each pool.
type FleetSecond struct {
	Second                    int64
	Ready, Starting, Draining float64
	PrefillReady, DecodeReady float64
}

// Worker slot states.
type slotState uint8

const (
	slotOff slotState = iota
	slotStarting
	slotReady
	slotDraining
)

// A pool is the slots one HPA sizes, with that HPA's history: the whole
// fleet, or, with prefill/decode disaggregation, the prefill pool or the
// decode pool, each scaled by its own (disagg.go: prefill_autoscale,
// decode_autoscale), as llm-d and Dynamo deploy the two as separate
// deployments that scale apart.
type pool struct {
	name string // "" (the fleet), "prefill" or "decode"
	// k is the workers of a replica (cfg.replicaWorkers): slots lo+k·r
	// to lo+k·r+k−1 are replica r's, in one state.
	k       int
	index   int32 // in autoscaler.pools
	planned bool  // sized by the planner (planner.go), not an HPA
	cfg     AutoscaleConfig
	lo, hi  int // its slots
	period  time.Duration
	recs    []rec // recommendations within the longest window
	// ups and downs: the pool's changes, as the HPA keeps them
	// (store).
	ups, downs []scaleEvent

	ms              []AutoscaleMetric // cfg.metricList()
	values          []float64         // scratch: the metrics' values at a sync
	arrivals        int64             // in the current sync period
	met, done       int64             // completions in the period: meeting the SLO, all
	itlMet, itlDone int64             // those of two tokens or more: meeting the ITL SLO, all
}

// An autoscaler is the engine's HPA, or its two with disaggregation: the
// fleet's slots, the pools that size them, and the fleet's time line.
// Slots of a disaggregated pool that no HPA sizes are ready throughout.
type autoscaler struct {
	// pool is the first pool, the fleet's without disaggregation:
	// scale to zero (scaletozero.go) uses it alone.
	*pool
	pools   []*pool
	state   []slotState
	readyAt []trace.Time // starting slots: when they are ready
	// nextReady: no starting slot is ready before it (never: none
	// starts), so that promote, at every routed arrival, need not look.
	nextReady trace.Time
	since     []trace.Time // when the slot last left slotOff

	// Scale to zero (scaletozero.go): the requests the gateway holds
	// while no worker is ready, in arrival order; the arrivals since
	// KEDA's last poll; when its metric was last active, if ever.
	toZero     bool // cfg.toZero()
	held       []*reqState
	heldSince  trace.Time // when the number held last changed
	gateAt     trace.Time // the gateway timeout's queued event (never: none)
	polled     int64
	lastActive trace.Time
	wasActive  bool

	// plan is the planner that sizes the pools, if any.
	plan *planner
	// split is the first decode slot with disaggregation (0: none):
	// the fleet's time line counts the prefill pool's ready slots too.
	split int
	// onTime is the slot time not off, summed (GPU time / GPUs per
	// worker); onPrefill the prefill pool's part of it (gpuHours).
	onTime, onPrefill time.Duration
	changes           []fleetChange
}

type rec struct {
	at      trace.Time
	desired int
}

type fleetChange struct {
	at                        trace.Time
	ready, starting, draining int
	prefillReady              int // with disaggregation
}

// count returns the slots in each state.
func (a *autoscaler) count() (ready, starting, draining int) {
	return a.countIn(0, len(a.state))
}

// countIn returns the slots lo to hi−1 in each state.
func (a *autoscaler) countIn(lo, hi int) (ready, starting, draining int) {
	for _, s := range a.state[lo:hi] {
		switch s {
		case slotReady:
			ready++
		case slotStarting:
			starting++
		case slotDraining:
			draining++
		}
	}
	return
}

func (a *autoscaler) note(now trace.Time) {
	r, s, d := a.count()
	c := fleetChange{at: now, ready: r, starting: s, draining: d}
	if a.split > 0 {
		c.prefillReady, _, _ = a.countIn(0, a.split)
	}
	if n := len(a.changes); n > 0 && a.changes[n-1].at == now {
		a.changes[n-1] = c
		return
	}
	a.changes = append(a.changes, c)
}

// recommend applies the HPA's rule to the metrics' current values (one
// per metric, in the order of cfg.metricList: the largest of their
// proposals), its stabilization windows and scaling policies
// (rateLimit), and returns the replicas it settles on at now.
func (a *pool) recommend(now trace.Time, current int, values []float64) int {
	desired := 0
	for k, m := range a.ms {
		desired = max(desired, a.propose(m, current, values[k]))
	}
	desired = min(max(desired, a.hpaMin()), a.cfg.MaxReplicas)
	// The recommendations within each window before now, and now's: a
	// window holds those after now − its length (the HPA's cutoff), so
	// that a 300 s window at a 15 s sync holds 20 syncs' (and one of 0
	// s, now's alone).
	up := trace.DurationSeconds(*a.cfg.ScaleUpStabilizationSec)
	down := trace.DurationSeconds(*a.cfg.ScaleDownStabilizationSec)
	keep := max(up, down)
	i := 0
	for i < len(a.recs) && now.Sub(a.recs[i].at) >= keep {
		i++
	}
	a.recs = slices.Delete(a.recs, 0, i)
	upRec, downRec := desired, desired
	for _, r := range a.recs {
		if now.Sub(r.at) < up {
			upRec = min(upRec, r.desired)
		}
		if now.Sub(r.at) < down {
			downRec = max(downRec, r.desired)
		}
	}
	a.recs = append(a.recs, rec{now, desired})
	stable := current
	switch {
	case current < upRec:
		stable = upRec
	case current > downRec:
		stable = downRec
	}
	return a.rateLimit(now, current, stable)
}

// seconds returns the fleet per second, from second 0 to the one holding
// end.
func (a *autoscaler) seconds(end trace.Time) []FleetSecond {
	n := int64(end)/int64(time.Second) + 1
	out := make([]FleetSecond, n)
	for i := range out {
		out[i].Second = int64(i)
	}
	for k, c := range a.changes {
		to := end
		if k+1 < len(a.changes) {
			to = a.changes[k+1].at
		}
		for t := c.at; t < to; {
			s := int64(t) / int64(time.Second)
			next := min(to, trace.Time((s+1)*int64(time.Second)))
			f := float64(next-t) / float64(time.Second)
			out[s].Ready += f * float64(c.ready)
			out[s].Starting += f * float64(c.starting)
			out[s].Draining += f * float64(c.draining)
			if a.split > 0 {
				out[s].PrefillReady += f * float64(c.prefillReady)
				out[s].DecodeReady += f * float64(c.ready-c.prefillReady)
			}
			t = next
		}
	}
	return out
}

// A poolSpec is a pool to be: its name, its slots lo to hi−1, its
// workers at the start, and the HPA that sizes it (off: none, its workers
// ready throughout).
type poolSpec struct {
	name            string
	cfg             AutoscaleConfig
	lo, hi, workers int
	// planned: the planner sizes it (cfg holds its bounds and
	// start-up, no metric).
	planned bool
}

// newAutoscaler returns the autoscaler of slots slots in pools specs (one
// at least with its HPA on), split the first decode slot with
// disaggregation (else 0).
func newAutoscaler(slots, split int, specs []poolSpec) *autoscaler {
	a := &autoscaler{
		state:   make([]slotState, slots),
		readyAt: make([]trace.Time, slots),
		since:   make([]trace.Time, slots),
		split:   split,

		nextReady: never,
		gateAt:    never,
	}
	for _, sp := range specs {
		n := sp.workers
		if sp.cfg.on() || sp.planned {
			p := &pool{
				name: sp.name, index: int32(len(a.pools)), cfg: sp.cfg, lo: sp.lo, hi: sp.hi, planned: sp.planned,
				period: trace.DurationSeconds(sp.cfg.SyncPeriodSec),
				ms:     sp.cfg.metricList(),
				k:      sp.cfg.replicaWorkers(),
			}
			a.pools = append(a.pools, p)
			n = min(max(n/p.k, *sp.cfg.MinReplicas), sp.cfg.MaxReplicas) * p.k
		}
		for i := sp.lo; i < sp.lo+n; i++ {
			a.state[i] = slotReady
		}
	}
	a.pool = a.pools[0]
	a.toZero = a.cfg.toZero()
	a.note(0)
	return a
}

// ended counts, for the planner's observations, a request that ended at
// now without completing (timed out, or refused), which reached the
// frontend at arrival with out tokens sent (completed counts the others).
func (a *autoscaler) ended(now, arrival trace.Time, out int64) {
	if a.plan != nil {
		a.plan.ended(now.Sub(arrival).Seconds(), out)
	}
}

// completed counts completion o for slo_attainment and
// itl_slo_attainment, and for the planner's observations.
func (a *autoscaler) completed(o *trace.Request) {
	if a.plan != nil {
		a.plan.completed(o)
	}
	ttft, out := o.TTFTSec.V, o.OutputTokens.V
	for _, p := range a.pools {
		p.done++
		if ttft <= p.cfg.SLOTTFTSec {
			p.met++
		}
		if out > 1 {
			p.itlDone++
			if (o.E2ESec.V-ttft)/float64(out-1) <= p.cfg.SLOITLSec {
				p.itlMet++
			}
		}
	}
}

// newPeriod starts pool p's next sync period's counts.
func (p *pool) newPeriod() {
	p.arrivals, p.met, p.done, p.itlMet, p.itlDone = 0, 0, 0, 0, 0
}

// stop turns slot i off at now and adds its time to the fleet's cost.
func (a *autoscaler) stop(i int, now trace.Time) {
	a.onTime += now.Sub(a.since[i])
	if i < a.split {
		a.onPrefill += now.Sub(a.since[i])
	}
	a.state[i] = slotOff
}

// gpuHours is the fleet's cost: each slot's time on times its pool's GPUs
// a worker. Pools of one deployment have one count: an autoscaled pool's
// gpus_per_worker (the planner's), or the other pool's when a pool has no
// autoscaler; a prefill pool of its own deployment
// (DisaggregationConfig.PrefillTP, PrefillHardware) has its own, which
// package deploy sets in both pools' configurations.
func (a *autoscaler) gpuHours(d DisaggregationConfig) float64 {
	if a.split == 0 {
		return a.onTime.Hours() * float64(a.cfg.GPUsPerWorker)
	}
	gp, gd := 0, 0
	for _, p := range a.pools {
		if p.lo < a.split {
			gp = p.cfg.GPUsPerWorker
		} else {
			gd = p.cfg.GPUsPerWorker
		}
	}
	if d.ownPrefill() {
		gp, gd = cmp.Or(gp, d.PrefillAutoscale.GPUsPerWorker), cmp.Or(gd, d.DecodeAutoscale.GPUsPerWorker)
	}
	gp, gd = cmp.Or(gp, gd, 1), cmp.Or(gd, gp, 1)
	if gp == gd {
		return a.onTime.Hours() * float64(gd) // to the bit as one deployment's
	}
	return a.onPrefill.Hours()*float64(gp) + (a.onTime-a.onPrefill).Hours()*float64(gd)
}

// finish adds the time of the slots still on at the end.
func (a *autoscaler) finish(end trace.Time) {
	for i, s := range a.state {
		if s != slotOff {
			a.stop(i, end)
		}
	}
}

// allDone reports whether every request has left the replay.
func (e *engine) allDone() bool {
	return e.stats.Completed+e.stats.Rejected+e.stats.TimedOut == e.n
}

// promote makes the starting workers whose start-up has ended ready.
func (e *engine) promote(now trace.Time) {
	a := e.scale
	if now < a.nextReady {
		return
	}
	changed := false
	a.nextReady = never
	for i, s := range a.state {
		if s != slotStarting {
			continue
		}
		if a.readyAt[i] <= now {
			a.state[i] = slotReady
			changed = true
		} else {
			a.nextReady = min(a.nextReady, a.readyAt[i])
		}
	}
	if changed {
		e.view.setReady(a)
		a.note(now)
	}
}

// drained stops a draining worker that has no request left (and, with
// disaggregation, no KV on its way from or to it: disagg.idle).
//
// A replica of several workers (AutoscaleConfig.ReplicaWorkers) stops
// when the last of them is: a server's ranks exit together.
func (e *engine) drained(now trace.Time, w *worker) {
	a := e.scale
	if a.state[w.id] != slotDraining {
		return
	}
	p := a.poolOf(w.id)
	lo := p.lo + (w.id-p.lo)/p.k*p.k
	for i := lo; i < lo+p.k; i++ {
		if !e.workers[i].idle() || e.pd != nil && !e.pd.idle(i) {
			return
		}
	}
	a.stopReplica(p, lo, now)
	a.note(now)
}

// stopReplica turns off the slots of pool p's replica whose first slot
// is lo.
func (a *autoscaler) stopReplica(p *pool, lo int, now trace.Time) {
	for i := lo; i < lo+p.k; i++ {
		a.stop(i, now)
	}
}

// poolOf returns the pool slot i is in (a slot no pool sizes is never
// draining).
func (a *autoscaler) poolOf(i int) *pool {
	for _, p := range a.pools {
		if p.lo <= i && i < p.hi {
			return p
		}
	}
	panic("replay: internal error: a draining slot in no pool")
}

// autoscale is pool p's HPA sync at now: it reads the metric over the
// pool's ready workers, settles on a replica count, starts or drains
// workers to reach it, and queues the next sync while requests remain. A
// fleet at zero (scaletozero.go) is left alone, as Kubernetes disables an
// HPA whose target has no replicas.
//
// Note: the workers' state at a sync is as of their latest built step, as
// a scrape's is (routerView); a worker fast-forwarded past the sync shows
// its state at the end of its window.
func (e *engine) autoscale(now trace.Time, p *pool) {
	e.promote(now)
	a := e.scale
	ready, starting, _ := a.countIn(p.lo, p.hi)
	// The metric is averaged over the replicas asked for, starting ones
	// included, as an AverageValue target divides the metric's total
	// (KEDA's external metrics, HPA's object and external metrics): a
	// starting worker contributes nothing yet, so the fleet does not
	// grow again for load that the workers on their way will take.
	current := (ready + starting) / p.k
	if current == 0 {
		p.newPeriod()
		e.queueSync(now, p)
		return
	}
	values := p.values[:0]
	for _, m := range p.ms {
		values = append(values, e.metricValue(p, m, current))
	}
	p.values = values
	p.newPeriod()
	desired := p.recommend(now, current, values)
	before := current
	current = e.resize(now, p, current, desired, false)
	p.scaled(now, before, current)
	e.promote(now)
	e.view.setReady(a)
	a.note(now)
	e.queueSync(now, p)
}

// queueSync queues pool p's next HPA sync while requests remain.
func (e *engine) queueSync(now trace.Time, p *pool) {
	if !e.allDone() {
		e.q.push(now.Add(p.period), evAutoscale, hpaSync(p))
	}
}

// arrived counts an arrival for request_rate: the fleet's, or the prefill
// pool's with disaggregation (the decode pool's are hand-overs:
// decodeChosen).
func (a *autoscaler) arrived() {
	for _, p := range a.pools {
		if p.name != poolDecode {
			p.arrivals++
		}
	}
}

// decodeChosen counts request r, whose decode worker was chosen, as sent
// to the decode pool (its request_rate).
func (e *engine) decodeChosen(r *reqState) {
	if e.test.choseDecode != nil {
		e.test.choseDecode(e, int(e.pd.to[r.idx]))
	}
	if e.scale == nil {
		return
	}
	for _, p := range e.scale.pools {
		if p.name == poolDecode {
			p.arrivals++
		}
	}
}

// The pools' names.
const (
	poolPrefill = "prefill"
	poolDecode  = "decode"
)

// metricTotal is the sum of metric (queue_depth, in_flight or kv_usage)
// over pool p's ready workers, with the requests the gateway holds for
// want of one (scaletozero.go) in the first two.
func (e *engine) metricTotal(p *pool, metric string) float64 {
	a := e.scale
	var total float64
	for i := p.lo; i < p.hi; i++ {
		if a.state[i] != slotReady {
			continue
		}
		w := e.workers[i]
		switch metric {
		case MetricQueueDepth:
			total += float64(w.waiting.Len())
		case MetricInFlight:
			total += float64(w.waiting.Len() + len(w.running))
		case MetricKVUsage:
			total += e.liveLoad(i).KVUsage()
		}
	}
	if metric == MetricQueueDepth || metric == MetricInFlight {
		total += float64(len(a.held))
	}
	return total
}

// resize starts or stops replicas of pool p at now to take its current
// replicas asked for to desired, and returns the replicas it reached:
// starting replicas first, then draining the newest ready ones, but the
// last ready replica only when toZero (KEDA's scale to zero).
func (e *engine) resize(now trace.Time, p *pool, current, desired int, toZero bool) int {
	a := e.scale
	for ; current < desired; current++ {
		if !e.startSlot(now, p) {
			break
		}
	}
	ready, _, _ := a.countIn(p.lo, p.hi)
	ready /= p.k
	for ; current > desired; current-- {
		if i := a.newest(p, slotStarting); i >= 0 {
			a.stopReplica(p, i, now)
			continue
		}
		if ready <= 1 && !toZero {
			break
		}
		i := a.newest(p, slotReady)
		if i < 0 {
			break
		}
		for j := i; j < i+p.k; j++ {
			a.state[j] = slotDraining
		}
		ready--
		e.drained(now, e.workers[i])
	}
	return current
}

// startSlot starts a new replica of pool p at now, its workers in the
// slots of a replica whose every slot is off, and reports whether there
// was one.
func (e *engine) startSlot(now trace.Time, p *pool) bool {
	a := e.scale
	for lo := p.lo; lo+p.k <= p.hi; lo += p.k {
		if !slices.ContainsFunc(a.state[lo:lo+p.k], func(s slotState) bool { return s != slotOff }) {
			for i := lo; i < lo+p.k; i++ {
				e.startWorker(now, p, i)
			}
			if a.toZero {
				// Requests held for want of a ready worker go to
				// it once it is ready, not at the next arrival or
				// sync.
				e.q.push(a.readyAt[lo], evAutoscale, syncReady)
			}
			return true
		}
	}
	return false
}

// startWorker starts a new worker in off slot i of pool p at now.
func (e *engine) startWorker(now trace.Time, p *pool, i int) {
	a := e.scale
	if !e.workers[i].idle() {
		// A drained slot stopped only when idle, so an off slot is
		// idle: this cannot happen.
		panic("replay: internal error: an off worker slot has work")
	}
	// The slot's old worker is gone, its evictions not: RunInputs
	// adds up only the workers the slots hold at the end.
	e.stats.Evictions += e.workers[i].s.evictions()
	plan := e.workers[i].plan
	e.workers[i] = e.restart(i)
	e.workers[i].plan = plan // (the SLA planner's observer of the slot's chunks)
	if e.view.hooked() && (e.pd == nil || i < e.pd.prefill) {
		e.workers[i].onPrefilled = e.view.prefilled
	}
	if e.pd != nil && i >= e.pd.prefill {
		if v, ok := e.workers[i].s.(*vllm); ok {
			v.loadRemote = e.loadRemote // its KV comes from prefill workers
		}
	}
	if r, ok := e.router.(slotResetter); ok {
		r.resetWorker(i)
	}
	if e.online != nil {
		e.online.resetWorker(i)
	}
	a.state[i], a.readyAt[i], a.since[i] = slotStarting, now.Add(p.cfg.startup()), now
	a.nextReady = min(a.nextReady, a.readyAt[i])
}

// restart returns a new worker for slot i, whose worker stopped: on
// vLLM's scheduler over the stopped worker's KV cache, Reset
// (kvcache.Cache.Reset), rather than a new one; with KV tiers, on fresh
// tiers of its own (offload.fresh), vLLM's or SGLang's HiCache.
func (e *engine) restart(i int) *worker {
	w := e.restartScheduler(i)
	if old := e.workers[i].off; old != nil {
		e.off.fresh(old, w) // (a decode slot without tiers keeps none)
	}
	return w
}

// restartScheduler is restart without the tiers.
func (e *engine) restartScheduler(i int) *worker {
	old := e.workers[i]
	v, ok := old.s.(*vllm)
	s, blocks := e.schedulerOf(i)
	if !ok || v.kv.NumBlocks() != blocks {
		return newWorker(i, old.name, s, blocks, &e.test)
	}
	v.kv.Reset()
	// As newWorker makes it, with the stopped worker's scratch emptied:
	// a new worker's grew again from nothing, its prefix hits' above
	// all (kvcache.Cache.LookupChain: on the autoscaled Mooncake replay
	// 3.0 MB a replay, against 0.6 on 16 workers that never stop).
	nv := newVLLMOn(s, v.kv, &e.test)
	nv.peek, nv.due, nv.last.hits = v.peek[:0], v.due[:0], v.last.hits[:0]
	clear(old.running[:cap(old.running)])
	clear(old.sched[:cap(old.sched)])
	return &worker{
		id: i, name: old.name, s: nv, stream: e.cfg.Scheduler.StreamInterval,
		running: old.running[:0], sched: old.sched[:0], durs: old.durs[:0], secs: old.secs[:0],
		batch: model.Batch{Decode: old.batch.Decode[:0], Prefill: old.batch.Prefill[:0]},
	}
}

// idle reports whether w has nothing left to do: no request running,
// waiting, at its API server or loading its KV from a tier.
func (w *worker) idle() bool {
	return !w.hasWork() && !w.busy && w.api.empty() && (w.off == nil || w.off.loading == 0)
}

// newest returns the first slot of the replica of pool p in state s
// that left slotOff last (the highest index among equals), or −1.
func (a *autoscaler) newest(p *pool, s slotState) int {
	best := -1
	for i := p.lo; i+p.k <= p.hi; i += p.k {
		if st := a.state[i]; st == s && (best < 0 || a.since[i] >= a.since[best]) {
			best = i
		}
	}
	return best
}

// planAdjust is the planner's adjustment at now: both pools (or an
// aggregated fleet's one) set to the workers it asks for (none when it
// skips the interval), and its next adjustment queued while requests
// remain.
func (e *engine) planAdjust(now trace.Time) {
	e.promote(now)
	a := e.scale
	var targets [2]int // each pool's engines: an aggregated fleet's, or the prefill and the decode pool's
	var ok bool
	if a.plan.cfg.Policy == PlannerDynamoLoad {
		targets[0], targets[1], ok = e.loadAdjust(now)
	} else {
		decode := a.pools[1]
		ready, _, _ := a.countIn(decode.lo, decode.hi)
		targets[0], targets[1], ok = a.plan.adjust(now, ready)
	}
	if ok {
		for i, p := range a.pools {
			r, s, _ := a.countIn(p.lo, p.hi)
			e.resize(now, p, (r+s)/p.k, min(targets[i], p.cfg.MaxReplicas), false)
		}
		e.promote(now)
		e.view.setReady(a)
		a.note(now)
	}
	if !e.allDone() {
		e.q.push(now.Add(a.plan.interval), evAutoscale, syncPlanner)
	}
}
