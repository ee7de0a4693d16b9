package progress

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/internal/termsafe"
)

// A Meter starts tasks on one stream: bars on a terminal, timing lines
// otherwise.
type Meter struct {
	w        io.Writer
	terminal bool
	now      func() time.Time
}

// New returns a Meter on w, which draws bars only when w is a terminal
// (an *os.File whose descriptor is a tty).
func New(w io.Writer) *Meter {
	return NewFor(w, IsTerminal(w))
}

// NewFor returns a Meter on w that draws bars when terminal is true.
func NewFor(w io.Writer, terminal bool) *Meter {
	return &Meter{w: w, terminal: terminal, now: time.Now}
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Terminal reports whether the Meter draws bars.
func (m *Meter) Terminal() bool { return m != nil && m.terminal }

// A Task is one piece of long work, counted in units ("requests",
// "replays"). Set and Add may be called from any goroutine; call them
// once per batch of units, not once per unit (see Counter).
type Task struct {
	m      *Meter
	name   string
	unit   string
	total  int64
	done   atomic.Int64
	start  time.Time
	p      *mpb.Progress
	bar    *mpb.Bar
	ended  atomic.Bool
	detail string
}

// Start begins a task called name (printed first: "replay", "ingest
// run.jsonl") of total units (0 when not known in advance). A nil Meter
// gives a Task that shows nothing.
func (m *Meter) Start(name, unit string, total int64) *Task {
	t := &Task{m: m, name: termsafe.String(name), unit: unit, total: total}
	if m == nil {
		return t
	}
	t.start = m.now()
	if m.terminal {
		t.p = mpb.New(mpb.WithOutput(m.w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
		count := decor.Any(func(s decor.Statistics) string {
			if s.Total > 0 && !s.Completed && t.total > 0 {
				return human.Count(s.Current) + "/" + human.Count(s.Total) + " " + unit
			}
			return human.Count(s.Current) + " " + unit
		})
		t.bar = t.p.New(total, mpb.BarStyle(),
			mpb.PrependDecorators(decor.Name(t.name+": "), count),
			mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO, decor.WC{W: 6}),
				decor.OnComplete(decor.Percentage(decor.WC{W: 5}), "")))
		if total <= 0 {
			t.bar.SetTotal(0, false)
		}
	}
	return t
}

// Set records that done units are done in all.
func (t *Task) Set(done int64) {
	t.done.Store(done)
	if t.bar != nil {
		if t.total <= 0 {
			// An unknown total grows with the work, so the bar
			// shows activity rather than a fixed fraction.
			t.bar.SetTotal(done+1, false)
		}
		t.bar.SetCurrent(done)
	}
}

// Add records n more units done.
func (t *Task) Add(n int64) { t.Set(t.done.Add(n)) }

// Done is the number of units done so far.
func (t *Task) Done() int64 { return t.done.Load() }

// Detail sets words the final timing line ends with ("3 passes").
func (t *Task) Detail(s string) { t.detail = s }

// Finish ends the task: the bar completes (on a terminal), or the timing
// line is printed: "replay: 12,031 requests in 1.62 s". Finishing twice
// does nothing.
func (t *Task) Finish() {
	if t.m == nil || t.ended.Swap(true) {
		return
	}
	done := t.done.Load()
	if t.bar != nil {
		t.bar.SetTotal(done, true)
		t.p.Wait()
		return
	}
	line := fmt.Sprintf("%s: %s %s in %s", t.name, human.Count(done), t.unit, human.Seconds(t.m.now().Sub(t.start).Seconds()))
	if t.detail != "" {
		line += " (" + t.detail + ")"
	}
	fmt.Fprintln(t.m.w, line)
}

// Abort ends the task without its timing line (the work failed and its
// error says so): a bar is dropped from the terminal.
func (t *Task) Abort() {
	if t.m == nil || t.ended.Swap(true) {
		return
	}
	if t.bar != nil {
		t.bar.Abort(true)
		t.p.Wait()
	}
}

// A Counter feeds a Task from one goroutine's hot loop: Inc costs an
// increment and a comparison, and calls the Task once every Every units.
type Counter struct {
	t    *Task
	n    int64
	next int64
}

// Every is how many units a Counter counts between two calls of its Task.
const Every = 4096

// Counter returns a Counter on t that counts on from the units t has
// done; only one Counter feeds a Task at a time.
func (t *Task) Counter() *Counter {
	n := t.Done()
	return &Counter{t: t, n: n, next: n + Every}
}

// Inc counts one unit.
func (c *Counter) Inc() {
	c.n++
	if c.n >= c.next {
		c.t.Set(c.n)
		c.next = c.n + Every
	}
}

// Flush hands the units counted since the last call to the Task.
func (c *Counter) Flush() { c.t.Set(c.n) }

// Out is where lines printed while the task runs go (the bad records of
// an ingest): on a terminal, above the bar, which would otherwise draw
// over them; otherwise, and once the task has ended, the Meter's stream.
// A nil Meter's tasks show nothing and return fallback.
func (t *Task) Out(fallback io.Writer) io.Writer {
	if t.m == nil {
		return fallback
	}
	return taskWriter{t}
}

type taskWriter struct{ t *Task }

func (w taskWriter) Write(b []byte) (int, error) {
	if w.t.bar != nil && !w.t.ended.Load() {
		if n, err := w.t.p.Write(b); err == nil {
			return n, nil
		}
	}
	return w.t.m.w.Write(b)
}
