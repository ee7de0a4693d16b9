package kvcache

import (
	"fmt"
	"math"
	"slices"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A SharedLink is a link (model.Link) carrying concurrent transfers that
// share its bandwidth equally (processor sharing): each transfer first
// waits the link's latency, using no bandwidth, then receives
// Bandwidth/k while k transfers are moving bytes. A transfer alone takes
// exactly model.Link.TransferTime.
//
// It is driven by the replay's event loop: Start adds a transfer, Next
// says when the link's state next changes (a latency ends or a transfer
// completes), and Advance moves the clock and returns what completed.
// Time is trace.Time (ns); bytes are tracked as float64, and completion
// times are rounded to the nanosecond.
//
// Note: equal sharing is what NCCL-less DMA copies and NVMe queues do to
// a first approximation, and what Opal's AbstractDevice computes
// (opal-notes §1, bw_per_req = BW/num_active); weighted or
// concurrency-limited sharing would be a different type.
type SharedLink struct {
	link    model.Link
	now     float64 // ns
	waiting []flow  // in latency, by (ready, id)
	moving  []flow  // receiving bandwidth, by id
}

type flow struct {
	id        int64
	ready     float64 // ns when the latency ends
	remaining float64 // bytes
}

// A Done is a completed transfer.
type Done struct {
	ID int64
	At trace.Time
}

// NewSharedLink returns an idle link at time 0.
func NewSharedLink(l model.Link) (*SharedLink, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &SharedLink{link: l}, nil
}

// Active is the number of transfers in flight (in latency or moving).
func (s *SharedLink) Active() int { return len(s.waiting) + len(s.moving) }

// Start begins a transfer of n bytes at now, which must not be before
// the link's clock; ids must be unique among transfers in flight. It
// first advances the link to now and returns what completed by then, as
// Advance does.
func (s *SharedLink) Start(now trace.Time, id int64, n int64) ([]Done, error) {
	if n < 0 {
		return nil, fmt.Errorf("link %s: transfer %d of %d bytes", s.link.Name, id, n)
	}
	if float64(now) < s.now {
		return nil, fmt.Errorf("link %s: start at %d ns before the link's clock %.0f ns", s.link.Name, now, s.now)
	}
	done := s.Advance(now)
	f := flow{id: id, ready: float64(now) + float64(s.link.Latency), remaining: float64(n)}
	i, _ := slices.BinarySearchFunc(s.waiting, f, cmpReady)
	s.waiting = slices.Insert(s.waiting, i, f)
	return done, nil
}

func cmpReady(a, b flow) int {
	if a.ready != b.ready {
		if a.ready < b.ready {
			return -1
		}
		return 1
	}
	return int(a.id - b.id)
}

// rate is the bytes per ns each moving transfer receives.
func (s *SharedLink) rate() float64 {
	return s.link.Bandwidth / 1e9 / float64(len(s.moving))
}

// next is the time of the next state change, or +Inf.
func (s *SharedLink) next() float64 {
	t := math.Inf(1)
	if len(s.waiting) > 0 {
		t = s.waiting[0].ready
	}
	if len(s.moving) > 0 {
		least := s.moving[0].remaining
		for _, f := range s.moving[1:] {
			least = min(least, f.remaining)
		}
		t = min(t, s.now+least/s.rate())
	}
	return t
}

// Next returns when the link's state next changes if no transfer starts
// before then, and false when it is idle.
func (s *SharedLink) Next() (trace.Time, bool) {
	t := s.next()
	if math.IsInf(t, 1) {
		return 0, false
	}
	return trace.Time(math.Ceil(t)), true
}

// Advance moves the link's clock to to and returns the transfers that
// completed by then, in completion order (ties by id). An earlier to
// than the clock does nothing.
func (s *SharedLink) Advance(to trace.Time) []Done {
	var done []Done
	end := float64(to)
	for {
		t := s.next()
		if t > end {
			break
		}
		s.drain(t)
		// Latencies that end now join the sharing.
		for len(s.waiting) > 0 && s.waiting[0].ready <= t {
			s.moving = append(s.moving, s.waiting[0])
			s.waiting = s.waiting[1:]
		}
		slices.SortFunc(s.moving, func(a, b flow) int { return int(a.id - b.id) })
		// Transfers with nothing left complete now: a tolerance of a
		// millionth of a byte absorbs float rounding between equal shares.
		kept := s.moving[:0]
		for _, f := range s.moving {
			if f.remaining <= 1e-6 {
				done = append(done, Done{ID: f.id, At: trace.Time(math.Round(t))})
			} else {
				kept = append(kept, f)
			}
		}
		s.moving = kept
	}
	if end > s.now {
		s.drain(end)
	}
	return done
}

// drain moves the clock to t, taking each moving transfer's share of the
// bytes sent meanwhile.
func (s *SharedLink) drain(t float64) {
	if len(s.moving) > 0 && t > s.now {
		sent := (t - s.now) * s.rate()
		for i := range s.moving {
			s.moving[i].remaining = max(s.moving[i].remaining-sent, 0)
		}
	}
	s.now = max(s.now, t)
}
