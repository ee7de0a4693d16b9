package replay

import (
	"fmt"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// A Second holds the statistics of one simulated second over all workers
// (trace.Second, which trace.WriteSeconds writes).
type Second = trace.Second

// MaxPerSecondSpan is the longest span of open-loop arrivals whose
// per-second statistics a replay collects: 2^21 s (24.3 days). The table
// is dense, a row of some 140 bytes a second, so this bounds it near
// 300 MB; a longer trace is refused before the replay starts rather than
// running out of memory.
const MaxPerSecondSpan = (1 << 21) * trace.Time(time.Second)

// checkPerSecondSpan refuses per-second statistics over arrivals that
// span more than MaxPerSecondSpan.
func checkPerSecondSpan(at []trace.Time) error {
	var last trace.Time
	for _, a := range at {
		last = max(last, a)
	}
	if last > MaxPerSecondSpan {
		return fmt.Errorf("replay: per-second statistics: the arrivals span %.0f s, more than the limit of %.0f s (24 days); replay without them or a shorter part of the trace",
			last.Sub(0).Seconds(), MaxPerSecondSpan.Sub(0).Seconds())
	}
	return nil
}

// seconds accumulates Seconds as the replay runs.
//
// Note: the time-weighted sums are kept in integer nanoseconds and turned
// into float64 once, at the end. Fast-forward adds a worker's steps in
// windows, not interleaved with the other workers', and float sums in
// another order would differ in their last bits.
type seconds struct {
	rows    []Second
	sums    []weighted
	workers int
	block   int64 // tokens per KV block: SGLang workers count tokens

	// KV tiers (offload.go, observe): the bytes each class of link
	// carried in each second, what its links can carry in a second,
	// and the tiers' occupancy in bytes (host, disk, remote) now.
	linkBytes [][numLinkClasses]float64
	linkCap   [numLinkClasses]float64
	tierBytes func() [numTiers]int64
}

// Classes of link, for their utilisation.
const (
	linkH2D = iota
	linkD2H
	linkDRAM
	linkNVMe
	linkNIC
	numLinkClasses
)

// weighted holds one second's integer time-weighted sums (ns × value).
type weighted struct {
	busy, running, waiting, kv int64
	held                       int64 // requests at the gateway (scaletozero.go)
}

// at returns the row of the second holding t, growing the table.
func (s *seconds) at(t trace.Time) *Second {
	i := int64(t / trace.Time(time.Second))
	for int64(len(s.rows)) <= i {
		row := Second{Second: int64(len(s.rows))}
		if s.tierBytes != nil {
			b := s.tierBytes()
			row.HostKVBytes, row.DiskKVBytes, row.RemoteKVBytes = b[tierHost], b[tierDisk], b[tierRemote]
		}
		s.rows = append(s.rows, row)
		s.sums = append(s.sums, weighted{})
	}
	return &s.rows[i]
}

// step records one step of a worker from start to end.
func (s *seconds) step(st *Step) {
	r := s.at(st.Start)
	r.Steps++
	r.Preemptions += int64(st.Preempted)
	tokens := int64(len(st.Batch.Decode))
	for _, p := range st.Batch.Prefill {
		tokens += p.Tokens
	}
	r.Tokens += tokens
	used := st.KV.NumUsed()
	if st.Radix != nil {
		used = ceilDiv(st.Radix.Used(), s.block)
	}
	// Spread the step's duration over the seconds it spans.
	for t := st.Start; t < st.End; {
		next := min(st.End, (t/trace.Time(time.Second)+1)*trace.Time(time.Second))
		w := int64(next - t)
		s.at(t)
		x := &s.sums[t/trace.Time(time.Second)]
		x.busy += w
		x.running += w * int64(st.Running)
		x.waiting += w * int64(st.Waiting)
		x.kv += w * used
		t = next
	}
}

// held adds n requests held at the gateway over [from, to), split among
// the seconds it spans.
func (s *seconds) held(from, to trace.Time, n int) {
	for t := from; t < to; {
		next := min(to, (t/trace.Time(time.Second)+1)*trace.Time(time.Second))
		s.at(t)
		s.sums[t/trace.Time(time.Second)].held += int64(next-t) * int64(n)
		t = next
	}
}

// link adds what a link of class c carried at rate bytes per ns over
// [from, to) ns, split among the seconds it spans.
func (s *seconds) link(c int, from, to, rate float64) {
	for t := from; t < to; {
		sec := int64(t / 1e9)
		next := min(to, float64(sec+1)*1e9)
		s.at(trace.Time(t))
		for int64(len(s.linkBytes)) <= sec {
			s.linkBytes = append(s.linkBytes, [numLinkClasses]float64{})
		}
		s.linkBytes[sec][c] += rate * (next - t)
		t = next
	}
}

// done returns the table up to the second holding end. A second's Busy
// is over the workers, or with an autoscaler (fleet, by second: nil
// without) over the workers on in it — ready, starting or draining, what
// its GPU-hours count.
//
// Note: over the fleet at the start, a second with one worker of a fleet
// that started with four was at most 25 % busy: on the Azure
// conversation trace (an HPA on queue depth, 4 workers at the start, 1–8)
// stats said 24.93 % busy on average where the lone worker was nearly
// always stepping.
func (s *seconds) done(end trace.Time, fleet []FleetSecond) []Second {
	s.at(end)
	for i, b := range s.linkBytes {
		r := &s.rows[i]
		for c, x := range []*float64{&r.PCIeH2DUtil, &r.PCIeD2HUtil, &r.HostMemUtil, &r.NVMeUtil, &r.NICUtil} {
			if s.linkCap[c] > 0 {
				*x = b[c] / s.linkCap[c]
			}
		}
	}
	for i := range s.rows {
		x, r := s.sums[i], &s.rows[i]
		workers := float64(s.workers)
		if i < len(fleet) {
			if f := fleet[i]; f.Ready+f.Starting+f.Draining > 0 {
				workers = f.Ready + f.Starting + f.Draining
			}
		}
		r.Busy = float64(x.busy) / 1e9 / workers
		r.Running = float64(x.running) / 1e9
		r.Waiting = float64(x.waiting) / 1e9
		r.KVBlocksUsed = float64(x.kv) / 1e9
		r.HeldAtGateway = float64(x.held) / 1e9
	}
	return s.rows
}

// add adds a part's table to s (parallel.go): its counts and integer
// time-weighted sums, which add up in any order. Parts have no KV tiers,
// so no link bytes or tier occupancy.
func (s *seconds) add(o *seconds) {
	if len(o.rows) > 0 {
		s.at(trace.Time(len(o.rows)-1) * trace.Time(time.Second))
	}
	for i := range o.rows {
		r, x := &s.rows[i], &o.rows[i]
		r.Arrivals += x.Arrivals
		r.Completions += x.Completions
		r.TimedOut += x.TimedOut
		r.Rejected += x.Rejected
		r.Steps += x.Steps
		r.Tokens += x.Tokens
		r.Preemptions += x.Preemptions
		w, y := &s.sums[i], o.sums[i]
		w.busy += y.busy
		w.running += y.running
		w.waiting += y.waiting
		w.kv += y.kv
		w.held += y.held
	}
}
