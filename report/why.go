package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/analyze"
)

// whySection explains the latencies: the TTFT decomposition (queue, KV
// load, prefill, other) by TTFT percentile band, the load per worker and
// its imbalance, and the ideal LRU cache curve of the trace's prefixes
// beside the hit rate the data records.
func whySection(sets []reportSet, _ HTMLOptions) (sectionView, error) {
	sec := sectionView{ID: "why", Title: "Why"}
	if err := decompCharts(&sec, sets); err != nil {
		return sec, err
	}
	if err := workerCharts(&sec, sets); err != nil {
		return sec, err
	}
	if err := cacheCharts(&sec, sets); err != nil {
		return sec, err
	}
	if len(sec.Tables) > 0 || len(sec.Charts) > 0 {
		sec.Intro = "Where the time and the load go, from the per-request data."
	}
	return sec, nil
}

func decompCharts(sec *sectionView, sets []reportSet) error {
	var cats []string
	parts := make([][]point, len(analyze.DecompParts))
	for _, s := range sets {
		if s.extras == nil || s.extras.Decomp == nil {
			continue
		}
		d := s.extras.Decomp
		tv := tableView{Caption: "TTFT decomposition: " + s.name + fmt.Sprintf(" (%d requests)", d.Requests),
			Head: []string{"TTFT band", "requests", "mean TTFT (ms)", "queue (ms)", "prefill (ms)", "KV load (ms)", "routing (ms)", "other (ms)", "dominant"}}
		for _, b := range d.Bands {
			label := bandLabel(b.LoPct, b.HiPct)
			row := []cell{{V: label}, {V: strconv.Itoa(b.N)}}
			if b.N == 0 {
				for range len(analyze.DecompParts) + 2 { // mean TTFT, the parts, dominant
					row = append(row, cell{V: missing})
				}
				tv.Rows = append(tv.Rows, row)
				continue
			}
			row = append(row, cell{V: fmt.Sprintf("%.2f", b.MeanTTFT*1000)})
			for j := range analyze.DecompParts {
				row = append(row, cell{V: fmt.Sprintf("%.2f (%.0f %%)", b.Mean[j]*1000, 100*b.Share[j])})
			}
			row = append(row, cell{V: b.Dominant})
			tv.Rows = append(tv.Rows, row)
			x := float64(len(cats))
			cats = append(cats, s.name+" "+label)
			for j := range analyze.DecompParts {
				parts[j] = append(parts[j], point{x, b.Mean[j] * 1000})
			}
		}
		if d.PrefillIncludesQueue > 0 {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: %d requests' prefill includes their queue wait (the source measured it from dispatch).", s.name, d.PrefillIncludesQueue))
		}
		sec.Tables = append(sec.Tables, tv)
	}
	if len(cats) == 0 {
		return nil
	}
	names := map[string]string{"queue": "queue", "prefill": "prefill", "kv_fetch": "KV load", "routing": "routing", "other": "other"}
	var ss []series
	for j, p := range analyze.DecompParts {
		ss = append(ss, series{Name: names[p], Type: "bar", Data: parts[j]})
	}
	v, err := chart{ID: "why-decomp", Title: "TTFT decomposition by TTFT percentile band (means)", Stacked: true,
		X: axis{Name: "dataset and band", Type: "category", Categories: cats}, Y: axis{Name: "ms"}, Series: ss}.view()
	if err != nil {
		return err
	}
	sec.Charts = append(sec.Charts, v)
	return nil
}

func workerCharts(sec *sectionView, sets []reportSet) error {
	err := loadCharts(sec, sets, loadView{
		loads: func(x *Extras) []WorkerLoad { return x.Workers },
		// A disaggregated request's hits are its prefill worker's.
		hits:    func(x *Extras) bool { return len(x.PrefillWorkers) == 0 },
		id:      "why-workers",
		caption: "Load per worker", title: "Requests per worker", axis: "worker",
	})
	if err != nil {
		return err
	}
	return loadCharts(sec, sets, loadView{
		loads:   func(x *Extras) []WorkerLoad { return x.PrefillWorkers },
		hits:    func(*Extras) bool { return true },
		id:      "why-prefill-workers",
		caption: "Load per prefill worker (disaggregated: the router's choices)", title: "Requests per prefill worker", axis: "prefill worker",
	})
}

// A loadView is a table and chart of per-worker loads: the loads of a
// dataset, whether its workers' prefix hits are theirs, and the names.
type loadView struct {
	loads                    func(*Extras) []WorkerLoad
	hits                     func(*Extras) bool
	id, caption, title, axis string
}

func loadCharts(sec *sectionView, sets []reportSet, lv loadView) error {
	var names []string
	drawn := false
	for _, s := range sets {
		if s.extras == nil || len(lv.loads(s.extras)) < 2 {
			continue
		}
		for _, w := range lv.loads(s.extras) {
			if !slices.Contains(names, w.Worker) {
				names = append(names, w.Worker)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.SortFunc(names, compareWorkers)
	tv := tableView{Caption: lv.caption, Head: []string{"dataset", "workers", "requests: max / mean", "tokens: max / mean", "requests per worker: min – max", "prefix hit rate per worker: min – max"}}
	var ss []series
	for _, s := range sets {
		if s.extras == nil || len(lv.loads(s.extras)) < 2 {
			continue
		}
		ws := lv.loads(s.extras)
		byReq, byTok := Imbalance(ws)
		lo, hi := int64(math.MaxInt64), int64(0)
		hlo, hhi, hits := 1.0, 0.0, false
		for _, w := range ws {
			lo, hi = min(lo, w.Requests), max(hi, w.Requests)
			if !lv.hits(s.extras) {
				continue
			}
			if w.InputTokens > 0 && w.HitTokens > 0 || s.extras.HitKnown && w.InputTokens > 0 {
				r := float64(w.HitTokens) / float64(w.InputTokens)
				hlo, hhi, hits = min(hlo, r), max(hhi, r), true
			}
		}
		hr := cell{V: missing}
		if hits {
			hr = cell{V: fmt.Sprintf("%.1f %% – %.1f %%", 100*hlo, 100*hhi)}
		}
		tv.Rows = append(tv.Rows, []cell{{V: s.name}, {V: strconv.Itoa(len(ws))}, {V: fmt.Sprintf("%.3f", byReq)}, {V: fmt.Sprintf("%.3f", byTok)},
			{V: fmt.Sprintf("%d – %d", lo, hi)}, hr})
		pts := make([]point, 0, len(ws))
		for _, w := range ws {
			pts = append(pts, point{float64(slices.Index(names, w.Worker)), float64(w.Requests)})
		}
		ss = append(ss, series{Name: s.name, Type: "bar", Data: pts})
		drawn = true
	}
	if !drawn {
		return nil
	}
	sec.Tables = append(sec.Tables, tv)
	v, err := chart{ID: lv.id, Title: lv.title, X: axis{Name: lv.axis, Type: "category", Categories: safeLabels(names)},
		Y: axis{Name: "requests", Min: 0}, Series: ss}.view()
	if err != nil {
		return err
	}
	sec.Charts = append(sec.Charts, v)
	return nil
}

// compareWorkers orders worker names with a numeric suffix by prefix,
// then number (w2 before w10).
func compareWorkers(a, b string) int {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	ia, ea := strconv.Atoi(na)
	ib, eb := strconv.Atoi(nb)
	if ea == nil && eb == nil && ia != ib {
		return cmp.Compare(ia, ib)
	}
	return strings.Compare(a, b)
}

// splitNumber splits s before its trailing digits.
func splitNumber(s string) (prefix, digits string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
}

func safeLabels(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = safeLabel(s)
	}
	return out
}

// cacheCharts draws each dataset's ideal cache curve (hit rate by tokens
// against capacity, at quarter-octave capacities) and, as a flat line,
// the prefix hit rate its requests record (simulated or observed).
func cacheCharts(sec *sectionView, sets []reportSet) error {
	var ss []series
	maxCap := int64(1)
	for _, s := range sets {
		if s.extras != nil && s.extras.CacheCurve != nil {
			maxCap = max(maxCap, s.extras.CacheCurve.Distinct)
		}
	}
	for _, s := range sets {
		if s.extras == nil {
			continue
		}
		if c := s.extras.CacheCurve; c != nil {
			var pts []point
			for _, k := range quarterOctaves(c.Distinct) {
				_, ht := c.HitRate(k)
				pts = append(pts, point{float64(k), 100 * ht})
			}
			ss = append(ss, series{Name: fmt.Sprintf("%s: ideal LRU (blocks of %d tokens)", s.name, c.BlockSize), Data: pts})
		} else if s.extras.CacheCurveErr != "" {
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: no cache curve: %s.", s.name, s.extras.CacheCurveErr))
		}
		if s.extras.HitKnown && s.extras.HitInputTokens > 0 {
			r := 100 * float64(s.extras.HitTokens) / float64(s.extras.HitInputTokens)
			ss = append(ss, series{Name: s.name + ": recorded hit rate", Data: []point{{1, r}, {float64(maxCap), r}}, Dashed: true})
		}
	}
	if len(ss) == 0 {
		return nil
	}
	v, err := chart{ID: "why-cache", Title: "Prefix cache: ideal LRU curve and the recorded hit rate",
		X: axis{Name: "cache capacity (blocks)", Type: "log"}, Y: axis{Name: "prompt tokens hit (%)", Min: 0, Max: 100}, Series: ss}.view()
	if err != nil {
		return err
	}
	sec.Charts = append(sec.Charts, v)
	return nil
}

// quarterOctaves are capacities 1, 2^(1/4), … rounded and distinct, up to
// and including max.
func quarterOctaves(top int64) []int64 {
	var out []int64
	for k := 0; ; k++ {
		c := int64(math.Round(math.Pow(2, float64(k)/4)))
		if c >= top {
			break
		}
		if len(out) == 0 || c != out[len(out)-1] {
			out = append(out, c)
		}
	}
	return append(out, max(top, 1))
}
