package analyze

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// TestPeakFoldAsPeakMetrics checks the peaks folded request by request
// against PeakMetrics of the same requests, to the bit: in order of
// arrival (the fold's own bins serve), shuffled (its origin is not the
// earliest start: PeakMetrics serves), with a successful request that
// lacks a field, with failures only, with arrivals months apart (too many
// bins to fold) and with token times before the first start.
func TestPeakFoldAsPeakMetrics(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	gen := func(n int, spread float64) []*trace.Request {
		reqs := make([]*trace.Request, n)
		for i := range reqs {
			r := &trace.Request{Status: trace.StatusOK, Arrival: at(rng.Float64() * spread), TTFTSec: f(rng.ExpFloat64() * 0.3)}
			if rng.IntN(10) == 0 {
				r.Status = trace.StatusFailed
			}
			r.ITLSec = make([]float64, rng.IntN(200))
			e2e := r.TTFTSec.V
			for j := range r.ITLSec {
				r.ITLSec[j] = 0.005 + rng.Float64()*0.05
				e2e += r.ITLSec[j]
			}
			r.E2ESec = f(e2e)
			reqs[i] = r
		}
		return reqs
	}
	byArrival := func(reqs []*trace.Request) []*trace.Request {
		reqs = slices.Clone(reqs)
		slices.SortStableFunc(reqs, func(a, b *trace.Request) int { return int(a.Arrival.V - b.Arrival.V) })
		return reqs
	}
	reqs := gen(3000, 600)
	lacking := byArrival(reqs)
	lacking[100] = &trace.Request{Status: trace.StatusOK, Arrival: at(50), TTFTSec: f(0.1)}
	failed := gen(10, 5)
	for _, r := range failed {
		r.Status = trace.StatusFailed
	}
	early := byArrival(gen(500, 60))
	early[7].TTFTSec = f(-3) // a token time before the first start
	noITL := byArrival(gen(50, 10))
	for _, r := range noITL {
		r.ITLSec = nil
	}
	// Tokens in (−1, 0) s of the first start count in bin 0 (here its
	// peak); tokens past the last bin (E2E shorter than the gaps) do not.
	edge := []*trace.Request{
		{Status: trace.StatusOK, Arrival: at(0), TTFTSec: f(-0.5), ITLSec: []float64{0.1, 0.1}, E2ESec: f(0.1)},
		{Status: trace.StatusOK, Arrival: at(0.2), TTFTSec: f(1), E2ESec: f(1)},
	}
	past := []*trace.Request{
		{Status: trace.StatusOK, Arrival: at(0), TTFTSec: f(0.1), ITLSec: []float64{2, 0.1, 0.1, 0.1}, E2ESec: f(0.5)},
	}
	cases := []struct {
		name   string
		reqs   []*trace.Request
		folded bool // the fold's own bins give the result
	}{
		{"by arrival", byArrival(reqs), true},
		{"shuffled", reqs, false},
		{"lacking a field", lacking, false},
		{"failures only", failed, false},
		{"months apart", byArrival(gen(20, 1e8)), false},
		{"early token", early, true},
		{"no ITL", noITL, true},
		{"before the first start", edge, true},
		{"past the last bin", past, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fold := newPeakFold()
			for _, r := range c.reqs {
				fold.add(r)
			}
			if folded := fold.missing == "" && fold.spans > 0 && !fold.unbinned && fold.origin == fold.minStart; folded != c.folded {
				t.Errorf("folded bins used: %v, want %v", folded, c.folded)
			}
			gp, gw := fold.result(c.reqs)
			wp, ww := PeakMetrics(c.reqs)
			if gw != ww || !reflect.DeepEqual(gp, wp) {
				t.Errorf("fold %+v %q, PeakMetrics %+v %q", gp, gw, wp, ww)
			}
		})
	}
}
