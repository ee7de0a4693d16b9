package main

import (
	"strings"
	"testing"
)

// A note every run has is said once as it is; one some runs have, once,
// after the runs it is for; a run's note said twice, once.
func TestRunNotes(t *testing.T) {
	var n runNotes
	n.add("a", []string{"defaults", "dp 4"})
	n.add("b", []string{"defaults", "dp 4", "dp 4"})
	n.add("c", []string{"defaults", "regenerated", "run c: records model x"})
	for _, r := range []string{"d", "e", "f", "g"} {
		n.add(r, []string{"defaults", "dp 4", "run " + r + ": records model x"})
	}
	var b strings.Builder
	n.print(&b)
	want := "defaults\n" +
		"runs a, b, d, e and 2 more (6 of 7): dp 4\n" +
		"run c: regenerated\n" +
		"runs c, d, e, f and 1 more (5 of 7): records model x\n"
	if b.String() != want {
		t.Errorf("notes:\n%s\nwant:\n%s", b.String(), want)
	}
	var one runNotes
	one.add("only", []string{"x"})
	b.Reset()
	one.print(&b)
	if b.String() != "x\n" {
		t.Errorf("one run's note: %q, want it as it is", b.String())
	}
}

// Calibrate's runs say their notes as each is resolved: the first run's
// as they are, a later run's new ones after its name, none twice.
func TestRunNotesSayOnce(t *testing.T) {
	var n runNotes
	var b strings.Builder
	n.sayOnce(&b, "a", "run a", []string{"defaults", "dp 4"})
	n.sayOnce(&b, "b", "run b", []string{"defaults", "dp 4", "dp 4"})
	n.sayOnce(&b, "c", "set run c (C)", []string{"defaults", "regenerated", "regenerated", "run c: records model x"})
	n.sayOnce(&b, "d", "run d", []string{"run d: records model x"})
	want := "defaults\ndp 4\nset run c (C): regenerated\nset run c (C): records model x\n"
	if b.String() != want {
		t.Errorf("notes:\n%s\nwant:\n%s", b.String(), want)
	}
}
