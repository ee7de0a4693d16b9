package report

import (
	"encoding/json"
	"fmt"
	"html/template"
)

// A chart is one ECharts chart of the page, described by the few things
// the report varies: its id and section, title, axes and series. Its
// option is marshalled from plain maps: json.Marshal sorts map keys and
// escapes <, > and &, so the option is deterministic and safe inside a
// <script>. (The CDF charts are built with go-echarts, cdf.go; these
// charts need log axes, bars on category axes and scatter series that
// its typed options do not all offer.)
type chart struct {
	ID, Title string
	X, Y      axis
	Series    []series
	// Legend is shown unless the chart has one series.
	Stacked bool // bars stacked (the TTFT decomposition)
}

type axis struct {
	Name       string
	Type       string   // "value" (default), "log" or "category"
	Categories []string // for "category"
	Min, Max   any      // nil: ECharts' own
}

type series struct {
	Name   string
	Type   string // "line" (default), "bar" or "scatter"
	Data   []point
	Dashed bool
	Step   bool
	Symbol bool // draw a symbol per point (sparse lines: sweeps)
}

func (a axis) option() map[string]any {
	o := map[string]any{"type": "value", "name": a.Name, "nameLocation": "middle", "nameGap": 30}
	if a.Type != "" {
		o["type"] = a.Type
	}
	if a.Type == "category" {
		o["data"] = a.Categories
		o["nameGap"] = 45
		o["axisLabel"] = map[string]any{"rotate": 30}
	}
	if a.Type == "log" {
		o["logBase"] = 10
	}
	if a.Type == "value" || a.Type == "" {
		o["scale"] = true
	}
	if a.Min != nil {
		o["min"] = a.Min
	}
	if a.Max != nil {
		o["max"] = a.Max
	}
	return o
}

// view returns the chart's option for the page.
func (c chart) view() (chartView, error) {
	ss := make([]any, 0, len(c.Series))
	for _, s := range c.Series {
		typ := s.Type
		if typ == "" {
			typ = "line"
		}
		o := map[string]any{"name": safeLabel(s.Name), "type": typ, "data": s.Data}
		switch typ {
		case "line":
			o["showSymbol"] = s.Symbol
			if s.Dashed {
				o["lineStyle"] = map[string]any{"type": "dashed"}
			}
			if s.Step {
				o["step"] = "end"
			}
		case "scatter":
			o["symbolSize"] = 5
		case "bar":
			if c.Stacked {
				o["stack"] = "total"
			}
		}
		ss = append(ss, o)
	}
	opt := map[string]any{
		"animation": false,
		"title":     map[string]any{"text": safeLabel(c.Title)},
		"legend":    map[string]any{"show": len(c.Series) > 1, "top": 28, "type": "scroll"},
		"tooltip":   map[string]any{"show": true, "trigger": "axis"},
		"grid":      map[string]any{"top": 70, "bottom": 95, "left": 70, "right": 40},
		"xAxis":     c.X.option(),
		"yAxis":     c.Y.option(),
		"series":    ss,
	}
	if c.X.Type != "category" {
		opt["dataZoom"] = []any{
			map[string]any{"type": "slider", "xAxisIndex": []int{0}},
			map[string]any{"type": "inside", "xAxisIndex": []int{0}},
		}
	}
	b, err := json.Marshal(opt)
	if err != nil {
		return chartView{}, fmt.Errorf("report: %s chart: %w", c.ID, err)
	}
	return chartView{ID: c.ID, Title: c.Title, Option: template.JS(b)}, nil
}
