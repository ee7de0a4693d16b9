package replay

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// linearCost prices a step at Base plus PerToken for every token computed
// (prefill tokens and one per decoding request): simple enough to compute
// timelines by hand.
//
// PerContext, when set, adds a cost per token of context each decode
// reads, so that decode steps differ as sequences grow.
type linearCost struct {
	Base, PerToken time.Duration
	PerContext     time.Duration
}

func (c linearCost) StepTime(b *model.Batch) time.Duration {
	n := int64(len(b.Decode))
	for _, p := range b.Prefill {
		n += p.Tokens
	}
	d := c.Base + time.Duration(n)*c.PerToken
	for _, ctx := range b.Decode {
		d += time.Duration(ctx) * c.PerContext
	}
	return d
}

var ms = time.Millisecond

func req(id string, arrival time.Duration, in, out int64) *trace.Request {
	return &trace.Request{
		RequestID:    id,
		Source:       "test",
		Status:       trace.StatusOK,
		InputTokens:  trace.Some(in),
		OutputTokens: trace.Some(out),
		Arrival:      trace.Some(trace.Time(arrival)),
	}
}

func withHashes(r *trace.Request, bs int64, ids ...int64) *trace.Request {
	r.BlockSize = trace.Some(bs)
	r.HashIDs = ids
	return r
}

// replay runs and returns the outputs by request id, plus every output in
// emission order.
func replay(t *testing.T, cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request) (map[string]*trace.Request, []*trace.Request, Stats) {
	t.Helper()
	return replayWith(t, cfg, cost, kvBlocks, reqs, testSwitches{})
}

// replayWith is replay with the engine's test switches set.
func replayWith(t *testing.T, cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request, sw testSwitches) (map[string]*trace.Request, []*trace.Request, Stats) {
	t.Helper()
	return replayOpts(t, cfg, cost, kvBlocks, reqs, Options{test: sw})
}

// replayOpts is replay with opts (its Observe the validator's).
func replayOpts(t *testing.T, cfg Config, cost model.StepModel, kvBlocks int64, reqs []*trace.Request, opts Options) (map[string]*trace.Request, []*trace.Request, Stats) {
	t.Helper()
	var all []*trace.Request
	byID := map[string]*trace.Request{}
	v := newValidator(t, cfg, reqs)
	st, err := RunInputs(cfg, cost, kvBlocks, Requests(reqs), func(r *trace.Request) error {
		all = append(all, r)
		byID[r.RequestID] = r
		return v.output(r)
	}, Options{Observe: v.step, Prefill: opts.Prefill, Offload: opts.Offload, DecodeOffload: opts.DecodeOffload, PerSecond: opts.PerSecond, test: opts.test})
	if err != nil {
		t.Fatal(err)
	}
	v.finish(all)
	return byID, all, st
}

func dump(rs []*trace.Request) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// bursts returns three bursts of randomTrace's requests, n each at rate
// per second, from 0, 300 and 700 s: a fleet that scales to zero goes
// there between them.
func bursts(n int, rate float64) []*trace.Request {
	var reqs []*trace.Request
	for k, at := range []time.Duration{0, 300 * time.Second, 700 * time.Second} {
		for i, r := range randomTrace(uint64(k+1), n, rate) {
			r.RequestID = fmt.Sprintf("b%d-%d", k, i)
			r.Arrival.V += trace.Time(at)
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// randomTrace returns n requests with Poisson arrivals at rate per second
// and prompts drawn from a few shared prefixes, so that prefix caching,
// chunking and (with little KV) preemption all happen.
func randomTrace(seed uint64, n int, rate float64) []*trace.Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	var reqs []*trace.Request
	var at float64
	for i := range n {
		at += rng.ExpFloat64() / rate
		in := int64(1 + rng.IntN(700))
		out := int64(1 + rng.IntN(60))
		r := req(fmt.Sprintf("r%d", i), time.Duration(at*1e9), in, out)
		if rng.IntN(4) > 0 { // most have hash ids from one of three families
			fam := int64(rng.IntN(3)) * 1000
			nb := (in + 63) / 64
			ids := make([]int64, nb)
			for j := range ids {
				ids[j] = fam + int64(j)
				if j > 2 && rng.IntN(3) == 0 {
					ids[j] = int64(1e6 + i*100 + j) // diverges here
				}
			}
			withHashes(r, 64, ids...)
		}
		reqs = append(reqs, r)
	}
	return reqs
}
