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
// request i is built when asked for, from 16 bytes kept per request, so a
// replay of millions of requests needs memory only for those in flight.
type Sampled struct {
	run  string
	at   []trace.Time // arrival of request i
	lens [][2]int32   // prompt and output tokens of request i
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
		if l[0] > 1<<31-1 || l[1] > 1<<31-1 {
			return nil, errors.New("replay: sampled workload: a length beyond 2^31 tokens")
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x73616d706c6564)) // "sampled"
	// Each request's lengths are kept, not an index into the table: the
	// engine reads them in order, and a random index into a table of
	// 20,000 pairs missed the cache on every request.
	s := &Sampled{run: run, at: make([]trace.Time, n), lens: make([][2]int32, n)}
	var t float64
	for i := range n {
		t += rng.ExpFloat64() / rate
		s.at[i] = trace.TimeFromSeconds(t)
		l := lengths[rng.IntN(len(lengths))]
		s.lens[i] = [2]int32{int32(l[0]), int32(l[1])}
	}
	return s, nil
}

// Len implements Inputs.
func (s *Sampled) Len() int { return len(s.at) }

// Request implements Inputs.
func (s *Sampled) Request(i int) *trace.Request {
	l := s.lens[i]
	return &trace.Request{
		RequestID:    s.run + "/" + strconv.Itoa(i),
		Run:          s.run,
		Source:       "sampled",
		Status:       trace.StatusOK,
		InputTokens:  trace.Some(int64(l[0])),
		OutputTokens: trace.Some(int64(l[1])),
		Arrival:      trace.Some(s.at[i]),
	}
}

func (s *Sampled) shape(i int) (prompt, out int64, arrival trace.Time) {
	l := s.lens[i]
	return int64(l[0]), int64(l[1]), s.at[i]
}

func (s *Sampled) ident(i int, o *trace.Request) {
	o.RequestID, o.Run = s.run+"/"+strconv.Itoa(i), s.run
}
