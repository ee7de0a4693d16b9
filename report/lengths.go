package report

import (
	"fmt"
	"strconv"
)

// lengthSection draws the input and output length histograms (completed
// requests, half-octave bins), TTFT against input length (exact median
// and p99 per bin) and the mean ITL gap against its position in the
// stream.
func lengthSection(sets []reportSet, _ HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "lengths", Title: "Lengths",
		Intro: "Completed requests by prompt and output length, in half-octave bins; TTFT against prompt length " +
			"(exact median and p99 of each bin); the mean inter-token gap by its position in the stream."}
	for _, s := range sets {
		if s.extras == nil {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: summarized without a pass for these sections.", s.name))
		}
	}
	// One category axis shared by every dataset: the bins from the
	// first to the last that any dataset fills.
	hist := func(id, title string, of func(*Extras) *[lengthBins]int64) error {
		lo, hi := lengthBins, -1
		for _, s := range sets {
			if s.extras == nil {
				continue
			}
			for k, n := range of(s.extras) {
				if n > 0 {
					lo, hi = min(lo, k), max(hi, k)
				}
			}
		}
		if hi < 0 {
			return nil
		}
		var cats []string
		for k := lo; k <= hi; k++ {
			cats = append(cats, binLabel(k))
		}
		var ss []series
		for _, s := range sets {
			if s.extras == nil {
				continue
			}
			h := of(s.extras)
			pts := make([]point, 0, hi-lo+1)
			for k := lo; k <= hi; k++ {
				pts = append(pts, point{float64(k - lo), float64(h[k])})
			}
			ss = append(ss, series{Name: s.name, Type: "bar", Data: pts})
		}
		v, err := chart{ID: id, Title: title, X: axis{Name: "tokens", Type: "category", Categories: cats}, Y: axis{Name: "requests", Min: 0}, Series: ss}.view()
		if err != nil {
			return err
		}
		sec.Charts = append(sec.Charts, v)
		return nil
	}
	if err := hist("len-input", "Prompt length", func(x *Extras) *[lengthBins]int64 { return &x.InputHist }); err != nil {
		return sec, err
	}
	if err := hist("len-output", "Output length", func(x *Extras) *[lengthBins]int64 { return &x.OutputHist }); err != nil {
		return sec, err
	}
	var ttft, itl []series
	for _, s := range sets {
		if s.extras == nil {
			continue
		}
		var med, p99 []point
		for _, b := range s.extras.TTFTByInput {
			x := float64(max(b.Lo, 1)) // the bin's lower edge, on a log axis
			med = append(med, point{x, b.Median * 1000})
			p99 = append(p99, point{x, b.P99 * 1000})
		}
		if len(med) > 0 {
			ttft = append(ttft, series{Name: s.name + " median", Data: med, Symbol: true},
				series{Name: s.name + " p99", Data: p99, Dashed: true, Symbol: true})
		}
		var pos []point
		for _, b := range s.extras.ITLByPosition {
			pos = append(pos, point{float64(b.Lo), b.Mean * 1000})
		}
		if len(pos) > 0 {
			itl = append(itl, series{Name: s.name, Data: pos, Symbol: true})
		}
	}
	if len(ttft) > 0 {
		v, err := chart{ID: "len-ttft", Title: "TTFT against prompt length", X: axis{Name: "prompt tokens (bin's lower edge)", Type: "log"},
			Y: axis{Name: "TTFT (ms)", Min: 0}, Series: ttft}.view()
		if err != nil {
			return sec, err
		}
		sec.Charts = append(sec.Charts, v)
	}
	if len(itl) > 0 {
		v, err := chart{ID: "len-itl", Title: "ITL against output position", X: axis{Name: "gap index in the stream (bin's lower edge)", Type: "log"},
			Y: axis{Name: "mean ITL (ms)", Min: 0}, Series: itl}.view()
		if err != nil {
			return sec, err
		}
		sec.Charts = append(sec.Charts, v)
	}
	return sec, nil
}

// binLabel names length bin k: "0", "5", "8–10", "≥ 741455".
func binLabel(k int) string {
	lo, hi := lengthEdge(k), lengthEdge(k+1)
	switch {
	case k == lengthBins-1:
		return "≥ " + strconv.FormatInt(lo, 10)
	case hi-lo == 1:
		return strconv.FormatInt(lo, 10)
	}
	return fmt.Sprintf("%d–%d", lo, hi-1)
}
