package replay

import "math"

// The planner's load predictors (Dynamo's planner/utils/load_predictor.py):
// each takes one observation an adjustment interval, and predicts the
// next interval's. The planner keeps three, for the interval's requests,
// mean ISL and mean OSL.
//
// As Dynamo's BasePredictor, a predictor takes a NaN (an interval with no
// request: its means are 0/0) as 0, and skips the zeros before the first
// value that is not 0 (the idle time after a deployment starts).
//
// Not modelled: ARIMA (Dynamo's default: pmdarima's auto_arima, an order
// searched stepwise by AIC and fitted by maximum likelihood, then updated
// as points come) and Prophet; their forecasts are not reproduced.
type loadPredictor interface {
	add(v float64) // add_data_point
	next() float64 // predict_next
}

// Predictor names (PlannerConfig.Predictor).
const (
	PredictorConstant = "constant" // the last interval's value
	PredictorKalman   = "kalman"   // a local linear trend Kalman filter
)

// idleSkip is BasePredictor's data buffer, as far as a predictor reads
// it: the last value taken (0 before any: get_last_value's 0 for an
// empty buffer), and whether one that is not 0 came yet.
type idleSkip struct {
	seen  bool
	value float64
}

// took reports whether v (NaN read as 0) is taken, and takes it.
func (s *idleSkip) took(v float64) bool {
	if math.IsNaN(v) {
		v = 0
	}
	if v == 0 && !s.seen {
		return false
	}
	if v != 0 {
		s.seen = true
	}
	s.value = v
	return true
}

// last is get_last_value: the last value taken, 0 before any.
func (s *idleSkip) last() float64 { return s.value }

// constantPredictor predicts the last value taken.
type constantPredictor struct{ idleSkip }

func (c *constantPredictor) add(v float64) { c.took(v) }
func (c *constantPredictor) next() float64 { return c.last() }

// kalmanPredictor is Dynamo's KalmanPredictor: a filter (filterpy's
// KalmanFilter, two states, one measurement) of a local linear trend —
// level ℓ and trend τ, ℓ' = ℓ + τ + w, τ' = τ + u, the measurement the
// level plus noise — with process noise Q = diag(q_level, q_trend),
// measurement noise R = r and P = 1000·I at the start. The first value
// taken sets the level (trend 0, P left as it was); each later one is a
// predict and an update, the predict left out when next has made it
// already. next predicts once an interval and returns the level (under
// log1p the filter runs on log1p of the values, and next returns
// expm1 of it, at least 0; without, it can be negative, as Dynamo's).
//
// Note: the 2×2 products are written out, in numpy's order of the
// terms (filterpy's update keeps P in Joseph's form, (I − KH)P(I − KH)ᵀ +
// KRKᵀ, written out the same way): the predictions are numpy's to the
// bit (TestKalmanPredictor, against testdata/kalman_reference.py).
type kalmanPredictor struct {
	idleSkip
	log1p       bool
	qLevel      float64
	qTrend      float64
	r           float64
	x0, x1      float64       // level, trend
	p           [2][2]float64 // covariance
	initialized bool
	cached      bool    // next predicted this interval already
	pred        float64 // its level
}

func newKalmanPredictor(c PlannerConfig) *kalmanPredictor {
	return &kalmanPredictor{
		log1p: c.PredictorLog1p, qLevel: max(1e-12, c.KalmanQLevel), qTrend: max(1e-12, c.KalmanQTrend), r: max(1e-9, c.KalmanR),
		p: [2][2]float64{{1000, 0}, {0, 1000}},
	}
}

func (k *kalmanPredictor) add(v float64) {
	if !k.took(v) {
		return
	}
	z := k.value
	if k.log1p {
		z = math.Log1p(max(0, z))
	}
	switch {
	case !k.initialized:
		k.x0, k.x1, k.initialized = z, 0, true
	default:
		if !k.cached {
			k.predict()
		}
		k.update(z)
	}
	k.cached = false
}

func (k *kalmanPredictor) next() float64 {
	if !k.initialized {
		return k.last()
	}
	if !k.cached {
		k.predict()
		k.pred, k.cached = k.x0, true
	}
	if k.log1p {
		return max(0, math.Expm1(k.pred))
	}
	return k.pred
}

// predict is x = Fx, P = FPFᵀ + Q with F = [[1, 1], [0, 1]].
func (k *kalmanPredictor) predict() {
	k.x0 += k.x1
	a, b, c, d := k.p[0][0], k.p[0][1], k.p[1][0], k.p[1][1]
	k.p = [2][2]float64{{(a + c) + (b + d) + k.qLevel, b + d}, {c + d, d + k.qTrend}}
}

// update takes measurement z of the level (H = [1, 0]).
func (k *kalmanPredictor) update(z float64) {
	a, b, c, d := k.p[0][0], k.p[0][1], k.p[1][0], k.p[1][1]
	y := z - k.x0
	s := a + k.r
	si := 1 / s
	k0, k1 := a*si, c*si
	k.x0 += k0 * y
	k.x1 += k1 * y
	// M = (I − KH)P, then M(I − KH)ᵀ + KRKᵀ.
	i00, i10 := 1-k0, -k1
	m00, m01 := i00*a, i00*b
	m10, m11 := i10*a+c, i10*b+d
	kr0, kr1 := k0*k.r, k1*k.r
	k.p = [2][2]float64{
		{m00*i00 + kr0*k0, m00*i10 + m01 + kr0*k1},
		{m10*i00 + kr1*k0, m10*i10 + m11 + kr1*k1},
	}
}
