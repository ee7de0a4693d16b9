package replay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// sec is s seconds into a replay.
func sec(s float64) trace.Time { return trace.Time(trace.DurationSeconds(s)) }

// policyScaler returns an autoscaler of a (defaults filled) with the
// given scale events.
func policyScaler(a AutoscaleConfig, ups, downs []scaleEvent) *autoscaler {
	a = a.withDefaults(1)
	s := newAutoscaler(a.MaxReplicas, 0, []poolSpec{{cfg: a, hi: a.MaxReplicas, workers: 1}})
	s.ups, s.downs = ups, downs
	return s
}

// The policies bound a change as the HPA's behavior rules do
// (calculateScaleUpLimitWithScalingRules,
// calculateScaleDownLimitWithBehaviors, convertDesiredReplicasWithBehaviorRate):
// the cases worked by hand from those functions.
func TestScalingPoliciesAsHPA(t *testing.T) {
	base := AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(1), MaxReplicas: 100}
	with := func(f func(*AutoscaleConfig)) AutoscaleConfig {
		a := base
		f(&a)
		return a
	}
	pct := func(v int) []ScalingPolicy { return []ScalingPolicy{{PolicyPercent, v, 15}} }
	now := sec(100)
	for _, tc := range []struct {
		name             string
		a                AutoscaleConfig
		ups, downs       []scaleEvent
		current, desired int
		want             int
	}{
		// The defaults: 4 replicas or 100 % within 15 s, the larger.
		{"default up from 1: +4", base, nil, nil, 1, 50, 5},
		{"default up from 6: ×2", base, nil, nil, 6, 50, 12},
		{"default up within the limit", base, nil, nil, 6, 9, 9},
		{"default up capped by max_replicas", with(func(a *AutoscaleConfig) { a.MaxReplicas = 10 }), nil, nil, 6, 50, 10},
		// Added within the period counts against it: from 4 at the
		// period's start (10 − 6 added 10 s ago), at most 8, below 10:
		// the fleet holds.
		{"added within the period", base, []scaleEvent{{sec(90), 6}}, nil, 10, 50, 10},
		// An event exactly a period old no longer counts (the HPA's
		// timestamp.After(cutoff)).
		{"event a period old", base, []scaleEvent{{sec(85), 6}}, nil, 10, 50, 20},
		// Removed within the period raises the period's start: 6 + 2.
		{"removed within the period", base, nil, []scaleEvent{{sec(95), 2}}, 6, 50, 16},
		// Percent rounds up, in float64 as the HPA computes it: 3 ·
		// 1.1 is 3.3000000000000003, so 4.
		{"percent rounds up", with(func(a *AutoscaleConfig) { a.ScaleUpPolicies = pct(10) }), nil, nil, 3, 50, 4},
		{"min select up", with(func(a *AutoscaleConfig) { a.ScaleUpSelectPolicy = SelectMin }), nil, nil, 6, 50, 10},
		{"disabled up", with(func(a *AutoscaleConfig) { a.ScaleUpSelectPolicy = SelectDisabled }), nil, nil, 6, 50, 6},
		// Down: by default 100 % within 15 s, so to the recommendation.
		{"default down", base, nil, nil, 10, 2, 2},
		{"default down to min_replicas", with(func(a *AutoscaleConfig) { a.MinReplicas = ptrInt(3) }), nil, nil, 10, 1, 3},
		// 50 %: from 7, int(3.5) = 3 (truncated).
		{"percent down truncates", with(func(a *AutoscaleConfig) { a.ScaleDownPolicies = pct(50) }), nil, nil, 7, 1, 3},
		{"pods down", with(func(a *AutoscaleConfig) { a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 2, 60}} }), nil, nil, 7, 1, 5},
		// Down by 3 within 60 s, 2 removed 30 s ago: from 9, to 6.
		{"pods down, removed within", with(func(a *AutoscaleConfig) { a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 3, 60}} }), nil, []scaleEvent{{sec(70), 2}}, 7, 1, 6},
		// By 1: from 9 to 8, above the fleet: it holds.
		{"pods down, limit above", with(func(a *AutoscaleConfig) { a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 1, 60}} }), nil, []scaleEvent{{sec(70), 2}}, 7, 1, 7},
		// Max down takes the most change (the least replicas), min
		// the least.
		{"max select down", with(func(a *AutoscaleConfig) {
			a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 1, 15}, {PolicyPercent, 50, 15}}
		}), nil, nil, 10, 1, 5},
		{"min select down", with(func(a *AutoscaleConfig) {
			a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 1, 15}, {PolicyPercent, 50, 15}}
			a.ScaleDownSelectPolicy = SelectMin
		}), nil, nil, 10, 1, 9},
		{"disabled down", with(func(a *AutoscaleConfig) { a.ScaleDownSelectPolicy = SelectDisabled }), nil, nil, 10, 1, 10},
		{"no change", base, nil, nil, 7, 7, 7},
	} {
		s := policyScaler(tc.a, tc.ups, tc.downs)
		if got := s.rateLimit(now, tc.current, tc.desired); got != tc.want {
			t.Errorf("%s: %d → %d allowed %d, want %d", tc.name, tc.current, tc.desired, got, tc.want)
		}
	}
}

// A stabilization window holds the recommendations after now − its
// length, as the HPA's cutoff does: one a whole window old is out.
func TestStabilizationWindowEdge(t *testing.T) {
	// The down window the longest, and shorter than the up window.
	for _, up := range []float64{0, 20} {
		a := AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(1), MaxReplicas: 8,
			ScaleUpStabilizationSec: ptr(up), ScaleDownStabilizationSec: ptr(10.0)}
		s := policyScaler(a, nil, nil)
		if got := s.recommend(sec(0), 4, []float64{2}); got != 8 { // queue 2 a worker over a target of 1
			t.Fatalf("up window %v s: at 0 s: %d, want 8", up, got)
		}
		// From 1 s on the metric asks for 1; the fleet, 8, is held by
		// the 8 recommended at 0 s until that is 10 s old.
		for i := 1; i <= 10; i++ {
			got := s.recommend(sec(float64(i)), 8, []float64{0.125})
			want := 8
			if i == 10 {
				want = 1
			}
			if got != want {
				t.Errorf("up window %v s: at %d s: %d, want %d", up, i, got, want)
			}
		}
	}
}

// In a replay, the fleet grows no faster than the default policies
// allow: a burst on one worker with 16 allowed and a sync every second
// takes it to 5 within the first 15 s, where the recommendation alone
// would take it to 16 at once; with a policy of 16 replicas a second it
// does.
func TestAutoscaleScaleUpRate(t *testing.T) {
	var reqs []*trace.Request
	for i := range 2000 { // 100 requests/s for 20 s
		reqs = append(reqs, req(fmt.Sprintf("b%d", i), time.Duration(i)*10*ms, 300, 200))
	}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	asked := func(policies []ScalingPolicy) []float64 {
		cfg := Config{Workers: 1, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
			Metric: MetricQueueDepth, Target: 1, MaxReplicas: 16, SyncPeriodSec: 1,
			ContainerStartSec: 1, ScaleUpPolicies: policies,
		}}
		_, _, st := replay(t, cfg, cost, 400, reqs)
		var out []float64
		for _, f := range st.Fleet {
			out = append(out, f.Ready+f.Starting)
		}
		return out
	}
	def := asked(nil)
	fast := asked([]ScalingPolicy{{PolicyPods, 16, 1}})
	if len(def) < 40 || len(fast) < 40 {
		t.Fatalf("fleet of %d and %d seconds", len(def), len(fast))
	}
	// Syncs at 1, 2, … s: second s holds what the sync at s set.
	if fast[1] != 16 {
		t.Errorf("16 a second allowed: %v asked for at 1 s, want 16", fast[1])
	}
	for s := 1; s < 16; s++ {
		if def[s] > 5 {
			t.Errorf("default policies: %v asked for at %d s, more than 1 + 4 within 15 s", def[s], s)
		}
	}
	if def[1] != 5 {
		t.Errorf("default policies: %v asked for at 1 s, want 5", def[1])
	}
	// Within any 15 s, at most max(start + 4, 2 · start).
	for s := 16; s < len(def); s++ {
		start := def[s-15]
		if most := max(start+4, 2*start); def[s] > most {
			t.Errorf("default policies: %v asked for at %d s, %v at %d s: more than %v", def[s], s, start, s-15, most)
		}
	}
}

func TestScalingPolicyErrors(t *testing.T) {
	base := AutoscaleConfig{Metric: MetricQueueDepth, Target: 1}
	for _, tc := range []struct {
		f    func(*AutoscaleConfig)
		want string
	}{
		{func(a *AutoscaleConfig) { a.ScaleUpPolicies = []ScalingPolicy{} }, "autoscale.scale_up_policies: must hold at least one policy"},
		{func(a *AutoscaleConfig) { a.ScaleUpPolicies = []ScalingPolicy{{"replicas", 1, 15}} }, `autoscale.scale_up_policies: policy 1: unknown type "replicas"`},
		{func(a *AutoscaleConfig) {
			a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 1, 15}, {PolicyPods, 0, 15}}
		}, "autoscale.scale_down_policies: policy 2: value 0 is not a whole number from 1 to 2147483647"},
		{func(a *AutoscaleConfig) { a.ScaleUpPolicies = []ScalingPolicy{{PolicyPods, 1 << 31, 15}} }, "policy 1: value 2147483648 is not a whole number from 1 to 2147483647"},
		{func(a *AutoscaleConfig) { a.ScaleDownPolicies = []ScalingPolicy{{PolicyPods, 1, 0}} }, "autoscale.scale_down_policies: policy 1: period_s 0 is not in (0, 1800]"},
		{func(a *AutoscaleConfig) { a.ScaleUpPolicies = []ScalingPolicy{{PolicyPercent, 50, 1801}} }, "period_s 1801 is not in (0, 1800]"},
		{func(a *AutoscaleConfig) { a.ScaleUpSelectPolicy = "Largest" }, `autoscale.scale_up_select_policy: unknown selection "Largest"`},
	} {
		a := base
		tc.f(&a)
		err := Config{Autoscale: a}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", a, err, tc.want)
		}
	}
}

// A cluster file's policies parse under the HPA's names, the defaults
// fill what it leaves out, and a bad policy is refused at its line.
func TestScalingPoliciesParse(t *testing.T) {
	c, err := ParseConfig("c.yaml", []byte("autoscale:\n  metric: queue_depth\n  target: 2\n"+
		"  scale_up_policies:\n    - {type: pods, value: 2, period_s: 60}\n  scale_down_select_policy: disabled\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Effective(1000).Autoscale
	if want := []ScalingPolicy{{PolicyPods, 2, 60}}; fmt.Sprint(a.ScaleUpPolicies) != fmt.Sprint(want) {
		t.Errorf("scale-up policies %v, want %v", a.ScaleUpPolicies, want)
	}
	if a.ScaleUpSelectPolicy != SelectMax || a.ScaleDownSelectPolicy != SelectDisabled {
		t.Errorf("selections %q, %q; want max, disabled", a.ScaleUpSelectPolicy, a.ScaleDownSelectPolicy)
	}
	if fmt.Sprint(a.ScaleDownPolicies) != fmt.Sprint(defaultScaleDownPolicies()) {
		t.Errorf("scale-down policies %v, want the default %v", a.ScaleDownPolicies, defaultScaleDownPolicies())
	}
	_, err = ParseConfig("c.yaml", []byte("autoscale:\n  metric: queue_depth\n  target: 2\n  scale_down_policies: []\n"))
	if want := "c.yaml:4: autoscale.scale_down_policies: must hold at least one policy"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an empty list: %v, want %q", err, want)
	}
}

// Scale events are kept as the HPA keeps them (storeScaleEvent): a new one
// takes the place of the last one older than its direction's longest
// period, and the others still count where a longer period of the other
// direction reaches them.
func TestScaleEventsKeptAsHPA(t *testing.T) {
	a := AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(1), MaxReplicas: 100,
		ScaleDownPolicies: []ScalingPolicy{{PolicyPods, 1, 600}}}
	s := policyScaler(a, nil, nil)
	s.scaled(sec(0), 1, 5)   // +4
	s.scaled(sec(5), 5, 7)   // +2
	s.scaled(sec(30), 7, 10) // +3, in the place of the +2 at 5 s (the last older than 15 s)
	if want := []scaleEvent{{sec(0), 4}, {sec(30), 3}}; fmt.Sprint(s.ups) != fmt.Sprint(want) {
		t.Fatalf("scale-ups kept %v, want %v", s.ups, want)
	}
	// Down by 1 within 600 s from the replicas then: 10 − 4 − 3 = 3,
	// so at most to 2; the +2 given way no longer counts.
	if got := s.rateLimit(sec(40), 10, 1); got != 2 {
		t.Errorf("10 → 1 at 40 s allowed %d, want 2", got)
	}
	// An event exactly a period old is not yet older than it: the
	// HPA's timestamp.Before(cutoff).
	edge := policyScaler(a, nil, nil)
	edge.scaled(sec(0), 1, 5)
	edge.scaled(sec(15), 5, 10)
	if want := []scaleEvent{{sec(0), 4}, {sec(15), 5}}; fmt.Sprint(edge.ups) != fmt.Sprint(want) {
		t.Errorf("scale-ups kept %v, want %v", edge.ups, want)
	}
	s.scaled(sec(40), 10, 2)
	s.scaled(sec(41), 2, 1)
	if want := []scaleEvent{{sec(40), 8}, {sec(41), 1}}; fmt.Sprint(s.downs) != fmt.Sprint(want) {
		t.Errorf("scale-downs kept %v, want %v (none older than 600 s)", s.downs, want)
	}
}

// The tolerances: no change while 1 − down ≤ ratio ≤ 1 + up (the HPA's
// Tolerances.isWithin), each side its own when set (Kubernetes 1.33's
// behavior.scaleUp.tolerance and scaleDown.tolerance), and a tolerance
// of 0 is 0, not the default.
func TestAutoscaleTolerances(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a     AutoscaleConfig
		value float64 // queue depth a worker, over a target of 1, on 10 workers
		want  int
	}{
		{"default, within", AutoscaleConfig{}, 1.05, 10},
		{"default, above", AutoscaleConfig{}, 1.15, 12},
		{"default, below", AutoscaleConfig{}, 0.85, 9},
		{"default, at the edge", AutoscaleConfig{}, 0.9, 10},
		{"tolerance 0", AutoscaleConfig{Tolerance: ptr(0.0)}, 1.05, 11},
		{"up 0", AutoscaleConfig{ScaleUpTolerance: ptr(0.0)}, 1.05, 11},
		{"up 0, down default", AutoscaleConfig{ScaleUpTolerance: ptr(0.0)}, 0.95, 10},
		{"down 0.2", AutoscaleConfig{ScaleDownTolerance: ptr(0.2)}, 0.85, 10},
		{"down 0.2, beyond", AutoscaleConfig{ScaleDownTolerance: ptr(0.2)}, 0.75, 8},
		{"global 0.3, up 0.05", AutoscaleConfig{Tolerance: ptr(0.3), ScaleUpTolerance: ptr(0.05)}, 0.75, 10},
	} {
		a := tc.a
		a.Metric, a.Target, a.MinReplicas, a.MaxReplicas = MetricQueueDepth, 1, ptrInt(1), 100
		a.ScaleDownStabilizationSec = ptr(0.0)
		s := policyScaler(a, nil, nil)
		if got := s.recommend(sec(0), 10, []float64{tc.value}); got != tc.want {
			t.Errorf("%s: ratio %v on 10 → %d, want %d", tc.name, tc.value, got, tc.want)
		}
	}
	c, err := ParseConfig("c.yaml", []byte("autoscale:\n  metric: queue_depth\n  target: 2\n  tolerance: 0\n  scale_down_tolerance: 0.25\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Effective(1000).Autoscale; *a.Tolerance != 0 || *a.ScaleUpTolerance != 0 || *a.ScaleDownTolerance != 0.25 {
		t.Errorf("tolerances %v, %v, %v; want 0, 0, 0.25", *a.Tolerance, *a.ScaleUpTolerance, *a.ScaleDownTolerance)
	}
	if err := (Config{Autoscale: AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, ScaleUpTolerance: ptr(-0.1)}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "autoscale.scale_up_tolerance: -0.1 is not a non-negative number") {
		t.Errorf("a negative tolerance: %v", err)
	}
}
