package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/trace"
)

// runNotes collects what each run's deployment notes say (deploy.Setup's
// Notes), so that a note the runs share is printed once: a sweep of 30
// runs on one cluster file printed its two notes 30 times over, the
// lines alike and none naming its run.
type runNotes struct {
	order []string            // the notes, as first said
	runs  map[string][]string // per note: the runs it was said for
	all   []string            // every run, in order
}

// add records the notes of run.
func (n *runNotes) add(run string, notes []string) {
	if n.runs == nil {
		n.runs = map[string][]string{}
	}
	n.all = append(n.all, run)
	for _, s := range notes {
		// A note that names its run (deploy's "run NAME: …") is said
		// once with the others' like it.
		s = strings.TrimPrefix(s, "run "+run+": ")
		rs := n.runs[s]
		if len(rs) > 0 && rs[len(rs)-1] == run {
			continue // said twice for one run
		}
		if rs == nil {
			n.order = append(n.order, s)
		}
		n.runs[s] = append(rs, run)
	}
}

// print writes each note once: as it is when every run has it, else after
// the runs that have it.
func (n *runNotes) print(w io.Writer) {
	for _, s := range n.order {
		rs := n.runs[s]
		if len(rs) == len(n.all) {
			fmt.Fprintln(w, s)
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", runList(rs, len(n.all)), s)
	}
}

// runListMost is how many runs runList names before it counts the rest.
const runListMost = 4

// runList names the runs rs of total: "run A", or "runs A, B (2 of 5)",
// the first runListMost named and the others counted.
func runList(rs []string, total int) string {
	if len(rs) == 1 {
		return "run " + rs[0]
	}
	return fmt.Sprintf("runs %s (%d of %d)", human.FirstOf(rs, runListMost), len(rs), total)
}

// sayOnce writes the notes of run (ref: how to name it) as they come, for
// commands that resolve runs one at a time (calibrate's): a note an
// earlier run said is not said again, and after the first run's notes a
// run's new note is said after its name.
func (n *runNotes) sayOnce(w io.Writer, run, ref string, notes []string) {
	first := len(n.all) == 0
	n.add(ref, nil)
	for _, s := range notes {
		s = strings.TrimPrefix(s, "run "+run+": ")
		if _, ok := n.runs[s]; ok {
			continue
		}
		n.runs[s] = []string{ref}
		if first {
			fmt.Fprintln(w, s)
		} else {
			fmt.Fprintf(w, "%s: %s\n", ref, s)
		}
	}
}

// oneDeployment resolves each of runs (refs: how errors name each) as
// replay resolves a run — its record under the cluster file's and the
// flags' keys — says their notes once to w, and returns the deployment
// they share (the cluster's alone when there is no run); runs of two
// deployments are an error naming both, fix saying what to do. For the
// commands that take one deployment from runs of many: calibrate
// --server-side, replay --sample.
func oneDeployment(cl deploy.Cluster, over deploy.Overrides, runs []trace.Run, refs []string, w io.Writer, fix string) (*deploy.Setup, error) {
	if len(runs) == 0 {
		return deploy.Resolve(cl, trace.Run{}, over)
	}
	var first *deploy.Setup
	var notes runNotes
	for i, run := range runs {
		s, err := deploy.Resolve(cl, run, over)
		if err != nil {
			return nil, err
		}
		notes.add(run.Name, s.Notes)
		switch {
		case first == nil:
			first = s
		case s.Header() != first.Header():
			return nil, fmt.Errorf("%s ran on %s, %s on %s: %s", refs[0], first.Header(), refs[i], s.Header(), fix)
		}
	}
	notes.print(w)
	return first, nil
}
