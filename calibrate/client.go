package calibrate

import (
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A ClientOverhead is what the serving path outside the engine's steps
// adds to what a benchmark client measures: a fixed cost per request
// (API server, tokenisation, scheduling the request in, detokenising and
// sending the first chunk, the client's own handling), and a cost per
// streamed chunk (detokenising, SSE framing, the client parsing it).
//
// Note: the per-request cost is priced as the replay's client latency
// (replay.ClientConfig.LatencySec, half of it each way), which adds it to
// TTFT and E2E and delays the request's arrival at the server by half of
// it, as an API server does. The per-chunk cost is a serial client: a
// chunk is seen no earlier than the previous one's handling ends, so
// chunks that come faster than the client handles them queue up (ITL
// gaps of at least the cost, E2E later by the backlog) and slower ones
// are not delayed.
//
// APIServerSec is the API server's serial time per request
// (replay.ClientConfig.APIServerRequestSec): requests wait for it one
// after another, so it matters only in bursts (apiserver.go).
type ClientOverhead struct {
	PerRequestSec float64
	PerChunkSec   float64
	APIServerSec  float64
}

// clientOverhead returns the overheads cm holds (zero when none).
func (cm *CostModel) clientOverhead() ClientOverhead {
	var o ClientOverhead
	o.PerRequestSec, _ = cm.get(CoefRequestOverhead)
	o.PerChunkSec, _ = cm.get(CoefChunkOverhead)
	o.APIServerSec, _ = cm.get(CoefAPIServer)
	return o
}

// ClientOverhead returns the client overheads of cm.
func (cm *CostModel) ClientOverhead() ClientOverhead { return cm.clientOverhead() }

// ApplyConfig adds the per-request overhead to cfg's client latency and
// sets its API server's time per request.
func (o ClientOverhead) ApplyConfig(cfg *replay.Config) {
	if o.PerRequestSec > 0 {
		cfg.Client.LatencySec += o.PerRequestSec / 2
	}
	if o.APIServerSec > 0 {
		cfg.Client.APIServerRequestSec = o.APIServerSec
	}
}

// ApplyRecord delays the chunks of a simulated request as a client that
// spends PerChunkSec on each would see them: its ITL gaps and E2E change,
// its TTFT does not. A record without ITL gaps is left as it is.
func (o ClientOverhead) ApplyRecord(r *trace.Request) {
	c := o.PerChunkSec
	if c <= 0 || len(r.ITLSec) == 0 {
		return
	}
	// arrival of chunk k relative to the first: a; seen: s.
	var a, s, backlog float64
	for i, g := range r.ITLSec {
		a += g
		next := max(a, s+c)
		r.ITLSec[i] = next - s
		s = next
	}
	backlog = s - a
	if r.E2ESec.OK {
		r.E2ESec.V += backlog
	}
}
