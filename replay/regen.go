package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/opaltrace/opaltrace/internal/numpyrand"
	"github.com/opaltrace/opaltrace/trace"
)

// Regenerate rebuilds the requests of a benchmark run that recorded its
// workload arguments (run.Workload) but no per-request data, with the
// generator semantics of the benchmark client that ran it, from seed. The
// client is the run's source format (sglang-bench: SGLang's bench_serving;
// vllm-bench: vLLM's bench serve), or else the engine it served (whose
// own client is assumed):
//
//   - SGLang's bench_serving draws its own numbers again, bit for bit
//     (sglangBench): numpy's legacy generator seeded with its --seed
//     gives the prompt lengths, randint(max(⌊len·range_ratio⌋, 1),
//     len+1, num_prompts), then the output lengths, randint(
//     ⌊len·range_ratio⌋, len+1, num_prompts), then the gaps between
//     sends, exponential(1/rate) after each request (the first goes at
//     0). Its result file records no seed: seed 0 (the cluster's
//     default) stands for bench_serving's default --seed 1, any other
//     seed is taken as the --seed. An output length of 0 is replayed as
//     1: SGLang computes the prompt, whose step yields a token, and
//     finishes the request there;
//   - vLLM: lengths uniform over integers in [⌊len·(1−r)⌋, ⌈len·(1+r)⌉]
//     (bench serve since range_ratio became symmetric), at least 1 (vLLM
//     also takes the tokenizer's special tokens off the prompt; without
//     the tokenizer, not here); gamma gaps of shape burstiness (1:
//     Poisson), rescaled so that the last request is sent at
//     num_prompts/rate; an infinite rate sends everything at 0.
//
// The returned workload says how to send them: at an infinite rate with
// a max concurrency, C clients in a closed loop; otherwise the open loop.
// A finite rate capped by a concurrency is not supported yet (an error),
// nor are datasets other than random-style ones (their prompts would be
// needed). For vLLM the random numbers are this package's, not numpy's:
// the regenerated workload has the distribution of the original, not its
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
	n := w.NumPrompts
	if run.Source == "sglang-bench" || run.Source != "vllm-bench" && run.Engine == "sglang" {
		in, out, at := sglangBench(w, seed, inf)
		for i := range out {
			out[i] = max(out[i], 1)
		}
		return regenerated(run, in, out, at), mode, nil
	}
	if w.RangeRatio >= 1 {
		return nil, mode, fmt.Errorf("run %s: vLLM's range_ratio must be below 1 (got %v)", run.Name, w.RangeRatio)
	}
	rng := rand.New(rand.NewPCG(seed, 0x726567656e)) // "regen"
	in := uniformLengths(rng, n, w.InputLen, w.RangeRatio)
	out := uniformLengths(rng, n, w.OutputLen, w.RangeRatio)
	at := make([]float64, n)
	if !inf {
		rate := float64(w.RequestRate)
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
	return regenerated(run, in, out, at), mode, nil
}

// regenerated makes the requests of run with prompt and output lengths in
// and out, sent at[i] seconds after the start.
func regenerated(run trace.Run, in, out []int64, at []float64) Requests {
	reqs := make(Requests, len(in))
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
	return reqs
}

// sglangBench draws the prompt and output lengths (0 included) and the send times (in
// seconds; all 0 at an infinite rate) of a run of SGLang's bench_serving
// as it drew them (python/sglang/bench_serving.py: main seeds numpy
// with --seed, sample_random_requests draws both length arrays, and
// get_request sleeps numpy.random.exponential(1/rate) after each send;
// the ShareGPT text its prompts are cut from is shuffled by Python's
// random module, which leaves numpy's stream alone). Checked against the
// DataCrunch runs, whose recorded total input and output tokens these
// draws give exactly (TestSGLangBenchDraws).
func sglangBench(w *trace.Workload, seed uint64, inf bool) (in, out []int64, at []float64) {
	if seed == 0 {
		seed = sglangBenchSeed
	}
	g := numpyrand.NewLegacy(uint32(seed))
	n := w.NumPrompts
	in, out, at = make([]int64, n), make([]int64, n), make([]float64, n)
	inLo := max(int64(float64(w.InputLen)*w.RangeRatio), 1)
	for i := range in {
		in[i] = g.Randint(inLo, int64(w.InputLen)+1)
	}
	outLo := int64(float64(w.OutputLen) * w.RangeRatio)
	for i := range out {
		out[i] = g.Randint(outLo, int64(w.OutputLen)+1)
	}
	if !inf {
		scale := 1 / float64(w.RequestRate)
		for i := 1; i < n; i++ {
			at[i] = at[i-1] + g.Exponential(scale)
		}
	}
	return in, out, at
}

// sglangBenchSeed is bench_serving's default --seed.
const sglangBenchSeed = 1

// uniformLengths draws n lengths around l as vLLM's bench serve does: see
// Regenerate.
func uniformLengths(rng *rand.Rand, n, l int, ratio float64) []int64 {
	lo := max(1, int(math.Floor(float64(l)*(1-ratio))))
	l = int(math.Ceil(float64(l) * (1 + ratio)))
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
