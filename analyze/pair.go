package analyze

import (
	"fmt"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// A RunPair pairs a run of dataset A with a run of dataset B, as indexes
// into the run lists given to PairRuns.
type RunPair struct{ A, B int }

// Pairing ways.
const (
	PairedByReplay = "replay" // one side's runs replay the other's (Run.Extra["replay_of"])
	PairedByOrder  = "order"  // the runs the selectors pick on each side, in order
)

// A Pairing says which runs of two datasets are compared with which.
type Pairing struct {
	Pairs []RunPair
	By    string // PairedByReplay or PairedByOrder
	// Unpaired lists the selected runs of the replayed side that no run
	// of the other side replays, by label (trace.RunLabels), e.g. the
	// ShareGPT runs of a sweep that replay could not regenerate.
	Unpaired []string
}

// PairRuns pairs the runs of two datasets for comparison, run by run:
// a sweep is never pooled into one distribution.
//
//  1. When runs of one side replay runs of the other (opaltrace replay
//     records the input run's name in Extra["replay_of"]), each run the
//     selectors pick on the replayed side is paired with the runs that
//     replay it; selected runs that no run replays are listed in
//     Unpaired. The selectors apply to the replayed side only, so an
//     index means the same run whatever the replay left out.
//  2. Otherwise the runs the selectors pick on each side (all, without
//     selectors) are paired in order, and the two sides must have as many.
//
// A selector that picks no run, or no pair at all, is an error that lists
// the runs by their labels.
func PairRuns(a, b []trace.Run, sels []trace.RunSelector) (*Pairing, error) {
	if replaysOf(b, a) > 0 {
		return pairByReplay(a, b, sels, false)
	}
	if replaysOf(a, b) > 0 {
		return pairByReplay(b, a, sels, true)
	}
	ia, err := trace.SelectRuns(a, sels)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	ib, err := trace.SelectRuns(b, sels)
	if err != nil {
		return nil, fmt.Errorf("side B: %w", err)
	}
	if len(ia) != len(ib) || len(ia) == 0 {
		return nil, fmt.Errorf("runs are paired in order, and A has %d (%s) while B has %d (%s): pick as many on each side with --run",
			len(ia), labelsOf(a, ia), len(ib), labelsOf(b, ib))
	}
	p := &Pairing{By: PairedByOrder}
	for k := range ia {
		p.Pairs = append(p.Pairs, RunPair{A: ia[k], B: ib[k]})
	}
	return p, nil
}

// replaysOf counts the runs of rep that replay a run of of.
func replaysOf(rep, of []trace.Run) int {
	names := map[string]bool{}
	for _, r := range of {
		names[r.Name] = true
	}
	n := 0
	for _, r := range rep {
		if o, ok := r.Extra["replay_of"]; ok && names[o] {
			n++
		}
	}
	return n
}

// pairByReplay pairs the selected runs of ref with the runs of rep that
// replay them; swapped says ref is side B.
func pairByReplay(ref, rep []trace.Run, sels []trace.RunSelector, swapped bool) (*Pairing, error) {
	idx, err := trace.SelectRuns(ref, sels)
	if err != nil {
		return nil, err
	}
	labels := trace.RunLabels(ref)
	p := &Pairing{By: PairedByReplay}
	for _, i := range idx {
		found := false
		for j, r := range rep {
			if o, ok := r.Extra["replay_of"]; ok && o == ref[i].Name {
				pr := RunPair{A: i, B: j}
				if swapped {
					pr = RunPair{A: j, B: i}
				}
				p.Pairs = append(p.Pairs, pr)
				found = true
			}
		}
		if !found {
			p.Unpaired = append(p.Unpaired, labels[i])
		}
	}
	if len(p.Pairs) == 0 {
		return nil, fmt.Errorf("no selected run has a replay on the other side (selected: %s)", labelsOf(ref, idx))
	}
	return p, nil
}

// labelsOf lists the labels of runs[idx...].
func labelsOf(runs []trace.Run, idx []int) string {
	if len(idx) == 0 {
		return "none"
	}
	all := trace.RunLabels(runs)
	var out []string
	for _, i := range idx {
		out = append(out, all[i])
	}
	return strings.Join(out, "; ")
}
