package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// Regenerate rebuilds the requests of a benchmark run that recorded its
// workload arguments (run.Workload) but no per-request data, with the
// generator semantics of the benchmark client that ran it, from seed. The
// client is the run's source format (sglang-bench: SGLang's bench_serving;
// vllm-bench: vLLM's bench serve), or else the engine it served (whose
// own client is assumed):
//
//   - lengths: the random dataset's, prompt and output each uniform over
//     integers: SGLang in [max(1, ⌊len·range_ratio⌋), len]; vLLM (bench
//     serve since range_ratio became symmetric) in [⌊len·(1−r)⌋,
//     ⌈len·(1+r)⌉], at least 1 (vLLM also takes the tokenizer's special
//     tokens off the prompt; without the tokenizer, not here);
//   - arrivals: SGLang's bench_serving sends with
//     exponential gaps at the request rate; vLLM's bench serve draws gamma
//     gaps of shape burstiness (1: Poisson) and rescales them so that the
//     last request is sent at num_prompts/rate; an infinite rate sends
//     everything at 0.
//
// The returned workload says how to send them: at an infinite rate with
// a max concurrency, C clients in a closed loop; otherwise the open loop.
// A finite rate capped by a concurrency is not supported yet (an error),
// nor are datasets other than random-style ones (their prompts would be
// needed). The random numbers are this package's, not numpy's: the
// regenerated workload has the distribution of the original, not its
// draws.
func Regenerate(run trace.Run, seed uint64) (Requests, WorkloadConfig, error) {
	w := run.Workload
	var mode WorkloadConfig
	switch {
	case w == nil:
		return nil, mode, fmt.Errorf("run %s: no recorded workload to regenerate", run.Name)
	case w.Dataset != "" && w.Dataset != "random" && w.Dataset != "random-ids":
		return nil, mode, fmt.Errorf("run %s: dataset %q: only random datasets can be regenerated from their arguments", run.Name, w.Dataset)
	case w.NumPrompts <= 0 || w.InputLen <= 0 || w.OutputLen <= 0:
		return nil, mode, fmt.Errorf("run %s: workload needs num_prompts, input_len and output_len (got %d, %d, %d)", run.Name, w.NumPrompts, w.InputLen, w.OutputLen)
	case !(w.RangeRatio >= 0 && w.RangeRatio <= 1):
		return nil, mode, fmt.Errorf("run %s: range_ratio %v is not in [0, 1]", run.Name, w.RangeRatio)
	case !(w.RequestRate > 0):
		return nil, mode, fmt.Errorf("run %s: request rate %v is not positive", run.Name, float64(w.RequestRate))
	}
	inf := math.IsInf(float64(w.RequestRate), 1)
	switch {
	case inf && w.Concurrency > 0:
		mode = WorkloadConfig{Mode: ModeClosed, Clients: w.Concurrency}
	case w.Concurrency > 0 && w.Concurrency < w.NumPrompts:
		return nil, mode, fmt.Errorf("run %s: a request rate capped by max concurrency %d is not supported yet", run.Name, w.Concurrency)
	default:
		mode = WorkloadConfig{Mode: ModeOpen, TimeScale: 1}
	}
	rng := rand.New(rand.NewPCG(seed, 0x726567656e)) // "regen"
	n := w.NumPrompts
	sglang := run.Source == "sglang-bench" || run.Source != "vllm-bench" && run.Engine == "sglang"
	if !sglang && w.RangeRatio >= 1 {
		return nil, mode, fmt.Errorf("run %s: vLLM's range_ratio must be below 1 (got %v)", run.Name, w.RangeRatio)
	}
	in := uniformLengths(rng, n, w.InputLen, w.RangeRatio, sglang)
	out := uniformLengths(rng, n, w.OutputLen, w.RangeRatio, sglang)
	at := make([]float64, n)
	if !inf {
		rate := float64(w.RequestRate)
		if sglang {
			var t float64
			for i := range at {
				t += rng.ExpFloat64() / rate
				at[i] = t
			}
		} else {
			b := w.Burstiness
			if b <= 0 {
				b = 1
			}
			var t float64
			for i := range at {
				t += gamma(rng, b) / (rate * b)
				at[i] = t
			}
			// vLLM rescales the delays so the last request goes out at
			// num_prompts/rate, whatever the draws.
			if last := at[n-1]; last > 0 {
				scale := float64(n) / rate / last
				for i := range at {
					at[i] *= scale
				}
			}
		}
	}
	reqs := make(Requests, n)
	for i := range reqs {
		reqs[i] = &trace.Request{
			RequestID:    run.Name + "/" + strconv.Itoa(i),
			Run:          run.Name,
			Stage:        run.Stage,
			Source:       "regenerated",
			Model:        run.Model,
			Status:       trace.StatusOK,
			InputTokens:  trace.Some(in[i]),
			OutputTokens: trace.Some(out[i]),
			Arrival:      trace.Some(trace.TimeFromSeconds(at[i])),
		}
	}
	return reqs, mode, nil
}

// uniformLengths draws n lengths around l as SGLang (sglang) or vLLM
// does: see Regenerate.
func uniformLengths(rng *rand.Rand, n, l int, ratio float64, sglang bool) []int64 {
	lo := max(1, int(float64(l)*ratio))
	if !sglang {
		lo = max(1, int(math.Floor(float64(l)*(1-ratio))))
		l = int(math.Ceil(float64(l) * (1 + ratio)))
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(lo + rng.IntN(l-lo+1))
	}
	return out
}

// gamma draws from Gamma(shape, 1) by Marsaglia and Tsang's method
// (shape < 1 through the boost Gamma(shape+1)·U^(1/shape)).
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gamma(rng, shape+1) * math.Pow(rng.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
