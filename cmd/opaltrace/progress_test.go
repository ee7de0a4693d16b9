//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"
)

var timingLine = regexp.MustCompile(`(?m)^replay: 300 requests in \d+\.\d\d s \([\d,]+ requests/s\)$`)

// TestProgressOffTerminal: with stderr not a terminal (a buffer, as
// under CI), a replay prints one timing line (its only time) and no
// escape code; a small input is read without a line of its own, a large
// one with one.
func TestProgressOffTerminal(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	_, stderr, err := opaltrace(t, "replay", "--workers", "2", "-o", filepath.Join(dir, "sim.parquet"), in)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	if !timingLine.MatchString(stderr) {
		t.Errorf("no timing line 'replay: 300 requests in N.NN s (N requests/s)' in\n%s", stderr)
	}
	if n := len(regexp.MustCompile(` in \d+\.\d\d s\b`).FindAllString(stderr, -1)); n != 1 {
		t.Errorf("the replay's time printed %d times, want once:\n%s", n, stderr)
	}
	if strings.Contains(stderr, "\x1b") {
		t.Errorf("escape code on a non-terminal stderr: %q", stderr)
	}
	if strings.Contains(stderr, "read in: ") {
		t.Errorf("a small input got a reading line:\n%s", stderr)
	}
	defer func(n int64) { largeInput = n }(largeInput)
	largeInput = 1 // every input is large
	_, stderr, err = opaltrace(t, "ingest", "-o", filepath.Join(dir, "in.parquet"), in)
	if err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	if !regexp.MustCompile(`(?m)^ingest: 300 requests in \d+\.\d\d s$`).MatchString(stderr) {
		t.Errorf("no ingest timing line in\n%s", stderr)
	}
	_, stderr, err = opaltrace(t, "stats", "--low-memory", filepath.Join(dir, "sim.parquet"))
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, stderr)
	}
	t.Logf("stats --low-memory's stderr:\n%s", stderr)
	if !regexp.MustCompile(`(?m)^stats sim.parquet: [\d,]+ requests in \d+\.\d\d s \(\d passes\)$`).MatchString(stderr) {
		t.Errorf("no timing line of the summary's passes in\n%s", stderr)
	}
	if strings.Contains(stderr, "\x1b") {
		t.Errorf("escape code on a non-terminal stderr: %q", stderr)
	}
}

// TestProgressBarOnATerminal runs the command as a process whose stderr
// is a pseudo-terminal: the replay draws a bar (the request count and a
// full bar) and prints no timing line; stdout, a pipe, gets the
// summary without any escape.
func TestProgressBarOnATerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := sampleSlice(t, dir, 300)
	cmd := exec.Command(os.Args[0], "replay", "--workers", "2", "-o", filepath.Join(dir, "sim.parquet"), in)
	cmd.Env = append(os.Environ(), "OPALTRACE_RUN_MAIN=1")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, ptmx) // until the last tty is closed (EIO)
		got <- b.String()
	}()
	err = cmd.Run()
	tty.Close()
	stderr := <-got
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	// A replay this small may end before the first refresh: its bar is
	// then drawn once, complete, without a cursor move to redraw it.
	if !regexp.MustCompile(`replay: 300 requests \[=+\]`).MatchString(stderr) {
		t.Errorf("no bar of 300 requests drawn on the terminal:\n%q", stderr)
	}
	if timingLine.MatchString(strings.ReplaceAll(stderr, "\r", "")) {
		t.Errorf("a terminal got the timing line:\n%q", stderr)
	}
	if strings.Contains(stdout.String(), "\x1b") || !strings.Contains(stdout.String(), "Serving Benchmark Result") {
		t.Errorf("stdout (a pipe): %q", stdout.String())
	}
}
