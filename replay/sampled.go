package replay

import (
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// A Sampled workload is n requests with Poisson arrivals and (prompt,
// output) lengths drawn with replacement from a table of observed pairs,
// all from one seed. It implements Inputs without holding the requests:
// request i is built when asked for, from 12 bytes kept per request, so a
// replay of millions of requests needs memory only for those in flight.
type Sampled struct {
	run     string
	lengths [][2]int64
	at      []trace.Time // arrival of request i
	pick    []int32      // index into lengths of request i
}

// NewSampled draws n requests arriving at rate per second (exponential
// gaps, the first after one gap) with lengths drawn uniformly from
// lengths, each a (prompt tokens, output tokens) pair, from seed. The
// requests are named run/i.
func NewSampled(run string, n int, rate float64, lengths [][2]int64, seed uint64) (*Sampled, error) {
	switch {
	case n < 0 || n > 1<<31-1:
		return nil, errors.New("replay: sampled workload: request count out of range")
	case !(rate > 0) || rate > 1e12:
		return nil, errors.New("replay: sampled workload: rate must be a positive number of requests per second")
	case len(lengths) == 0 && n > 0:
		return nil, errors.New("replay: sampled workload: no lengths to draw from")
	}
	for _, l := range lengths {
		if l[0] < 0 || l[1] < 0 {
			return nil, errors.New("replay: sampled workload: negative length")
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x73616d706c6564)) // "sampled"
	s := &Sampled{run: run, lengths: lengths, at: make([]trace.Time, n), pick: make([]int32, n)}
	var t float64
	for i := range n {
		t += rng.ExpFloat64() / rate
		s.at[i] = trace.TimeFromSeconds(t)
		s.pick[i] = int32(rng.IntN(len(lengths)))
	}
	return s, nil
}

// Len implements Inputs.
func (s *Sampled) Len() int { return len(s.at) }

// Request implements Inputs.
func (s *Sampled) Request(i int) *trace.Request {
	l := s.lengths[s.pick[i]]
	return &trace.Request{
		RequestID:    s.run + "/" + strconv.Itoa(i),
		Run:          s.run,
		Source:       "sampled",
		Status:       trace.StatusOK,
		InputTokens:  trace.Some(l[0]),
		OutputTokens: trace.Some(l[1]),
		Arrival:      trace.Some(s.at[i]),
	}
}

func (s *Sampled) shape(i int) (prompt, out int64, arrival trace.Time) {
	l := s.lengths[s.pick[i]]
	return l[0], l[1], s.at[i]
}

func (s *Sampled) ident(i int, o *trace.Request) {
	o.RequestID, o.Run = s.run+"/"+strconv.Itoa(i), s.run
}
