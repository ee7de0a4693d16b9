package replay

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// The Kalman predictor gives Dynamo's predictions over a run of intervals
// — idle ones first (skipped), one with nothing completed (NaN, taken as
// 0 once traffic started), repeated predictions in one interval (cached),
// intervals the planner skipped (no prediction) — with Dynamo's default
// noises, with log1p, and with its "reactive" preset. The values are
// testdata/kalman_reference.py's: Dynamo's KalmanPredictor over filterpy's
// equations in numpy, printed to full precision.
func TestKalmanPredictor(t *testing.T) {
	const events = "n a0 a0 n anan a120 n a135 n n a160 a170 n a90 n a0 n anan n a400 a410 n a380 n a20 n"
	for _, c := range []struct {
		cfg  PlannerConfig
		want []float64
	}{
		{PlannerConfig{KalmanQLevel: 1, KalmanQTrend: 0.1, KalmanR: 10}, []float64{0, 0, 120, 142.3843858776728, 142.3843858776728,
			189.72257331671494, 106.23106949882401, 5.552758712651794, -32.82238949994402, 345.0417180623755, 403.24648343974246, 240.98150873613199}},
		{PlannerConfig{KalmanQLevel: 1, KalmanQTrend: 0.1, KalmanR: 10, PredictorLog1p: true}, []float64{0, 0, 120.00000000000003, 143.05372370232047,
			143.05372370232047, 193.9425295565755, 100.08735282840681, 0.9583001312452596, 0, 64.70515940084327, 183.52906621564563, 71.14766562119732}},
		{PlannerConfig{KalmanQLevel: 10, KalmanQTrend: 1, KalmanR: 5}, []float64{0, 0, 120, 142.40694789081886, 142.40694789081886,
			188.6417972352147, 89.02111508524412, -23.860668804749274, -38.41774064847859, 471.4468051385254, 447.54277864475904, 68.03271627918515}},
	} {
		k := newKalmanPredictor(c.cfg)
		var got []float64
		for _, ev := range strings.Fields(events) {
			if ev == "n" {
				got = append(got, k.next())
				continue
			}
			v, err := strconv.ParseFloat(ev[1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			k.add(v)
		}
		if len(got) != len(c.want) {
			t.Fatalf("%+v: %d predictions, want %d", c.cfg, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%+v: prediction %d is %v, the reference's %v (%.3g ulp)", c.cfg, i, got[i], c.want[i], (got[i]-c.want[i])/ulp(c.want[i]))
			}
		}
	}
}

// ulp is the spacing of float64s at v.
func ulp(v float64) float64 {
	return math.Nextafter(math.Abs(v), math.Inf(1)) - math.Abs(v)
}

// The constant predictor is the last value taken: 0 before any, leading
// zeros and NaNs skipped, a later NaN taken as 0.
func TestConstantPredictor(t *testing.T) {
	var c constantPredictor
	for _, s := range []struct {
		add, want float64
	}{{math.NaN(), 0}, {0, 0}, {7, 7}, {math.NaN(), 0}, {3.5, 3.5}, {0, 0}} {
		c.add(s.add)
		if got := c.next(); got != s.want {
			t.Errorf("after %v: %v, want %v", s.add, got, s.want)
		}
	}
}

// The planner feeds its predictors every interval's observations, those
// of an interval with nothing observed too (requests 0, ISL and OSL
// NaN), as Dynamo's observe_traffic_stats does before it decides whether
// to adjust: after an idle interval the Kalman filter predicts from the
// zeros it took.
func TestPlannerFeedsIdleIntervals(t *testing.T) {
	cfg := PlannerConfig{Policy: PlannerDynamoSLA, Predictor: PredictorKalman}.withDefaults()
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	p := newPlanner(cfg, cost, cost, 2048, 6400, 256)
	var want [3]loadPredictor
	for i := range want {
		want[i] = newKalmanPredictor(cfg)
	}
	at := trace.Time(0)
	for k, n := range []int{40, 0, 60, 0, 0, 50} {
		for i := range n {
			// Streamed and completed within the interval.
			t := at.Add(time.Second)
			p.firstToken(t, &reqState{arrival: t.Add(-300 * time.Millisecond), prompt: int64(900 + 10*i)})
			p.laterChunk(t.Add(time.Second), 0.9, 39)
			p.completed(&trace.Request{InputTokens: trace.Some(int64(900 + 10*i)), OutputTokens: trace.Some(int64(40)),
				TTFTSec: trace.Some(0.3), E2ESec: trace.Some(1.2)})
		}
		isl, osl := math.NaN(), math.NaN()
		if n > 0 {
			isl, osl = float64(900*n+10*n*(n-1)/2)/float64(n), 40
		}
		want[0].add(float64(n))
		want[1].add(isl)
		want[2].add(osl)
		at = at.Add(180 * time.Second)
		_, _, ok := p.adjust(at, 1)
		if ok != (n > 0) {
			t.Fatalf("interval %d (%d completed): adjusted %v", k, n, ok)
		}
		if !ok {
			continue
		}
		adj := p.log[len(p.log)-1]
		if w := [3]float64{want[0].next(), want[1].next(), want[2].next()}; adj.NextRequests != w[0] || adj.NextISL != w[1] || adj.NextOSL != w[2] {
			t.Errorf("interval %d: predicted %v, %v, %v; want %v", k, adj.NextRequests, adj.NextISL, adj.NextOSL, w)
		}
		if k == 2 {
			// A filter that took 40 and 60 alone predicts otherwise.
			skip := newKalmanPredictor(cfg)
			skip.add(40)
			skip.add(60)
			if got := skip.next(); got == adj.NextRequests {
				t.Errorf("interval %d: %v requests predicted, as if the idle interval were not taken", k, got)
			}
		}
	}
}
