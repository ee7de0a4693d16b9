package replay

import (
	"container/heap"
	"runtime"
)

// A simEnv runs processes written as sequential code, the way SimPy runs
// Opal's generators, so that the Opal-compatible replay (opalcompat.go)
// follows Opal's worker loop statement by statement, waits included.
//
// Each process is a goroutine, but only one runs at a time: the loop
// hands control to a process and waits until it blocks again (on a
// sleep, a park or an IO) or ends, so the simulation is sequential and
// deterministic. Time is float64 seconds advanced as SimPy advances it
// (now + delay), so that Opal's figures come out to the last bit.
// Events at the same time run in the order they were scheduled.
type simEnv struct {
	now   float64
	seq   uint64
	q     simQueue
	back  chan struct{} // a process hands control back to the loop
	procs []*simProc
}

// A simProc is one process.
type simProc struct {
	env    *simEnv
	resume chan bool // false: the simulation is over, exit
	parked bool
	done   bool
}

type simEvent struct {
	at  float64
	seq uint64
	p   *simProc // resume p, or
	fn  func()   // call fn (on the loop)
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newSimEnv() *simEnv { return &simEnv{back: make(chan struct{})} }

func (e *simEnv) schedule(at float64, p *simProc, fn func()) {
	e.seq++
	heap.Push(&e.q, simEvent{at: at, seq: e.seq, p: p, fn: fn})
}

// at calls fn on the loop at time t.
func (e *simEnv) at(t float64, fn func()) { e.schedule(t, nil, fn) }

// spawn starts a process running body now (after the events already
// scheduled for now).
func (e *simEnv) spawn(body func(p *simProc)) *simProc {
	p := &simProc{env: e, resume: make(chan bool)}
	e.procs = append(e.procs, p)
	go func() {
		if !<-p.resume {
			return
		}
		body(p)
		p.done = true
		e.back <- struct{}{}
	}()
	e.schedule(e.now, p, nil)
	return p
}

// run runs events until none is left, then ends every process still
// waiting (parked forever, as Opal's idle loops are).
func (e *simEnv) run() {
	for e.q.Len() > 0 {
		ev := heap.Pop(&e.q).(simEvent)
		e.now = ev.at
		if ev.p == nil {
			ev.fn()
			continue
		}
		ev.p.resume <- true
		<-e.back
	}
	for _, p := range e.procs {
		if !p.done {
			close(p.resume)
		}
	}
	e.procs = nil
}

// block hands control back to the loop until p is resumed.
func (p *simProc) block() {
	p.env.back <- struct{}{}
	if !<-p.resume {
		runtime.Goexit()
	}
}

// sleep is SimPy's timeout(d).
func (p *simProc) sleep(d float64) {
	p.env.schedule(p.env.now+d, p, nil)
	p.block()
}

// park waits until wake.
func (p *simProc) park() {
	p.parked = true
	p.block()
}

// wake resumes a parked process now; it reports whether p was parked.
func (p *simProc) wake() bool {
	if !p.parked {
		return false
	}
	p.parked = false
	p.env.schedule(p.env.now, p, nil)
	return true
}

// An opalDevice is Opal's AbstractDevice (opal/infra/io_model.py): an IO
// first waits the device's latency; one no larger than bandwidth ×
// latency is then done, a larger one shares the bandwidth equally with
// the other large IOs in flight (processor sharing, recomputed whenever
// one starts or ends, sleeping at least 10 µs). Its concurrency limit
// (10³ to 10⁶ slots in Opal's configs) never binds here and is not
// modelled.
type opalDevice struct {
	env       *simEnv
	bw        float64 // bytes/s
	latency   float64 // s
	remaining float64 // capacity left, bytes (Opal reserves at put, never frees)
	headStart bool    // OpalQuirks.IOHeadStart

	active  []*opalIO
	last    float64 // when remaining bytes were last brought up to date
	rate    float64 // bytes/s per active IO since last
	version uint64  // of the pending completion check
}

type opalIO struct {
	p    *simProc
	left float64
}

// opalMinSleep is io_model.py's MIN_SLEEP_TIME.
const opalMinSleep = 100e-7

// io performs one IO of size bytes for p, blocking it until done.
func (d *opalDevice) io(p *simProc, size float64) {
	if d.latency > 0 {
		p.sleep(d.latency)
		if size <= d.bw*d.latency {
			return
		}
	}
	// Opal's IO joins the active set before its bandwidth manager
	// brings the set up to now, at the rate it set for the IOs that were
	// active: the new IO is credited with the bytes each of them moved
	// since the manager last woke (IOHeadStart). It may even be done at
	// once.
	io := &opalIO{p: p, left: size}
	if d.headStart {
		d.active = append(d.active, io)
		d.settle()
	} else {
		d.settle()
		d.active = append(d.active, io)
	}
	d.reschedule()
	if io.left <= 0 {
		return
	}
	p.park()
}

// settle brings the active IOs up to now and ends those that are done,
// as Opal's bandwidth manager does whenever it wakes.
func (d *opalDevice) settle() {
	d.progress()
	kept := d.active[:0]
	for _, a := range d.active {
		if a.left <= 0 {
			a.p.wake()
			continue
		}
		kept = append(kept, a)
	}
	clear(d.active[len(kept):])
	d.active = kept
}

// progress brings every active IO's bytes left up to now.
func (d *opalDevice) progress() {
	done := d.rate * (d.env.now - d.last)
	for _, a := range d.active {
		a.left -= done
	}
	d.last = d.env.now
}

// reschedule sets the rate for the IOs now active and schedules the
// next completion check.
func (d *opalDevice) reschedule() {
	d.version++
	if len(d.active) == 0 {
		d.rate = 0
		return
	}
	d.rate = d.bw / float64(len(d.active))
	next := d.active[0].left / d.rate
	for _, a := range d.active[1:] {
		next = min(next, a.left/d.rate)
	}
	v := d.version
	d.env.at(d.env.now+max(opalMinSleep, next), func() {
		if v != d.version {
			return // superseded by a start or an end since
		}
		d.settle()
		d.reschedule()
	})
}
