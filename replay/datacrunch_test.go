package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// readSGLangBench reads an SGLang bench_serving result file minimally (one
// JSON object a line, Python's Infinity for an infinite rate) into runs
// with their workload arguments and reported summary, so that this
// package's tests do not depend on package ingest. Runs are named
// FILE#LINE.
func readSGLangBench(tb testing.TB, path string) []trace.Run {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var runs []trace.Run
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		line = strings.ReplaceAll(line, ": Infinity", `: "inf"`)
		var row struct {
			Dataset     string     `json:"dataset_name"`
			Rate        trace.Rate `json:"request_rate"`
			Concurrency *int       `json:"max_concurrency"`
			InputLen    int        `json:"random_input_len"`
			OutputLen   int        `json:"random_output_len"`
			RangeRatio  float64    `json:"random_range_ratio"`
			NumPrompts  int        `json:"num_prompts"`
			Completed   int        `json:"completed"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			tb.Fatalf("%s:%d: %v", path, i+1, err)
		}
		w := &trace.Workload{Dataset: row.Dataset, InputLen: row.InputLen, OutputLen: row.OutputLen,
			RangeRatio: row.RangeRatio, RequestRate: row.Rate, NumPrompts: row.NumPrompts}
		if w.NumPrompts == 0 {
			w.NumPrompts = row.Completed // the file has no failures to add
		}
		if row.Concurrency != nil {
			w.Concurrency = *row.Concurrency
		}
		runs = append(runs, trace.Run{Name: filepath.Base(path) + "#" + strconv.Itoa(i+1), Source: "sglang-bench",
			Engine: "sglang", Workload: w, Reported: json.RawMessage(line)})
	}
	return runs
}

// medianOf is numpy's median: the mean of the two middle values of an
// even count.
func medianOf(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TestDataCrunchPinnedNotJudged regenerates every DataCrunch Llama-3.3-70B
// SGLang benchmark run (summary only: its arguments and its reported
// numbers) from its recorded workload, with the lengths and send times
// bench_serving drew (seed 0: its default --seed 1), replays it on one
// simulated H200 ×4 (TP4) worker with the default, uncalibrated roofline
// cost model and the KV pool SGLang's default mem_fraction_static gives, and
// records observed against simulated median TTFT, median ITL and mean E2E
// with the relative error. The simulated worker runs SGLang's scheduler
// with the radix cache off, as the runs had --disable-radix-cache, the
// requests' ignore_eos (bench_serving's default) and SGLang's defaults
// otherwise (the overlap scheduler, max_running_requests from the pool and
// the model's context length); ShareGPT runs cannot be regenerated from
// their arguments and are listed as such.
//
// Note: this test pins numbers it does not judge. The golden file makes
// any change of the simulated numbers visible in review, but no error is
// checked against a bound: the uncalibrated roofline is off by −84 % to
// +70 % here (median ITL of online#4 and offline#6), too far for any
// tolerance that would mean something, and a bound chosen to pass would be
// tuning. Whether the replay is faithful is measured elsewhere
// (calibration against measured runs), not asserted here.
func TestDataCrunchPinnedNotJudged(t *testing.T) {
	t.Parallel()
	files := []string{
		shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_online_output.jsonl"),
		shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_offline_output.jsonl"),
	}
	_, file, _, _ := runtime.Caller(0)
	llm, err := model.LoadConfig(filepath.Join(filepath.Dir(file), "..", "samples", "models", "llama-3.3-70b", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	hw, err := model.HardwareByName("h200")
	if err != nil {
		t.Fatal(err)
	}
	dep, err := model.NewDeployment(hw, llm, 4)
	if err != nil {
		t.Fatal(err)
	}
	frac := model.SGLangMemFractionStatic(4)
	kv, err := dep.SGLangKVCacheTokens(frac)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	var b strings.Builder
	fmt.Fprintf(&b, "# DataCrunch Llama-3.3-70B on H200 TP4 (SGLang, --disable-radix-cache): observed vs simulated\n")
	fmt.Fprintf(&b, "# simulated: roofline %s, %d KV tokens (SGLang's mem_fraction_static %g at TP4), SGLang scheduler (radix cache off, overlap on, ignore_eos requests, SGLang's defaults), bench_serving's draws (seed 1)\n", llm.Name, kv, frac)
	fmt.Fprintf(&b, "# pinned, not judged: the uncalibrated errors are recorded so that a change shows; no bound is checked\n")
	fmt.Fprintf(&b, "# %-44s %28s %28s %28s\n", "run (file#line)", "median TTFT ms (obs sim err)", "median ITL ms (obs sim err)", "mean E2E ms (obs sim err)")
	for _, path := range files {
		for _, run := range readSGLangBench(t, path) {
			name := run.Name
			reqs, mode, err := Regenerate(run, 0)
			if err != nil {
				fmt.Fprintf(&b, "%-46s not regenerated: %v\n", name, strings.TrimPrefix(err.Error(), "run "+run.Name+": "))
				continue
			}
			var rep struct {
				TTFT float64 `json:"median_ttft_ms"`
				ITL  float64 `json:"median_itl_ms"`
				E2E  float64 `json:"mean_e2e_latency_ms"`
			}
			if err := json.Unmarshal(run.Reported, &rep); err != nil {
				t.Fatalf("%s: reported summary: %v", name, err)
			}
			cfg := Config{Workload: mode, Scheduler: SchedulerConfig{
				Engine: EngineSGLang, EnablePrefixCaching: &off,
				SGLangConfig: SGLangConfig{DisableRadixCache: true, OverlapSchedule: true, IgnoreEOS: true, ContextLength: llm.MaxPositionEmbeddings},
			}}
			var ttft, itl []float64
			var e2e float64
			st, err := Run(cfg, dep, kv/16, reqs, func(o *trace.Request) error {
				if o.Status != trace.StatusOK {
					return fmt.Errorf("%s: %s", o.RequestID, o.Error)
				}
				ttft = append(ttft, o.TTFTSec.V*1000)
				for _, g := range o.ITLSec {
					itl = append(itl, g*1000)
				}
				e2e += o.E2ESec.V * 1000
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sim := [3]float64{medianOf(ttft), medianOf(itl), e2e / float64(st.Completed)}
			obs := [3]float64{rep.TTFT, rep.ITL, rep.E2E}
			fmt.Fprintf(&b, "%-46s", name)
			for i := range sim {
				fmt.Fprintf(&b, " %9.1f %9.1f %+7.1f%%", obs[i], sim[i], 100*(sim[i]-obs[i])/obs[i])
			}
			b.WriteByte('\n')
		}
	}
	t.Log("\n" + b.String())
	golden.Check(t, "testdata/datacrunch.golden", []byte(b.String()))
}

// TestSGLangBenchDraws checks that Regenerate draws what SGLang's
// bench_serving drew: for every random-dataset DataCrunch run, the prompt
// and output lengths sglangBench draws add up exactly to the run's
// recorded total_input_tokens and total_output_tokens (the client sums
// the lengths it asked for), and the last send falls before the run's
// recorded duration ended.
func TestSGLangBenchDraws(t *testing.T) {
	t.Parallel()
	n := 0
	for _, f := range []string{"online", "offline"} {
		path := shareddata.Path(t, "formats/sglang_bench_serving/datacrunch-research_h200-benchmarks_llama_3_3_70b_"+f+"_output.jsonl")
		for _, run := range readSGLangBench(t, path) {
			if run.Workload.Dataset != "random" {
				continue
			}
			var rep struct {
				In       int64   `json:"total_input_tokens"`
				Out      int64   `json:"total_output_tokens"`
				Duration float64 `json:"duration"`
			}
			if err := json.Unmarshal(run.Reported, &rep); err != nil {
				t.Fatal(err)
			}
			in, out, at := sglangBench(run.Workload, 0, math.IsInf(float64(run.Workload.RequestRate), 1))
			var sumIn, sumOut int64
			for i := range in {
				sumIn += in[i]
				sumOut += out[i]
			}
			if sumIn != rep.In || sumOut != rep.Out || at[len(at)-1] >= rep.Duration {
				t.Errorf("%s: drew %d input and %d output tokens, last send at %.1f s; the run recorded %d, %d and a %.1f s duration",
					run.Name, sumIn, sumOut, at[len(at)-1], rep.In, rep.Out, rep.Duration)
			}
			t.Logf("%s: last send %.1f s, duration %.1f s", run.Name, at[len(at)-1], rep.Duration)
			n++
		}
	}
	if n != 11 {
		t.Errorf("%d random runs checked, want 11", n)
	}
}
