package calibrate

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/opaltrace/opaltrace/analyze"
)

// A Term is one coefficient of a linear fit.
type Term struct {
	Name  string  `yaml:"name"`
	Unit  string  `yaml:"unit"`
	Value float64 `yaml:"value"`
	// StdErr is the coefficient's standard error from the residual
	// variance, (RSS/(n−p))·(XᵀX)⁻¹, as if the noise were independent.
	StdErr float64 `yaml:"std_err"`
	// Identified is false when the data cannot pin the coefficient down;
	// Why says what is missing.
	Identified bool   `yaml:"identified"`
	Why        string `yaml:"why,omitempty"`
}

// Quantiles are residual quantiles, relative to the observed value:
// (predicted − observed)/observed.
type Quantiles struct {
	P1  float64 `yaml:"p1"`
	P10 float64 `yaml:"p10"`
	P50 float64 `yaml:"p50"`
	P90 float64 `yaml:"p90"`
	P99 float64 `yaml:"p99"`
}

// A Fit is the non-negative least-squares fit of one measured quantity
// (prefill seconds, decode seconds per token, storage I/O seconds) on
// terms the cost model predicts it from.
type Fit struct {
	Quantity string    `yaml:"quantity"`
	Unit     string    `yaml:"unit"`
	Source   string    `yaml:"source"`   // the data: files, and which records
	N        int       `yaml:"n"`        // records fitted
	Excluded int       `yaml:"excluded"` // records set aside as contended
	Terms    []Term    `yaml:"terms"`
	R2       float64   `yaml:"r2"`
	MAPE     float64   `yaml:"mape_pct"` // mean absolute percentage error
	Residual Quantiles `yaml:"residual_quantiles"`
	Warnings []string  `yaml:"warnings,omitempty"`
}

// Term returns the term called name, or nil.
func (f *Fit) Term(name string) *Term {
	for i := range f.Terms {
		if f.Terms[i].Name == name {
			return &f.Terms[i]
		}
	}
	return nil
}

// A column is one regressor: its name and unit, whether its coefficient
// is constrained non-negative, and its values.
type column struct {
	name, unit string
	nonneg     bool
	x          []float64
}

// Thresholds of the identifiability checks.
const (
	// A regressor whose values span less than this fraction of their
	// magnitude cannot separate its coefficient from the intercept.
	narrowRange = 0.1
	// A regressor explained by the others to this R² is collinear with
	// them (variance inflation factor 1/(1−R²) = 1,000).
	collinearR2 = 0.999
	// A coefficient whose standard error exceeds this fraction of its
	// value is not identified.
	maxRelStdErr = 0.5
	// A fit whose R² is below this is flagged as a model mismatch.
	minR2 = 0.9
)

// fitLinear fits y on the columns (an intercept is a column of ones the
// caller adds) and checks each coefficient.
//
// Note: the fit minimises relative residuals, (pred − obs)/obs, as a
// weighted least squares with weights 1/obs: durations span orders of
// magnitude and their noise is proportional. Interference the model does
// not price (a request's prefill sharing steps with its batch-mates',
// an I/O queueing behind others) only adds time, so records the model
// underpredicts by more than trimSigmas robust standard deviations (MAD)
// are set aside as contended and the fit repeated, at most trimRounds
// times; Excluded counts them.
func fitLinear(quantity, unit, source string, cols []column, y []float64) (*Fit, error) {
	return fitLinearConstrained(quantity, unit, source, cols, y, nil, nil)
}

// A Prior pulls a coefficient of a linear fit toward Value: one
// pseudo-observation saying it is Value with a relative standard
// deviation RelSD, weighed like a measured row.
type Prior struct {
	Value, RelSD float64
}

// fitLinearConstrained is fitLinear with some terms held at given values
// (fixed, by term name: their share is taken off each observation and
// they are reported as fixed) and others pulled toward a prior (priors,
// by term name). Unconstrained, it needs two observations more than
// coefficients; with a constraint, as many observations and priors as
// free coefficients suffice (an exactly determined fit, whose standard
// errors cannot be estimated and are reported as NaN).
func fitLinearConstrained(quantity, unit, source string, all []column, y []float64, fixed map[string]float64, priors map[string]Prior) (*Fit, error) {
	f := &Fit{Quantity: quantity, Unit: unit, Source: source}
	var cols []column
	offset := make([]float64, len(y))
	var fixedTerms []Term
	for _, c := range all {
		v, ok := fixed[c.name]
		if !ok {
			cols = append(cols, c)
			continue
		}
		for i := range offset {
			offset[i] += v * c.x[i]
		}
		fixedTerms = append(fixedTerms, Term{Name: c.name, Unit: c.unit, Value: v, Identified: true, Why: "fixed"})
	}
	n, p := len(y), len(cols)
	var priorRows []int // column index of each prior
	for j, c := range cols {
		if pr, ok := priors[c.name]; ok {
			if !(pr.Value > 0) || !(pr.RelSD > 0) {
				return nil, fmt.Errorf("%s: prior on %s: value %v and relative deviation %v must be positive", quantity, c.name, pr.Value, pr.RelSD)
			}
			priorRows = append(priorRows, j)
		}
	}
	constrained := len(fixedTerms) > 0 || len(priorRows) > 0
	if p == 0 {
		return nil, fmt.Errorf("%s: every coefficient is fixed: nothing to fit", quantity)
	}
	if need := p + 2; !constrained && n < need {
		return nil, fmt.Errorf("%s: %d observations, need at least %d for %d coefficients (or fix some, or give priors)", quantity, n, need, p)
	} else if constrained && n+len(priorRows) < p {
		return nil, fmt.Errorf("%s: %d observations and %d priors for %d free coefficients: fix more, or give priors", quantity, n, len(priorRows), p)
	}
	nonneg := make([]bool, p)
	for j, c := range cols {
		nonneg[j] = c.nonneg
	}
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = y[i] > 0
	}
	var coef []float64
	var aw *mat.Dense
	for round := 0; ; round++ {
		var rows []int
		for i := range n {
			if keep[i] {
				rows = append(rows, i)
			}
		}
		if need := p + 2; !constrained && len(rows) < need {
			return nil, fmt.Errorf("%s: %d usable observations, need at least %d", quantity, len(rows), need)
		} else if constrained && len(rows)+len(priorRows) < p {
			return nil, fmt.Errorf("%s: %d usable observations and %d priors for %d free coefficients", quantity, len(rows), len(priorRows), p)
		}
		aw = mat.NewDense(len(rows)+len(priorRows), p, nil)
		yw := make([]float64, len(rows)+len(priorRows))
		for k, i := range rows {
			for j, c := range cols {
				aw.Set(k, j, c.x[i]/y[i])
			}
			yw[k] = (y[i] - offset[i]) / y[i]
		}
		for k, j := range priorRows {
			pr := priors[cols[j].name]
			aw.Set(len(rows)+k, j, 1/(pr.Value*pr.RelSD))
			yw[len(rows)+k] = 1 / pr.RelSD
		}
		var err error
		if coef, err = nnls(aw, yw, nonneg); err != nil {
			return nil, fmt.Errorf("%s: %v", quantity, err)
		}
		if round == trimRounds {
			break
		}
		rel := make([]float64, 0, len(rows))
		for _, i := range rows {
			rel = append(rel, (y[i]-offset[i]-predict(cols, coef, i))/y[i])
		}
		med := median(rel)
		dev := make([]float64, len(rel))
		for k, r := range rel {
			dev[k] = math.Abs(r - med)
		}
		limit := med + trimSigmas*math.Max(1.4826*median(dev), 1e-9)
		changed := false
		for i := range n {
			want := y[i] > 0 && (y[i]-offset[i]-predict(cols, coef, i))/y[i] <= limit
			if want != keep[i] {
				keep[i], changed = want, true
			}
		}
		if !changed {
			break
		}
	}

	var mean, rss, tss, ape float64
	var rel []float64
	for i := range n {
		if keep[i] {
			mean += y[i]
			f.N++
		}
	}
	mean /= float64(f.N)
	var rssw float64
	for i := range n {
		if !keep[i] {
			continue
		}
		r := offset[i] + predict(cols, coef, i) - y[i]
		rss += r * r
		rssw += (r / y[i]) * (r / y[i])
		tss += (y[i] - mean) * (y[i] - mean)
		rel = append(rel, r/y[i])
		ape += math.Abs(r / y[i])
	}
	f.Excluded = n - f.N
	if tss > 0 {
		f.R2 = 1 - rss/tss
	}
	f.MAPE = 100 * ape / float64(len(rel))
	d := analyze.NewDist(rel)
	f.Residual = Quantiles{d.Percentile(1), d.Percentile(10), d.Percentile(50), d.Percentile(90), d.Percentile(99)}

	for _, j := range priorRows {
		pr := priors[cols[j].name]
		d := (coef[j] - pr.Value) / (pr.Value * pr.RelSD)
		rssw += d * d
	}
	se := stdErrors(aw, rssw, f.N+len(priorRows), p)
	kept := make([]column, p)
	for j, c := range cols {
		kept[j] = c
		kept[j].x = nil
		for i := range n {
			if keep[i] {
				kept[j].x = append(kept[j].x, c.x[i])
			}
		}
	}
	for j, c := range kept {
		t := Term{Name: c.name, Unit: c.unit, Value: coef[j], StdErr: se[j], Identified: true}
		if why := identify(aw, j, kept, coef[j], se[j]); why != "" {
			t.Identified, t.Why = false, why
			f.Warnings = append(f.Warnings, fmt.Sprintf("%s: %s not identifiable: %s", quantity, c.name, why))
		}
		f.Terms = append(f.Terms, t)
	}
	if math.IsNaN(se[0]) {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s: exactly determined (%d observations and priors for %d free coefficients): the fit passes through every row and its standard errors cannot be estimated", quantity, f.N+len(priorRows), p))
	}
	f.Terms = append(f.Terms, fixedTerms...)
	if f.Excluded > 0 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s: %d of %d records set aside as contended (observed > %.0f robust SDs above the fit)", quantity, f.Excluded, n, trimSigmas))
	}
	if f.R2 < minR2 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s: R² %.3f: the cost model explains the data poorly (model mismatch, or time the trace attributes to this quantity that the model prices elsewhere)", quantity, f.R2))
	}
	return f, nil
}

const (
	trimRounds = 5
	trimSigmas = 4.0
)

func predict(cols []column, coef []float64, i int) float64 {
	var s float64
	for j, c := range cols {
		s += coef[j] * c.x[i]
	}
	return s
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	return analyze.NewDist(append([]float64(nil), x...)).Median()
}

// stdErrors returns each coefficient's standard error for the design a
// (rows already weighted) with weighted residual sum of squares rss, +Inf
// where the design is singular. Columns are scaled to unit norm before
// inverting so that seconds per byte and seconds per step do not make
// XᵀX numerically singular.
func stdErrors(a *mat.Dense, rss float64, n, p int) []float64 {
	se := make([]float64, p)
	rows, _ := a.Dims()
	as := mat.DenseCopyOf(a)
	scale := make([]float64, p)
	for j := range p {
		s := mat.Norm(as.ColView(j), 2)
		if s == 0 {
			s = 1
		}
		scale[j] = s
		for i := range rows {
			as.Set(i, j, as.At(i, j)/s)
		}
	}
	var xtx mat.Dense
	xtx.Mul(as.T(), as)
	var inv mat.Dense
	if n < p || inv.Inverse(&xtx) != nil {
		for j := range se {
			se[j] = math.Inf(1)
		}
		return se
	}
	if n == p {
		// Exactly determined: no residual to estimate the noise from.
		for j := range se {
			se[j] = math.NaN()
		}
		return se
	}
	s2 := rss / float64(n-p)
	for j := range p {
		se[j] = math.Sqrt(math.Max(s2*inv.At(j, j), 0)) / scale[j]
	}
	return se
}

// identify returns why coefficient j is not identified, or "".
func identify(a *mat.Dense, j int, cols []column, value, se float64) string {
	x := cols[j].x
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range x {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	switch {
	case hi == 0 && lo == 0:
		return "no data for it (the regressor is zero in every record)"
	case lo == hi && cols[j].name != interceptName(cols):
		return fmt.Sprintf("the regressor is constant (%g), indistinguishable from a fixed cost", lo)
	}
	if lo != hi && cols[j].name != interceptName(cols) && hasIntercept(cols) {
		if span := (hi - lo) / math.Max(math.Abs(hi), math.Abs(lo)); span < narrowRange {
			return fmt.Sprintf("too narrow a range: the regressor spans only %.1f%% (%.4g to %.4g)", 100*span, lo, hi)
		}
	}
	if r2, with := collinearity(a, j, cols); r2 > collinearR2 {
		return fmt.Sprintf("collinear with %s (R² %.5f)", with, r2)
	}
	if value == 0 {
		return "held at its bound 0: the data give it no positive weight"
	}
	if se > maxRelStdErr*math.Abs(value) {
		return fmt.Sprintf("standard error %.3g is %.0f%% of the value %.4g", se, 100*se/math.Abs(value), value)
	}
	return ""
}

// interceptName is the name of the constant column, if any.
func interceptName(cols []column) string {
	for _, c := range cols {
		if isConstant(c.x) {
			return c.name
		}
	}
	return ""
}

func hasIntercept(cols []column) bool { return interceptName(cols) != "" }

func isConstant(x []float64) bool {
	for _, v := range x {
		if v != x[0] {
			return false
		}
	}
	return len(x) > 0 && x[0] != 0
}

// collinearity regresses column j on the others (columns scaled to unit
// norm, least squares) and returns the R² of that fit around zero (the
// share of column j's norm the others explain) and their names.
func collinearity(a *mat.Dense, j int, cols []column) (float64, string) {
	n, p := a.Dims()
	if p < 2 {
		return 0, ""
	}
	others := mat.NewDense(n, p-1, nil)
	var names []string
	k := 0
	for c := range p {
		if c == j {
			continue
		}
		s := mat.Norm(a.ColView(c), 2)
		if s == 0 {
			s = 1
		}
		for i := range n {
			others.Set(i, k, a.At(i, c)/s)
		}
		names = append(names, cols[c].name)
		k++
	}
	y := mat.VecDenseCopyOf(a.ColView(j))
	ny := mat.Norm(y, 2)
	if ny == 0 {
		return 0, ""
	}
	y.ScaleVec(1/ny, y)
	var qr mat.QR
	qr.Factorize(others)
	var b mat.VecDense
	if err := qr.SolveVecTo(&b, false, y); err != nil {
		return 1, strings.Join(names, ", ")
	}
	var fit mat.VecDense
	fit.MulVec(others, &b)
	fit.SubVec(y, &fit)
	res := mat.Norm(&fit, 2)
	return 1 - res*res, strings.Join(names, ", ")
}
