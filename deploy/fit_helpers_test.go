package deploy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/model"
)

// applyFit prices s at the coefficients coef, through the cost model's
// apply path as replay does (the step model's and the client overhead's
// coefficients alike), and returns them as "name value, ..." for a
// table's caption.
func applyFit(s *Setup, coef map[string]float64) string {
	cm := &calibrate.CostModel{Version: calibrate.CostModelVersion, Form: model.FormRoofline, Coefficients: map[string]calibrate.Coefficient{}}
	var names []string
	for k, v := range coef {
		cm.Coefficients[k] = calibrate.Coefficient{Value: v}
		names = append(names, fmt.Sprintf("%s %g", k, v))
	}
	sort.Strings(names)
	d := *s.Deployment
	cm.Apply(&d)
	s.Deployment, s.Step = &d, &d
	cm.ClientOverhead().ApplyConfig(&s.Config)
	return strings.Join(names, ", ")
}
