package progress

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// fakeClock advances by step at each reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

// TestTimingLineOffTerminal: off a terminal a task prints one line when
// it finishes, with human numbers and no escape code.
func TestTimingLineOffTerminal(t *testing.T) {
	var b bytes.Buffer
	m := NewFor(&b, false)
	m.now = fakeClock(1620 * time.Millisecond)
	task := m.Start("replay", "requests", 12031)
	c := task.Counter()
	for range 12031 {
		c.Inc()
	}
	if b.Len() != 0 {
		t.Fatalf("printed before Finish: %q", b.String())
	}
	c.Flush()
	task.Finish()
	task.Finish() // a second Finish prints nothing
	if got, want := b.String(), "replay: 12,031 requests in 1.62 s\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDetailAndAbort(t *testing.T) {
	var b bytes.Buffer
	m := NewFor(&b, false)
	m.now = fakeClock(2 * time.Second)
	task := m.Start("stats run.parquet", "requests", 0)
	task.Add(3000)
	task.Add(3000)
	task.Detail("2 passes")
	task.Finish()
	if got, want := b.String(), "stats run.parquet: 6,000 requests in 2.00 s (2 passes)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
	failed := m.Start("ingest", "requests", 0)
	failed.Add(5)
	failed.Abort()
	failed.Finish()
	if b.Len() != 0 {
		t.Errorf("an aborted task printed %q", b.String())
	}
}

// TestNilMeterIsSilent: commands pass a nil Meter where nothing may be
// shown, and its tasks still count.
func TestNilMeterIsSilent(t *testing.T) {
	var m *Meter
	task := m.Start("replay", "requests", 10)
	task.Add(4)
	task.Finish()
	if task.Done() != 4 || m.Terminal() {
		t.Errorf("done %d, terminal %v", task.Done(), m.Terminal())
	}
}

// TestCounterBatches: a Counter calls its Task once per Every units, so
// the hot loop pays an increment, not a channel send or a lock.
func TestCounterBatches(t *testing.T) {
	task := NewFor(io.Discard, false).Start("x", "units", 0)
	c := task.Counter()
	for range Every - 1 {
		c.Inc()
	}
	if task.Done() != 0 {
		t.Fatalf("task saw %d units before a whole batch", task.Done())
	}
	c.Inc()
	if task.Done() != Every {
		t.Fatalf("task saw %d units after a batch, want %d", task.Done(), Every)
	}
	c.Inc()
	c.Flush()
	if task.Done() != Every+1 {
		t.Fatalf("after Flush %d", task.Done())
	}
}

func TestIsTerminalOfAPipeAndABuffer(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) || IsTerminal(&bytes.Buffer{}) {
		t.Error("a pipe or a buffer taken for a terminal")
	}
}

var escape = regexp.MustCompile("\x1b\\[")

// TestBarOnAPseudoTerminal draws a real bar on a pty: New detects the
// terminal, and the bar is redrawn with cursor escapes until its last
// frame shows the name, the count done and a full bar (no timing line).
func TestBarOnAPseudoTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err) // containers without /dev/ptmx
	}
	defer ptmx.Close()
	// A new pty is 0 columns wide, in which mpb draws nothing.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	if !IsTerminal(tty) {
		t.Fatal("a pty's tty not taken for a terminal")
	}
	out := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, ptmx) // ends when tty closes (EIO)
		out <- b.String()
	}()
	m := New(tty)
	if !m.Terminal() {
		t.Fatal("Meter on a tty draws no bar")
	}
	task := m.Start("replay", "requests", 20000)
	c := task.Counter()
	for i := range 20000 {
		c.Inc()
		if i%5000 == 0 {
			time.Sleep(200 * time.Millisecond) // let a frame or two render
		}
	}
	c.Flush()
	task.Finish()
	tty.Close()
	got := <-out
	if !escape.MatchString(got) {
		t.Errorf("no cursor escape in the bar's output: %q", got)
	}
	frames := strings.Split(strings.TrimRight(got, "\r\n"), "\x1b[J")
	last := frames[len(frames)-1]
	if !regexp.MustCompile(`^replay: 20,000 requests \[=+\]`).MatchString(last) {
		t.Errorf("last frame %q is not a full bar of 20,000 requests (all: %q)", last, got)
	}
	if len(frames) < 2 {
		t.Errorf("one frame only, no progress drawn: %q", got)
	}
	if strings.Contains(got, " in ") {
		t.Errorf("a terminal got the timing line: %q", got)
	}
}
