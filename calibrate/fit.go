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
	Quantity string   `yaml:"quantity"`
	Unit     string   `yaml:"unit"`
	Source   string   `yaml:"source"` // the data: files, and which records
	N        int      `yaml:"n"`
	Terms    []Term   `yaml:"terms"`
	R2       float64  `yaml:"r2"`
	MAPE     float64  `yaml:"mape_pct"` // mean absolute percentage error
	Residual Quantiles `yaml:"residual_quantiles"`
	Warnings []string `yaml:"warnings,omitempty"`
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

// fitLinear fits y on the columns (plus nothing else: an intercept is a
// column of ones the caller adds) and checks each coefficient.
func fitLinear(quantity, unit, source string, cols []column, y []float64) (*Fit, error) {
	n, p := len(y), len(cols)
	f := &Fit{Quantity: quantity, Unit: unit, Source: source, N: n}
	if n < p+2 {
		return nil, fmt.Errorf("%s: %d observations, need at least %d for %d coefficients", quantity, n, p+2, p)
	}
	a := mat.NewDense(n, p, nil)
	nonneg := make([]bool, p)
	for j, c := range cols {
		nonneg[j] = c.nonneg
		for i, v := range c.x {
			a.Set(i, j, v)
		}
	}
	coef, err := nnls(a, y, nonneg)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", quantity, err)
	}

	pred := make([]float64, n)
	var mean, rss, tss, ape float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(n)
	rel := make([]float64, 0, n)
	for i := range n {
		for j := range p {
			pred[i] += coef[j] * a.At(i, j)
		}
		r := pred[i] - y[i]
		rss += r * r
		tss += (y[i] - mean) * (y[i] - mean)
		if y[i] != 0 {
			rel = append(rel, r/y[i])
			ape += math.Abs(r / y[i])
		}
	}
	if tss > 0 {
		f.R2 = 1 - rss/tss
	}
	if len(rel) > 0 {
		f.MAPE = 100 * ape / float64(len(rel))
		d := analyze.NewDist(rel)
		f.Residual = Quantiles{d.Percentile(1), d.Percentile(10), d.Percentile(50), d.Percentile(90), d.Percentile(99)}
	}

	se := stdErrors(a, rss, n, p)
	for j, c := range cols {
		t := Term{Name: c.name, Unit: c.unit, Value: coef[j], StdErr: se[j], Identified: true}
		if why := identify(a, j, cols, coef[j], se[j]); why != "" {
			t.Identified, t.Why = false, why
			f.Warnings = append(f.Warnings, fmt.Sprintf("%s: %s not identifiable: %s", quantity, c.name, why))
		}
		f.Terms = append(f.Terms, t)
	}
	if f.R2 < minR2 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s: R² %.3f: the cost model explains the data poorly (model mismatch, or time the trace attributes to this quantity that the model prices elsewhere)", quantity, f.R2))
	}
	return f, nil
}

// stdErrors returns each coefficient's standard error, +Inf where XᵀX is
// singular.
func stdErrors(a *mat.Dense, rss float64, n, p int) []float64 {
	se := make([]float64, p)
	var xtx mat.Dense
	xtx.Mul(a.T(), a)
	var inv mat.Dense
	if n <= p || inv.Inverse(&xtx) != nil {
		for j := range se {
			se[j] = math.Inf(1)
		}
		return se
	}
	s2 := rss / float64(n-p)
	for j := range p {
		se[j] = math.Sqrt(math.Max(s2*inv.At(j, j), 0))
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
