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

// checkStreamEqualsSummary summarizes reqs by passes and in memory and
// checks that every field of the two summaries is the same to the bit
// (the distributions on every rank the passes selected, which must cover
// the median, pcts and the CDF's quantiles), but Passes.
func checkStreamEqualsSummary(t *testing.T, reqs []*trace.Request, opts StreamOptions) *Summary {
	t.Helper()
	run := trace.Run{Name: "r", Source: "test"}
	got, err := SummarizeStream(sliceSource(reqs), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := SummarizeWith(run, reqs, Options{Goodput: opts.Goodput})
	if len(reqs) > 0 && got.DurationSec == 0 {
		t.Error("no duration measured")
	}
	checkSameSummary(t, got, want, opts)
	return got
}

// checkSameSummary compares a summary made by passes with one made in
// memory, field by field, floats by their bits.
func checkSameSummary(t *testing.T, got, want *Summary, opts StreamOptions) {
	t.Helper()
	if got.Passes == 0 || want.Passes != 0 {
		t.Errorf("passes: by passes %d, in memory %d", got.Passes, want.Passes)
	}
	g, w := *got, *want
	g.Passes = 0
	dists := []struct {
		name      string
		got, want *Dist
	}{{"ttft", &g.TTFT, &w.TTFT}, {"tpot", &g.TPOT, &w.TPOT}, {"itl", &g.ITL, &w.ITL}, {"e2e", &g.E2E, &w.E2E}}
	for _, d := range dists {
		if !d.got.Streamed() {
			t.Fatalf("%s: the summary by passes holds its values", d.name)
		}
		// Every quantile the renderers ask for reads selected ranks only
		// (a missing one panics), and equals the in-memory value.
		vals := func(x Dist) []float64 {
			out := []float64{x.Median()}
			for _, p := range opts.Percentiles {
				out = append(out, x.Percentile(p))
			}
			q, _ := x.Quantiles(opts.CDFPoints)
			return append(out, q...)
		}
		if gv, wv := vals(*d.got), vals(*d.want); !sameBits(reflect.ValueOf(gv), reflect.ValueOf(wv)) {
			t.Errorf("%s: quantiles by passes %v, in memory %v", d.name, gv, wv)
		}
		// The rest of the comparison sees the in-memory distribution
		// reduced to what the passes selected.
		red := Dist{Mean: d.want.Mean, Std: d.want.Std, n: int64(d.want.N()), ranks: map[int64]float64{}}
		for r := range d.got.ranks {
			red.ranks[r] = d.want.Values[r]
		}
		*d.want = red
	}
	if !sameBits(reflect.ValueOf(g), reflect.ValueOf(w)) {
		t.Errorf("summaries differ:\nby passes %+v\nin memory %+v", g, w)
	}
}

// sameBits is reflect.DeepEqual with floats compared by their bits (so
// −0 differs from 0, and NaN equals the same NaN).
func sameBits(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		return math.Float64bits(a.Float()) == math.Float64bits(b.Float())
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameBits(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameBits(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameBits(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !sameBits(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestStreamSummaryEqualsInMemory checks the multi-pass summary against
// Summarize to the last bit, on every field: with buckets small enough to
// collect, with a collect limit of 3 values (which forces every level of
// refinement down to single 64-bit keys), with a pass budget so small
// that jobs wait, and with peaks, goodput and mixed semantics.
func TestStreamSummaryEqualsInMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	reqs := randomRequests(rng, 20000)
	opts := StreamOptions{Percentiles: []float64{0, 1, 25, 50, 90, 99, 99.9, 100}}
	s := checkStreamEqualsSummary(t, reqs, opts)
	if s.Passes != 3 {
		t.Errorf("%d passes, want 3 when every bucket fits", s.Passes)
	}
	if s.Peak != nil || s.PeakMissing == "" {
		t.Errorf("peak computed though some requests lack arrivals: %+v", s.Peak)
	}
	withCDF := opts
	withCDF.CDFPoints = 500
	checkStreamEqualsSummary(t, reqs, withCDF)
	withCDF.CDFPoints = 50000 // more points than values: every value
	checkStreamEqualsSummary(t, reqs[:3000], withCDF)

	defer func(old int64) { collectLimit = old }(collectLimit)
	collectLimit = 3
	s = checkStreamEqualsSummary(t, reqs, opts)
	if s.Passes < 4 { // 16-bit levels: top, 32, 48 and 64 bits
		t.Errorf("%d passes with a collect limit of 3; refinement did not happen", s.Passes)
	}
	// A CDF's ranks, refined: many jobs in one top bucket (its table of
	// the next 16 bits).
	withCDF.CDFPoints = 2000
	checkStreamEqualsSummary(t, reqs, withCDF)
	collectLimit = 1 << 20
	defer func(old int64) { passBudget = old }(passBudget)
	passBudget = 100
	withCDF.CDFPoints = 300
	s = checkStreamEqualsSummary(t, reqs, withCDF)
	if s.Passes < 6 {
		t.Errorf("%d passes with a budget of 100 values; no job waited", s.Passes)
	}
	passBudget = 16 << 20
	checkStreamEqualsSummary(t, nil, opts)

	// Peaks need every successful request's arrival, TTFT and E2E.
	var full []*trace.Request
	for _, r := range reqs {
		if r.Arrival.OK && r.E2ESec.OK {
			full = append(full, r)
		}
	}
	full[3].Status, full[4].Status, full[5].Status = trace.StatusTimeout, trace.StatusAborted, "weird"
	full[7].ITLUnit, full[8].ITLUnit, full[8].E2EBasis = trace.ITLChunk, trace.ITLToken, "last_token"
	full[8].OutputTokensSource = "server_usage"
	withSLO := opts
	withSLO.Goodput = SLO{TTFTms: trace.Some(200.0), TPOTms: trace.Some(100.0)}
	s = checkStreamEqualsSummary(t, full, withSLO)
	if s.Peak == nil || s.Peak.ConcurrentRequests == 0 || s.Goodput == nil || s.Goodput.Good == 0 || !s.Semantics.Mixed || s.TokensPerChunk == 0 {
		t.Errorf("a section is missing: peak %+v, goodput %+v, semantics %+v, tokens per chunk %v", s.Peak, s.Goodput, s.Semantics, s.TokensPerChunk)
	}
	// Far-apart arrivals: the peak bins go sparse.
	far := append([]*trace.Request(nil), full[:200]...)
	for i, r := range far {
		c := *r
		c.Arrival = trace.Some(trace.Time(int64(i) * int64(i) * 3e12))
		far[i] = &c
	}
	checkStreamEqualsSummary(t, far, withSLO)
	// A goodput SLO on a metric some request lacks.
	noTTFT := append([]*trace.Request(nil), full[:100]...)
	c := *noTTFT[40]
	c.TTFTSec = trace.Opt[float64]{}
	noTTFT[40] = &c
	s = checkStreamEqualsSummary(t, noTTFT, withSLO)
	if s.Goodput.Missing == "" || s.PeakMissing == "" {
		t.Errorf("goodput %+v, peak missing %q", s.Goodput, s.PeakMissing)
	}
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

// A StreamSummarizer whose first pass is fed by Add gives
// SummarizeStream's summary with one pass fewer over the source.
func TestStreamSummarizerAddThenFinish(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	reqs := randomRequests(rng, 5000)
	opts := StreamOptions{Percentiles: []float64{1, 50, 99}}
	run := trace.Run{Name: "x"}
	want, err := SummarizeStream(sliceSource(reqs), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	z := NewStreamSummarizer(run, opts)
	for _, r := range reqs {
		z.Add(r)
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

// SummarizeStreamGroups gives, per group, what SummarizeStream gives for
// the group's requests, in GroupBy's order, and the pooled summary.
func TestSummarizeStreamGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	reqs := randomRequests(rng, 6000)
	for i, r := range reqs {
		c := *r
		c.Worker = []string{"w2", "w0", "", "w1"}[i%4]
		c.Run = []string{"b", "a"}[i%2]
		reqs[i] = &c
	}
	runs := []trace.Run{{Name: "empty"}, {Name: "a", Source: "x"}}
	opts := StreamOptions{Percentiles: []float64{50, 90, 99}}
	pool := StreamOptions{Percentiles: []float64{90}, CDFPoints: 100}
	for _, key := range GroupKeys {
		groups, err := GroupBy(key, runs, reqs)
		if err != nil {
			t.Fatal(err)
		}
		sums, err := SummarizeStreamGroups(sliceSource(reqs), key, runs, opts, trace.Run{Name: "all"}, &pool)
		if err != nil {
			t.Fatal(err)
		}
		if len(sums) != len(groups)+1 {
			t.Fatalf("by %s: %d summaries for %d groups", key, len(sums), len(groups))
		}
		for i, g := range groups {
			checkSameSummary(t, sums[i], Summarize(g.Run, g.Requests), opts)
		}
		checkSameSummary(t, sums[len(groups)], Summarize(trace.Run{Name: "all"}, reqs), pool)
	}
}
