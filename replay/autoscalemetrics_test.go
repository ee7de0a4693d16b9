package replay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// With several metrics the HPA takes the largest of their proposals, each
// the current count while its ratio is within the tolerances: worked by
// hand from computeReplicasForMetrics.
func TestAutoscaleSeveralMetricsAsHPA(t *testing.T) {
	a := AutoscaleConfig{MinReplicas: ptrInt(1), MaxReplicas: 100, SLOTTFTSec: 1, Metrics: []AutoscaleMetric{
		{Metric: MetricQueueDepth, Target: 1}, {Metric: MetricKVUsage, Target: 0.5}, {Metric: MetricSLOAttainment, Target: 0.9},
	}}
	for _, tc := range []struct {
		name   string
		values []float64
		want   int
	}{
		{"queue asks most", []float64{2, 0.25, 0.95}, 8},            // ⌈4·2⌉, ⌈4·0.5⌉, ⌈4·0.947⌉
		{"kv asks most", []float64{1.05, 0.9, 0.9}, 8},              // within tolerance: 4; ⌈4·1.8⌉ = 8; 4
		{"slo asks most", []float64{1, 0.5, 0.6}, 6},                // 4, 4, ⌈4·1.5⌉
		{"all within tolerance", []float64{1.05, 0.52, 0.89}, 4},    // no change
		{"one within tolerance holds", []float64{0.5, 0.1, 1}, 4},   // 2, 1, 0.9 ≥ 1 − 0.1: 4
		{"all ask fewer: the largest", []float64{0.5, 0.1, 1.2}, 3}, // 2, 1, ⌈4·0.75⌉
	} {
		s := policyScaler(a, nil, nil)
		if got := s.recommend(sec(0), 4, tc.values); got != tc.want {
			t.Errorf("%s: %v → %d replicas, want %d", tc.name, tc.values, got, tc.want)
		}
	}
}

// A list of one metric is that metric; a second metric can only keep the
// fleet at least as large at each sync, and here grows it: in_flight
// counts the long decodes queue_depth does not see.
func TestAutoscaleSeveralMetricsReplay(t *testing.T) {
	var reqs []*trace.Request
	for i := range 20 {
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*250*ms, 100, 1000))
	}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	run := func(a AutoscaleConfig) (string, Stats) {
		a.MaxReplicas, a.SyncPeriodSec, a.ContainerStartSec = 8, 1, 1
		_, all, st := replay(t, Config{Workers: 1, Router: RouterLeastRequests, Autoscale: a}, cost, 4000, reqs)
		return dump(all), st
	}
	one, st1 := run(AutoscaleConfig{Metric: MetricQueueDepth, Target: 4})
	list, stl := run(AutoscaleConfig{Metrics: []AutoscaleMetric{{Metric: MetricQueueDepth, Target: 4}}})
	if one != list || st1.GPUHours != stl.GPUHours {
		t.Error("a list of one metric replays differently from the metric")
	}
	_, both := run(AutoscaleConfig{Metrics: []AutoscaleMetric{{Metric: MetricQueueDepth, Target: 4}, {Metric: MetricInFlight, Target: 4}}})
	if !(both.GPUHours > st1.GPUHours) {
		t.Errorf("GPU-hours: queue_depth %v, with in_flight too %v: want more", st1.GPUHours, both.GPUHours)
	}
}

// KEDA's scale loop is active when any metric is: request_rate wakes a
// fleet at zero that its kv_usage (at zero: none) would not.
func TestScaleToZeroSeveralMetrics(t *testing.T) {
	reqs := []*trace.Request{req("early", 0, 100, 10), req("late", 203*time.Second, 100, 10)}
	cfg := zeroCfg()
	cfg.Autoscale.Metric, cfg.Autoscale.Target = "", 0
	cfg.Autoscale.Metrics = []AutoscaleMetric{{Metric: MetricKVUsage, Target: 0.5}, {Metric: MetricRequestRate, Target: 1}}
	byID, _, st := replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if st.Completed != 2 || byID["late"].WorkerArrival.V != trace.Time(240*time.Second) {
		t.Errorf("%d completed, the late one at its worker at %v; want 2, at 240 s (poll 210 + start 30)", st.Completed, byID["late"].WorkerArrival.V)
	}
	cfg.Autoscale.Metrics[1].ActivationTarget = 1 // one arrival in 10 s is not above it
	byID, _, _ = replay(t, cfg, linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}, 400, reqs)
	if r := byID["late"]; r.Status != trace.StatusRejected ||
		!strings.Contains(r.Error, "(kv_usage 0, not above activation_target 0; request_rate 0.1, not above activation_target 1, and nothing more on its way)") {
		t.Errorf("late: %v %q; want rejected, naming both metrics", r.Status, r.Error)
	}
}

func TestAutoscaleSeveralMetricsErrors(t *testing.T) {
	m := func(ms ...AutoscaleMetric) AutoscaleConfig { return AutoscaleConfig{Metrics: ms} }
	for _, tc := range []struct {
		a    AutoscaleConfig
		want string
	}{
		{AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, Metrics: []AutoscaleMetric{{Metric: MetricKVUsage, Target: 1}}}, "autoscale.metrics: give metric and target, or metrics, not both"},
		{m(AutoscaleMetric{Metric: MetricQueueDepth, Target: 1}, AutoscaleMetric{Metric: "gpu", Target: 1}), `autoscale.metrics: metric 2: unknown metric "gpu"`},
		{m(AutoscaleMetric{Metric: MetricQueueDepth}), "autoscale.metrics: metric 1: 0 is not a positive number"},
		{m(AutoscaleMetric{Metric: MetricSLOAttainment, Target: 2}), "autoscale.metrics: metric 1: 2 is not an attainment in (0, 1]"},
		{m(AutoscaleMetric{Metric: MetricQueueDepth, Target: 1, ActivationTarget: -1}), "autoscale.metrics: metric 1: activation target -1 is not a non-negative number"},
		{m(AutoscaleMetric{Metric: MetricQueueDepth, Target: 1, ActivationTarget: 3}), "autoscale.activation_target: applies to scale to zero alone"},
	} {
		err := Config{Workers: 2, Autoscale: tc.a}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.a, err, tc.want)
		}
	}
	zero := func(ms ...AutoscaleMetric) AutoscaleConfig {
		a := m(ms...)
		a.MinReplicas, a.SLOTTFTSec = ptrInt(0), 1
		return a
	}
	for _, tc := range []struct {
		a    AutoscaleConfig
		want string
	}{
		{zero(AutoscaleMetric{Metric: MetricKVUsage, Target: 1}, AutoscaleMetric{Metric: MetricKVUsage, Target: 0.5}), "autoscale.metrics: kv_usage+kv_usage comes from the workers alone"},
		{zero(AutoscaleMetric{Metric: MetricRequestRate, Target: 1}, AutoscaleMetric{Metric: MetricSLOAttainment, Target: 0.9}), "autoscale.metrics: slo_attainment is a fraction of completions"},
	} {
		err := Config{Workers: 2, Autoscale: tc.a}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.a, err, tc.want)
		}
	}
	if err := (Config{Workers: 2, Autoscale: zero(AutoscaleMetric{Metric: MetricKVUsage, Target: 1}, AutoscaleMetric{Metric: MetricInFlight, Target: 4, ActivationTarget: 2})}).Validate(); err != nil {
		t.Errorf("kv_usage with in_flight, scaling to zero: %v", err)
	}
}

// itl_slo_attainment counts, per sync period, the completed requests of
// two tokens or more whose mean ITL met slo_itl_s, by hand: one worker
// decoding a burst misses a tight objective and the HPA grows the fleet,
// while a loose objective keeps it at one; the pool of a
// disaggregated fleet's decode workers scales on it too.
func TestAutoscaleITLAttainment(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for i := range 200 { // 20 a second for 10 s, 100 tokens each
		reqs = append(reqs, req(fmt.Sprintf("r%d", i), time.Duration(i)*50*ms, 100, 100))
	}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	// A worker decoding n requests takes 10 + 0.2n ms a step: with
	// some 40 running, 18 ms.
	for _, tc := range []struct {
		objective float64
		grows     bool
	}{{0.012, true}, {0.1, false}} {
		cfg := Config{Workers: 1, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
			Metric: MetricITLAttainment, Target: 0.9, SLOITLSec: tc.objective, MaxReplicas: 4, SyncPeriodSec: 1}}
		_, all, st := replay(t, cfg, cost, 1000, reqs)
		most := 0.0
		for _, f := range st.Fleet {
			most = max(most, f.Ready+f.Starting)
		}
		if (most > 1) != tc.grows {
			t.Errorf("objective %v s: at most %v workers; want growth %v", tc.objective, most, tc.grows)
		}
		// The first sync's value, by hand from the records.
		var met, done int
		for _, r := range all {
			if end := r.Arrival.V.Add(trace.DurationSeconds(r.E2ESec.V)); end <= trace.Time(time.Second) && r.OutputTokens.V > 1 {
				done++
				if (r.E2ESec.V-r.TTFTSec.V)/float64(r.OutputTokens.V-1) <= tc.objective {
					met++
				}
			}
		}
		if tc.grows && done > 0 && float64(met)/float64(done) >= 0.9 {
			t.Errorf("objective %v s: %d of %d met it in the first second; the test wants it missed", tc.objective, met, done)
		}
	}
	d := pdConfig(1)
	d.DecodeAutoscale = AutoscaleConfig{Metric: MetricITLAttainment, Target: 0.9, SLOITLSec: 0.012, MaxReplicas: 4, SyncPeriodSec: 1}
	_, st := checkedPD(t, Config{Workers: 2, Disaggregation: d}, reqs)
	most := 0.0
	for _, f := range st.Fleet {
		most = max(most, f.DecodeReady)
	}
	if most < 2 {
		t.Errorf("decode pool on itl_slo_attainment: at most %v ready; want growth", most)
	}
}

// itl_slo_attainment's value by hand: of three completions, one of a
// single token (no ITL, not counted), one at 20 ms a token (met) and one
// at 40 ms (missed): 1/2, which asks 2 workers for ⌈2 · 0.9/0.5⌉ = 4; a
// period without such completions gives no signal (the target).
func TestITLAttainmentValue(t *testing.T) {
	a := AutoscaleConfig{Metric: MetricITLAttainment, Target: 0.9, SLOITLSec: 0.02, MaxReplicas: 8}.withDefaults(2)
	s := newAutoscaler(8, 0, []poolSpec{{cfg: a, hi: 8, workers: 2}})
	rec := func(ttft, e2e float64, out int64) *trace.Request {
		return &trace.Request{TTFTSec: trace.Some(ttft), E2ESec: trace.Some(e2e), OutputTokens: trace.Some(out)}
	}
	s.completed(rec(0.1, 0.1, 1))
	s.completed(rec(0.1, 1.1, 51))
	s.completed(rec(0.1, 2.1, 51))
	m := AutoscaleMetric{Metric: MetricITLAttainment, Target: 0.9}
	e := &engine{scale: s}
	if v := e.metricValue(s.pool, m, 2); v != 0.5 {
		t.Fatalf("value %v, want 0.5", v)
	}
	if n := s.propose(m, 2, 0.5); n != 4 {
		t.Errorf("proposal %d, want 4", n)
	}
	s.newPeriod()
	if v := e.metricValue(s.pool, m, 2); v != 0.9 {
		t.Errorf("an empty period's value %v, want the target 0.9", v)
	}
}
