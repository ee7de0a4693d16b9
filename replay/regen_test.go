package replay

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

func gapStats(reqs Requests) (mean, cv float64) {
	var gaps []float64
	prev := 0.0
	for _, r := range reqs {
		a := r.Arrival.V.Seconds()
		gaps = append(gaps, a-prev)
		prev = a
	}
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	var v float64
	for _, g := range gaps {
		v += (g - mean) * (g - mean)
	}
	return mean, math.Sqrt(v/float64(len(gaps))) / mean
}

func TestRegenerate(t *testing.T) {
	t.Parallel()
	const n = 20000
	run := trace.Run{Name: "r", Engine: "vllm", Workload: &trace.Workload{
		Dataset: "random", InputLen: 1000, OutputLen: 100, RangeRatio: 0.5, RequestRate: 8, Burstiness: 1, NumPrompts: n}}
	reqs, mode, err := Regenerate(run, 1)
	if err != nil {
		t.Fatal(err)
	}
	if mode.Mode != ModeOpen || len(reqs) != n {
		t.Fatalf("mode %+v, %d requests", mode, len(reqs))
	}
	// vLLM: lengths uniform in [500, 1500] and [50, 150]: every bound
	// reached, means in the middle.
	lengths := func(reqs Requests, in0, in1, out0, out1 int64) {
		t.Helper()
		lo, hi, sum := int64(1<<62), int64(0), 0.0
		for _, r := range reqs {
			lo, hi, sum = min(lo, r.InputTokens.V), max(hi, r.InputTokens.V), sum+float64(r.InputTokens.V)
			if o := r.OutputTokens.V; o < out0 || o > out1 {
				t.Fatalf("output length %d", o)
			}
		}
		if lo != in0 || hi != in1 || math.Abs(sum/n-float64(in0+in1)/2) > 0.01*float64(in1) {
			t.Errorf("input lengths in [%d, %d], mean %.1f", lo, hi, sum/n)
		}
	}
	lengths(reqs, 500, 1500, 50, 150)
	// vLLM: the last request goes out at num_prompts/rate; Poisson gaps.
	if last := reqs[n-1].Arrival.V; last != trace.Time(n/8*time.Second) {
		t.Errorf("last arrival %v, want %v", last, n/8*time.Second)
	}
	if mean, cv := gapStats(reqs); math.Abs(mean-0.125) > 1e-6 || math.Abs(cv-1) > 0.05 {
		t.Errorf("poisson gaps: mean %g cv %g", mean, cv)
	}
	// Burstiness 4: gamma gaps of shape 4, coefficient of variation 1/2.
	run.Workload.Burstiness = 4
	reqs, _, _ = Regenerate(run, 1)
	if _, cv := gapStats(reqs); math.Abs(cv-0.5) > 0.03 {
		t.Errorf("burstiness 4: cv %g, want 0.5", cv)
	}
	// Burstiness below 1 is burstier than Poisson.
	run.Workload.Burstiness = 0.25
	reqs, _, _ = Regenerate(run, 1)
	if _, cv := gapStats(reqs); math.Abs(cv-2) > 0.2 {
		t.Errorf("burstiness 0.25: cv %g, want 2", cv)
	}
	// SGLang: exponential gaps, no rescaling. The client decides: a
	// vllm-bench file of an SGLang server used vLLM's generator.
	run.Engine, run.Source = "sglang", "vllm-bench"
	if again, _, _ := Regenerate(run, 1); again[n-1].Arrival.V != trace.Time(n/8*time.Second) {
		t.Error("vllm-bench run regenerated with SGLang's generator")
	}
	run.Engine, run.Source = "", "sglang-bench"
	reqs, _, _ = Regenerate(run, 1)
	lengths(reqs, 500, 1000, 50, 100) // SGLang: [max(1, len·ratio), len]
	if mean, cv := gapStats(reqs); math.Abs(mean-0.125) > 0.125*0.03 || math.Abs(cv-1) > 0.05 ||
		reqs[n-1].Arrival.V == trace.Time(n/8*time.Second) {
		t.Errorf("sglang gaps: mean %g cv %g", mean, cv)
	}
	// The same seed gives the same requests; another seed others.
	again, _, _ := Regenerate(run, 1)
	other, _, _ := Regenerate(run, 2)
	if dump(reqs) != dump(again) || dump(reqs) == dump(other) {
		t.Error("seeding")
	}
	// An infinite rate sends everything at once; with a max concurrency
	// it is a closed loop of that many clients, which replays.
	run.Workload.RequestRate = trace.Rate(math.Inf(1))
	run.Workload.Concurrency = 16
	run.Workload.NumPrompts = 200
	reqs, mode, err = Regenerate(run, 1)
	if err != nil || mode.Mode != ModeClosed || mode.Clients != 16 || reqs[199].Arrival.V != 0 {
		t.Fatalf("inf rate: %v %+v", err, mode)
	}
	st, err := Run(Config{Workload: mode}, linearCost{Base: ms, PerToken: time.Microsecond}, 10000, reqs, func(*trace.Request) error { return nil })
	if err != nil || st.Completed != 200 {
		t.Errorf("replay of the regenerated run: %v %+v", err, st)
	}
}

func TestRegenerateErrors(t *testing.T) {
	t.Parallel()
	w := func(f func(*trace.Workload)) trace.Run {
		wl := &trace.Workload{Dataset: "random", InputLen: 10, OutputLen: 10, RequestRate: 1, NumPrompts: 5}
		f(wl)
		return trace.Run{Name: "r", Workload: wl}
	}
	for _, c := range []struct {
		run  trace.Run
		want string
	}{
		{trace.Run{Name: "r"}, "no recorded workload"},
		{w(func(w *trace.Workload) { w.Dataset = "sharegpt" }), "only random datasets"},
		{w(func(w *trace.Workload) { w.NumPrompts = 0 }), "needs num_prompts"},
		{w(func(w *trace.Workload) { w.RangeRatio = 2 }), "range_ratio"},
		{w(func(w *trace.Workload) { w.Concurrency = 2 }), "not supported yet"},
		{w(func(w *trace.Workload) { w.RequestRate = 0 }), "not positive"},
	} {
		if _, _, err := Regenerate(c.run, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.run.Workload, err, c.want)
		}
	}
}
