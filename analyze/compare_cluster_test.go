package analyze

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// correlatedRun makes n completed requests of gaps ITL gaps each, whose
// gaps share a level drawn per request (lognormal, σ 0.5) with 5 % noise
// per gap: the gaps of one request are strongly correlated, as a
// request's decode steps share its batch and context length.
func correlatedRun(rng *rand.Rand, n, gaps int) []*trace.Request {
	reqs := make([]*trace.Request, n)
	for i := range reqs {
		level := 0.02 * math.Exp(0.5*rng.NormFloat64())
		itl := make([]float64, gaps)
		for j := range itl {
			itl[j] = level * (1 + 0.05*rng.NormFloat64())
		}
		reqs[i] = &trace.Request{Status: trace.StatusOK, ITLSec: itl}
	}
	return reqs
}

// itlWidth returns the width of the 95 % interval of ITL's stat in c.
func itlWidth(t *testing.T, c *Comparison, stat string) float64 {
	t.Helper()
	for _, m := range c.Metrics {
		if m.Metric != "itl" {
			continue
		}
		for _, s := range m.Stats {
			if s.Stat == stat {
				return s.CIHi - s.CILo
			}
		}
	}
	t.Fatalf("no itl %s in the comparison", stat)
	return 0
}

// TestClusterBootstrapWidensCorrelatedITL builds two runs from the same
// process whose gaps are correlated within requests and checks the
// interval of the relative difference of the ITL mean and median against
// the truth: the spread of that difference over many independent pairs of
// runs. The interval by request is about as wide as the truth; the one by
// gap, which takes 4,000 gaps for 4,000 independent draws when there are
// only 100 requests, is several times too narrow.
func TestClusterBootstrapWidensCorrelatedITL(t *testing.T) {
	const n, gaps = 100, 40
	rng := rand.New(rand.NewPCG(7, 7))
	// The truth: the 95 % range of the relative difference over 400
	// independent pairs of runs.
	var truth = map[string][]float64{}
	for range 400 {
		a := SummarizeWith(trace.Run{}, correlatedRun(rng, n, gaps), Options{})
		b := SummarizeWith(trace.Run{}, correlatedRun(rng, n, gaps), Options{})
		truth["mean"] = append(truth["mean"], b.ITL.Mean/a.ITL.Mean-1)
		truth["p50"] = append(truth["p50"], b.ITL.Percentile(50)/a.ITL.Percentile(50)-1)
	}
	ra, rb := correlatedRun(rng, n, gaps), correlatedRun(rng, n, gaps)
	byReq := Compare("a", SummarizeWith(trace.Run{}, ra, Options{ITLByRequest: true}),
		"b", SummarizeWith(trace.Run{}, rb, Options{ITLByRequest: true}), CompareOptions{Seed: 1})
	byGap := Compare("a", SummarizeWith(trace.Run{}, ra, Options{}), "b", SummarizeWith(trace.Run{}, rb, Options{}), CompareOptions{Seed: 1})
	for _, m := range byReq.Metrics {
		if m.Metric == "itl" && !m.ByRequest {
			t.Fatal("ITL of summaries with ITLByRequest not resampled by request")
		}
	}
	for _, m := range byGap.Metrics {
		if m.ByRequest {
			t.Fatalf("%s resampled by request without ITLByRequest", m.Metric)
		}
	}
	for _, stat := range []string{"mean", "p50"} {
		d := NewDist(truth[stat])
		want := d.Percentile(97.5) - d.Percentile(2.5)
		req, gap := itlWidth(t, byReq, stat), itlWidth(t, byGap, stat)
		t.Logf("%s: true 95 %% range %.4f, by request %.4f, by gap %.4f", stat, want, req, gap)
		if req < 0.7*want || req > 1.4*want {
			t.Errorf("%s: interval by request %.4f, want within 0.7–1.4 × the true %.4f", stat, req, want)
		}
		if gap > 0.4*want {
			t.Errorf("%s: interval by gap %.4f not narrower than 0.4 × the true %.4f: the case does not show what it should", stat, gap, want)
		}
	}
}

// TestClusterBootstrapOfIndependentGaps: with one gap per request,
// resampling requests is resampling gaps, and the two intervals agree.
func TestClusterBootstrapOfIndependentGaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	ra, rb := correlatedRun(rng, 3000, 1), correlatedRun(rng, 3000, 1)
	byReq := Compare("a", SummarizeWith(trace.Run{}, ra, Options{ITLByRequest: true}),
		"b", SummarizeWith(trace.Run{}, rb, Options{ITLByRequest: true}), CompareOptions{Seed: 1})
	byGap := Compare("a", SummarizeWith(trace.Run{}, ra, Options{}), "b", SummarizeWith(trace.Run{}, rb, Options{}), CompareOptions{Seed: 1})
	for _, stat := range []string{"mean", "p50", "p90"} {
		req, gap := itlWidth(t, byReq, stat), itlWidth(t, byGap, stat)
		if math.Abs(req/gap-1) > 0.2 {
			t.Errorf("%s: by request %.4f, by gap %.4f: should agree within 20 %%", stat, req, gap)
		}
	}
}

// TestResampleRequestsMatchesExplicitResample rebuilds a cluster
// resample from the same draws, as the pooled gaps of the drawn requests,
// and checks the weighted statistics against Dist.
func TestResampleRequestsMatchesExplicitResample(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	reqs := correlatedRun(rng, 37, 1)
	for i, r := range reqs { // unequal numbers of gaps
		r.ITLSec = append(r.ITLSec, make([]float64, i%5)...)
		for j := range r.ITLSec {
			r.ITLSec[j] += float64(j) * 0.001
		}
	}
	s := SummarizeWith(trace.Run{}, reqs, Options{ITLByRequest: true})
	stats := []stat{{"p99", nil, 99}, {"mean", nil, -1}, {"p50", nil, 50}, {"p90", nil, 90}}
	out := make([]float64, len(stats))
	counts := make([]int32, len(reqs))
	seed := rand.New(rand.NewPCG(9, 9))
	sd := side{d: s.ITL}.byRequest(s.ITLRequests)
	resampleRequests(seed, s.ITL.Values, s.ITLRequests, sd.perRequest, counts, stats, out)
	var pooled []float64
	for i, c := range counts {
		for range c {
			pooled = append(pooled, reqs[i].ITLSec...)
		}
	}
	d := NewDist(slices.Clone(pooled))
	want := []float64{d.Percentile(99), d.Mean, d.Percentile(50), d.Percentile(90)}
	for k := range stats {
		if math.Abs(out[k]-want[k]) > 1e-12*math.Max(1, math.Abs(want[k])) {
			t.Errorf("%s: %v, want %v", stats[k].name, out[k], want[k])
		}
	}
}
