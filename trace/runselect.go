package trace

import (
	"errors"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A RunSelector picks runs of a dataset, as the commands' --run flag
// does. Its text is one or more terms joined by "&", all of which a run
// must meet:
//
//	3          the third run (1-based, the N of a "file#N" name)
//	2-4        the second to the fourth run
//	NAME       the run called NAME; a glob (path.Match) when it has * ? or [
//	KEY=VALUE  a field of the run: VALUE is a number for numeric fields
//	           (rate=8 matches 8 and 8.0, rate=inf the infinite rate) and a
//	           glob for the others
//
// The fields are those RunFields lists; extra.K reads Run.Extra["K"].
// Several selectors (the flag given twice) pick the union of their runs.
type RunSelector struct {
	text  string
	terms []runTerm
}

// A runTerm is one condition of a selector.
type runTerm struct {
	lo, hi int    // an index range (1-based, inclusive) when hi > 0
	key    string // a field; "" with glob means the run name
	glob   string
	num    float64 // the numeric value of a numeric field
	isNum  bool
}

// String returns the selector as it was written.
func (s RunSelector) String() string { return s.text }

// numericRunFields are the fields whose values compare as numbers.
var numericRunFields = map[string]bool{
	"tp": true, "pp": true, "dp": true, "rate": true, "concurrency": true, "num_prompts": true,
	"input_len": true, "output_len": true, "range_ratio": true, "burstiness": true, "block_size": true,
}

// RunFields are the field names a RunSelector term may use, besides
// extra.KEY.
var RunFields = []string{"name", "file", "source", "model", "engine", "backend", "hardware", "tp", "pp", "dp",
	"block_size", "dataset", "input_len", "output_len", "range_ratio", "rate", "burstiness", "concurrency", "num_prompts"}

// ParseRunSelector parses the text of a --run flag.
func ParseRunSelector(text string) (RunSelector, error) {
	sel := RunSelector{text: text}
	for part := range strings.SplitSeq(text, "&") {
		part = strings.TrimSpace(part)
		if part == "" {
			return sel, fmt.Errorf("run selector %q: empty term", text)
		}
		t, err := parseRunTerm(part)
		if err != nil {
			return sel, fmt.Errorf("run selector %q: %v", text, err)
		}
		sel.terms = append(sel.terms, t)
	}
	return sel, nil
}

func parseRunTerm(s string) (runTerm, error) {
	if lo, hi, ok := parseIndexRange(s); ok {
		if lo < 1 || hi < lo {
			return runTerm{}, fmt.Errorf("%q: not a run index range (runs count from 1)", s)
		}
		return runTerm{lo: lo, hi: hi}, nil
	}
	key, val, ok := strings.Cut(s, "=")
	if !ok {
		return runTerm{glob: s}, checkGlob(s)
	}
	key = strings.TrimSpace(key)
	val = strings.TrimSpace(val)
	if !slices.Contains(RunFields, key) && !strings.HasPrefix(key, "extra.") {
		return runTerm{}, fmt.Errorf("%q: unknown field %q (known: %s, extra.KEY)", s, key, strings.Join(RunFields, ", "))
	}
	if numericRunFields[key] {
		v, err := parseRunNumber(val)
		if err != nil {
			return runTerm{}, fmt.Errorf("%s: %q is not a number", key, val)
		}
		return runTerm{key: key, num: v, isNum: true}, nil
	}
	return runTerm{key: key, glob: val}, checkGlob(val)
}

// parseIndexRange reads "N" or "N-M".
func parseIndexRange(s string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(s, "-")
	lo, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, err = strconv.Atoi(b)
	if err != nil {
		return 0, 0, false
	}
	return lo, hi, true
}

func parseRunNumber(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "inf", "+inf", "infinity":
		return math.Inf(1), nil
	}
	return strconv.ParseFloat(s, 64)
}

func checkGlob(g string) error {
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Errorf("%q: bad pattern", g)
	}
	return nil
}

// Match reports whether run, the index-th run of its dataset (1-based),
// meets every term of s.
func (s RunSelector) Match(index int, run Run) bool {
	for _, t := range s.terms {
		if !t.match(index, run) {
			return false
		}
	}
	return true
}

func (t runTerm) match(index int, run Run) bool {
	switch {
	case t.hi > 0:
		return index >= t.lo && index <= t.hi
	case t.isNum:
		v, ok := runNumber(run, t.key)
		return ok && v == t.num
	case t.key == "":
		ok, _ := path.Match(t.glob, run.Name)
		return ok
	}
	v, ok := RunField(run, t.key)
	if !ok {
		return false
	}
	m, _ := path.Match(t.glob, v)
	return m
}

// runNumber returns a numeric field of run; absent fields (zero, or no
// workload) do not match.
func runNumber(run Run, key string) (float64, bool) {
	s, ok := RunField(run, key)
	if !ok {
		return 0, false
	}
	v, err := parseRunNumber(s)
	return v, err == nil
}

// RunField returns the value of the field key of run as text, and false
// when the run does not record it. The file is its base name.
func RunField(run Run, key string) (string, bool) {
	str := func(s string) (string, bool) { return s, s != "" }
	num := func(v int64) (string, bool) { return strconv.FormatInt(v, 10), v != 0 }
	flt := func(v float64) (string, bool) {
		if math.IsInf(v, 1) {
			return "inf", true
		}
		return strconv.FormatFloat(v, 'g', -1, 64), v != 0
	}
	if k, ok := strings.CutPrefix(key, "extra."); ok {
		v, ok := run.Extra[k]
		return v, ok
	}
	switch key {
	case "name":
		return str(run.Name)
	case "file":
		if run.File == "" {
			return "", false
		}
		return filepath.Base(run.File), true
	case "source":
		return str(run.Source)
	case "model":
		return str(run.Model)
	case "engine":
		return str(run.Engine)
	case "backend":
		return str(run.Backend)
	case "hardware":
		return str(run.Hardware)
	case "tp":
		return num(int64(run.TP))
	case "pp":
		return num(int64(run.PP))
	case "dp":
		return num(int64(run.DP))
	case "block_size":
		return num(run.BlockSize)
	}
	w := run.Workload
	if w == nil {
		return "", false
	}
	switch key {
	case "dataset":
		return str(w.Dataset)
	case "input_len":
		return num(int64(w.InputLen))
	case "output_len":
		return num(int64(w.OutputLen))
	case "range_ratio":
		return flt(w.RangeRatio)
	case "rate":
		return flt(float64(w.RequestRate))
	case "burstiness":
		return flt(w.Burstiness)
	case "concurrency":
		return num(int64(w.Concurrency))
	case "num_prompts":
		return num(int64(w.NumPrompts))
	}
	return "", false
}

// ParseRunSelectors parses several --run values; none selects every run.
func ParseRunSelectors(texts []string) ([]RunSelector, error) {
	var sels []RunSelector
	var errs []error
	for _, t := range texts {
		s, err := ParseRunSelector(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sels = append(sels, s)
	}
	return sels, errors.Join(errs...)
}

// SelectRuns returns the indexes (0-based) of the runs any of sels picks,
// in dataset order; with no selector, every run. A selector that picks no
// run is an error that lists the runs by their labels (RunLabels), so a
// typo is never an empty result.
func SelectRuns(runs []Run, sels []RunSelector) ([]int, error) {
	var picked []int
	if len(sels) == 0 {
		for i := range runs {
			picked = append(picked, i)
		}
		return picked, nil
	}
	var errs []error
	hit := make([]bool, len(runs))
	for _, s := range sels {
		n := 0
		for i, r := range runs {
			if s.Match(i+1, r) {
				hit[i] = true
				n++
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("--run %s: no run matches (runs: %s)", s, runList(RunLabels(runs))))
		}
	}
	for i, h := range hit {
		if h {
			picked = append(picked, i)
		}
	}
	return picked, errors.Join(errs...)
}

// runListMost is how many runs SelectRuns' error lists before it counts
// the rest: a sweep of a thousand runs made an error line of a thousand.
const runListMost = 12

// runList joins labels, the first runListMost of them when there are
// more, and says how many are left out.
func runList(labels []string) string {
	if len(labels) <= runListMost {
		return strings.Join(labels, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(labels[:runListMost], "; "), len(labels)-runListMost)
}

// labelFields are the fields RunLabels names a run by, in this order.
var labelFields = []string{"file", "model", "hardware", "tp", "pp", "engine", "dataset", "input_len", "output_len",
	"rate", "concurrency", "num_prompts"}

// RunLabels names each run by what distinguishes it from the others of
// runs: its index and the fields whose values differ among them, as
// "#3 rate=4" (a sweep) or "#2 file=b.json rate=inf". One run is labelled
// by its name.
func RunLabels(runs []Run) []string {
	if len(runs) == 1 {
		return []string{runs[0].Name}
	}
	return labelsBy(runs, labelKeys(runs))
}

// labelsBy labels runs by their index and the fields keys (RunLabels).
func labelsBy(runs []Run, keys []string) []string {
	labels := make([]string, len(runs))
	for i, r := range runs {
		var b strings.Builder
		fmt.Fprintf(&b, "#%d", i+1)
		for _, k := range keys {
			if v, ok := RunField(r, k); ok {
				fmt.Fprintf(&b, " %s=%s", k, v)
			}
		}
		if len(keys) == 0 {
			b.WriteString(" " + r.Name)
		}
		labels[i] = b.String()
	}
	return labels
}

// labelKeys returns the fields of labelFields whose values differ among
// runs.
func labelKeys(runs []Run) []string {
	var keys []string
	for _, k := range labelFields {
		first, _ := RunField(runs[0], k)
		for _, r := range runs[1:] {
			if v, _ := RunField(r, k); v != first {
				keys = append(keys, k)
				break
			}
		}
	}
	return keys
}

// RunFieldLabels is RunLabels where a field tells the runs apart (a
// sweep's rate, another file), for showing beside the runs' names; nil
// where none does or there is one run, when the labels would only repeat
// the names.
func RunFieldLabels(runs []Run) []string {
	if len(runs) < 2 {
		return nil
	}
	keys := labelKeys(runs)
	if len(keys) == 0 {
		return nil
	}
	return labelsBy(runs, keys)
}
