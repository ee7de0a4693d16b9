package analyze

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

func sliceSource(reqs []*trace.Request) Source {
	return func(yield func(*trace.Request) error) error {
		for _, r := range reqs {
			if err := yield(r); err != nil {
				return err
			}
		}
		return nil
	}
}

func randomRequests(rng *rand.Rand, n int) []*trace.Request {
	reqs := make([]*trace.Request, n)
	for i := range reqs {
		r := &trace.Request{Status: trace.StatusOK, OutputTokens: trace.Some(int64(rng.IntN(40)))}
		if rng.IntN(20) == 0 {
			r.Status = trace.StatusFailed
		}
		r.InputTokens = trace.Some(int64(1 + rng.IntN(3000)))
		if rng.IntN(50) > 0 { // a few without an arrival
			r.Arrival = trace.Some(trace.Time(rng.Int64N(600e9)))
		}
		// Quantized values repeat, so ranks fall inside runs of equal values.
		r.TTFTSec = trace.Some(math.Round(rng.ExpFloat64()*1e4) / 1e5)
		if rng.IntN(10) > 0 {
			r.E2ESec = trace.Some(r.TTFTSec.V + rng.Float64()*3)
		}
		r.ITLSec = make([]float64, rng.IntN(25))
		for j := range r.ITLSec {
			r.ITLSec[j] = 0.01 + float64(rng.IntN(1000))*1e-5
			if rng.IntN(500) == 0 {
				r.ITLSec[j] = 0 // a zero gap: the lowest key
			}
		}
		reqs[i] = r
	}
	return reqs
}

func checkStreamEqualsSummary(t *testing.T, reqs []*trace.Request, pcts []float64) *StreamSummary {
	t.Helper()
	got, err := SummarizeStream(sliceSource(reqs), pcts)
	if err != nil {
		t.Fatal(err)
	}
	want := Summarize(trace.Run{}, reqs)
	if got.Completed != int64(want.Completed) || got.Failed != int64(want.Failed) ||
		got.TotalInputTokens != want.TotalInputTokens || got.TotalOutputTokens != want.TotalOutputTokens {
		t.Errorf("counts differ: %+v vs %+v", got, want)
	}
	if got.DurationSec != want.DurationSec || got.RequestThroughput != want.RequestThroughput ||
		got.InputThroughput != want.InputThroughput || got.OutputThroughput != want.OutputThroughput ||
		got.TotalTokenThroughput != want.TotalTokenThroughput {
		t.Errorf("duration and throughputs differ: stream %v s, %v req/s, %v/%v/%v tok/s; in memory %v s, %v req/s, %v/%v/%v tok/s",
			got.DurationSec, got.RequestThroughput, got.InputThroughput, got.OutputThroughput, got.TotalTokenThroughput,
			want.DurationSec, want.RequestThroughput, want.InputThroughput, want.OutputThroughput, want.TotalTokenThroughput)
	}
	if len(reqs) > 0 && got.DurationSec == 0 {
		t.Error("no duration measured")
	}
	for _, m := range []struct {
		name string
		s    StreamDist
		d    Dist
	}{{"ttft", got.TTFT, want.TTFT}, {"tpot", got.TPOT, want.TPOT}, {"itl", got.ITL, want.ITL}, {"e2e", got.E2E, want.E2E}} {
		if m.s.N != int64(m.d.N()) || m.s.Mean != m.d.Mean || m.s.Std != m.d.Std || m.s.Median != m.d.Median() {
			t.Errorf("%s: stream n=%d mean=%v std=%v median=%v; in memory n=%d mean=%v std=%v median=%v",
				m.name, m.s.N, m.s.Mean, m.s.Std, m.s.Median, m.d.N(), m.d.Mean, m.d.Std, m.d.Median())
		}
		for i, p := range pcts {
			if m.s.Percentiles[i] != m.d.Percentile(p) {
				t.Errorf("%s p%v: stream %v, in memory %v", m.name, p, m.s.Percentiles[i], m.d.Percentile(p))
			}
		}
	}
	return got
}

// TestStreamSummaryEqualsInMemory checks the multi-pass summary against
// Summarize to the last bit, once with buckets small enough to collect and
// once with a collect limit of 3 values, which forces every level of
// refinement down to single 64-bit keys.
func TestStreamSummaryEqualsInMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	reqs := randomRequests(rng, 20000)
	pcts := []float64{0, 1, 25, 50, 90, 99, 99.9, 100}
	s := checkStreamEqualsSummary(t, reqs, pcts)
	if s.Passes != 3 {
		t.Errorf("%d passes, want 3 when every bucket fits", s.Passes)
	}
	defer func(old int64) { collectLimit = old }(collectLimit)
	collectLimit = 3
	s = checkStreamEqualsSummary(t, reqs, pcts)
	if s.Passes < 4 { // 16-bit levels: top, 32, 48 and 64 bits
		t.Errorf("%d passes with a collect limit of 3; refinement did not happen", s.Passes)
	}
	checkStreamEqualsSummary(t, nil, pcts)
}

func TestFloatKeyOrder(t *testing.T) {
	vals := []float64{math.Inf(-1), -1e300, -2, -1, -1e-300, math.Copysign(0, -1), 0, 1e-300, 1, 2, 1e300, math.Inf(1)}
	for i := 1; i < len(vals); i++ {
		if floatKey(vals[i-1]) >= floatKey(vals[i]) {
			t.Errorf("key(%v) >= key(%v)", vals[i-1], vals[i])
		}
	}
	for _, v := range vals {
		if math.Float64bits(keyFloat(floatKey(v))) != math.Float64bits(v) {
			t.Errorf("keyFloat(floatKey(%v)) = %v", v, keyFloat(floatKey(v)))
		}
	}
}

// A StreamSummarizer whose first pass is fed by Add, in another order,
// gives SummarizeStream's summary with one pass fewer over the source.
func TestStreamSummarizerAddThenFinish(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	reqs := randomRequests(rng, 5000)
	pcts := []float64{1, 50, 99}
	want, err := SummarizeStream(sliceSource(reqs), pcts)
	if err != nil {
		t.Fatal(err)
	}
	z := NewStreamSummarizer(pcts)
	for i := len(reqs) - 1; i >= 0; i-- {
		z.Add(reqs[i])
	}
	got, err := z.Finish(sliceSource(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if got.Passes != want.Passes-1 {
		t.Errorf("%d passes over the source, want %d", got.Passes, want.Passes-1)
	}
	got.Passes = want.Passes
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summaries differ:\n got %+v\nwant %+v", got, want)
	}
}
