package replay

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

func lengthStats(reqs Requests, out bool) (mean, sd float64, lo, hi int64) {
	lo, hi = math.MaxInt64, math.MinInt64
	var xs []float64
	for _, r := range reqs {
		v := r.InputTokens.V
		if out {
			v = r.OutputTokens.V
		}
		lo, hi = min(lo, v), max(hi, v)
		xs = append(xs, float64(v))
		mean += float64(v)
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs))), lo, hi
}

// The defaults config's stage 0: 100 UniformReqRate requests at 2/s,
// prompts uniform in [32, 16384], outputs in [32, 128].
func TestOpalDefaultsStage0(t *testing.T) {
	t.Parallel()
	w, err := LoadOpalWorkload(shareddata.Path(t, "formats/opal/defaults/sim_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Stages) != 2 || w.Stages[0].Type != "UniformReqRate" || w.Stages[1].Type != "trace" || w.Seed != 42 || w.BlockSize != 16 {
		t.Fatalf("parsed %+v", w)
	}
	s := w.Stages[0]
	reqs, err := w.Requests(s, w.Seed, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 100 {
		t.Fatalf("%d requests, want 100", len(reqs))
	}
	for i, r := range reqs {
		// Opal sends one, then sleeps 1/rate: the last at 49.5 s (its log: generation stops at 50.0 s).
		if got, want := r.Arrival.V.Seconds(), float64(i)*0.5; math.Abs(got-want) > 1e-9 {
			t.Fatalf("request %d arrives at %v, want %v", i, got, want)
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		if r.Stage != "stage_0" || r.Run != "r" {
			t.Fatalf("request %d: run %q stage %q", i, r.Run, r.Stage)
		}
	}
	// 100 draws of U{32..16384}: σ/√100 = 472 tokens; Opal's own 100
	// (stage_0_opal_stats.json) average 8716.6, ours must be as close.
	mean, _, lo, hi := lengthStats(reqs, false)
	if lo < 32 || hi > 16384 || math.Abs(mean-8208) > 3*472 {
		t.Errorf("prompts: mean %.1f in [%d, %d]", mean, lo, hi)
	}
	mean, _, lo, hi = lengthStats(reqs, true)
	if lo < 32 || hi > 128 || math.Abs(mean-80) > 3*2.8 {
		t.Errorf("outputs: mean %.1f in [%d, %d]", mean, lo, hi)
	}
	// The same stage with many requests: mean within 1% and the uniform's
	// deviation, both bounds reached.
	s.TotalRequests = 50000
	reqs, err = w.Requests(s, w.Seed, "r")
	if err != nil {
		t.Fatal(err)
	}
	mean, sd, lo, hi := lengthStats(reqs, false)
	wantSD := math.Sqrt((math.Pow(16384-32+1, 2) - 1) / 12)
	if lo != 32 || hi != 16384 || math.Abs(mean/8208-1) > 0.01 || math.Abs(sd/wantSD-1) > 0.02 {
		t.Errorf("50k prompts: mean %.1f sd %.1f (want 8208, %.1f) in [%d, %d]", mean, sd, wantSD, lo, hi)
	}
	mean, _, lo, hi = lengthStats(reqs, true)
	if lo != 32 || hi != 128 || math.Abs(mean/80-1) > 0.01 {
		t.Errorf("50k outputs: mean %.2f in [%d, %d]", mean, lo, hi)
	}
	// Stage 1 names traces/hello.jsonl, which is not beside the config.
	if _, err := w.Requests(w.Stages[1], w.Seed, "r"); err == nil || !strings.Contains(err.Error(), "sim_config.json: workload.stages[1].workload_params.trace_file: open ") {
		t.Errorf("missing trace file: %v", err)
	}
}

func opalConfig(stages ...string) []byte {
	return []byte(`{"simulation": {"seed": 7, "simulation_time": -1}, "worker": {"vllm_params": {"block_size": 16}},
		"workload": {"stages": [` + strings.Join(stages, ",") + `]}}`)
}

const uniformStage = `{"type": "UniformReqRate", "workload_params": {"request_rate": 4, "total_requests": 200,
	"prompt_size_min": 100, "prompt_size_max": 3000, "default_prefix_length": 1000,
	"output_tokens_min": 1, "output_tokens_max": 50, "time_duration_sec": -1}}`

func mustOpal(t *testing.T, data []byte) *OpalWorkload {
	t.Helper()
	w, err := ParseOpalWorkload(data, "cfg.json")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestOpalSharedPrefix(t *testing.T) {
	t.Parallel()
	w := mustOpal(t, opalConfig(uniformStage))
	reqs, err := w.Requests(w.Stages[0], 1, "r")
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int64]int{}
	long := 0
	for i, r := range reqs {
		n := r.InputTokens.V
		if int64(len(r.HashIDs)) != (n+15)/16 || r.BlockSize.V != 16 {
			t.Fatalf("request %d: %d tokens, %d hash ids of %d", i, n, len(r.HashIDs), r.BlockSize.V)
		}
		// 1000 prefix tokens: 62 full blocks, shared by every request
		// that has them; every other block is the request's own.
		for j, id := range r.HashIDs {
			shared := j < 62 && int64(j+1)*16 <= n
			if shared {
				if id != int64(j) {
					t.Fatalf("request %d block %d: id %d, want shared %d", i, j, id, j)
				}
				continue
			}
			if o, seen := owner[id]; seen {
				t.Fatalf("private id %d of request %d also in request %d", id, i, o)
			}
			owner[id] = i
		}
		if n >= 1000 {
			long++
		}
	}
	if long < 100 {
		t.Fatalf("only %d prompts reach the prefix", long)
	}

	// Replayed with prefix caching, every request after the first that
	// reaches the prefix hits its 62 blocks (992 tokens).
	cfg := DefaultConfig()
	cfg.Scheduler.BlockSize = 16
	byID, _, _ := replay(t, cfg, linearCost{Base: ms, PerToken: ms / 1000}, 1<<16, reqs)
	hits := 0
	for _, r := range reqs[1:] {
		if o := byID[r.RequestID]; r.InputTokens.V > 1000 && o.CachedTokens.V >= 992 {
			hits++
		}
	}
	if hits < long-2 {
		t.Errorf("%d of %d long prompts hit the shared prefix", hits, long)
	}
}

func TestOpalDeterministic(t *testing.T) {
	t.Parallel()
	w := mustOpal(t, opalConfig(uniformStage, strings.Replace(strings.Replace(uniformStage,
		"UniformReqRate", "ExponentialReqRate", 1), `"request_rate": 4`, `"request_rate": 4, "jitter": 1`, 1)))
	for _, s := range w.Stages {
		a, err := w.Requests(s, 5, "r")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := w.Requests(s, 5, "r")
		c, _ := w.Requests(s, 6, "r")
		if !reflect.DeepEqual(a, b) {
			t.Errorf("stage %d: same seed, different requests", s.Index)
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("stage %d: seeds 5 and 6 give the same requests", s.Index)
		}
	}
	a, _ := w.Requests(w.Stages[0], 5, "r")
	b, _ := w.Requests(w.Stages[1], 5, "r")
	if a[0].InputTokens == b[0].InputTokens && a[1].InputTokens == b[1].InputTokens {
		t.Errorf("stages 0 and 1 draw the same lengths")
	}
}

func TestOpalExponentialAndDuration(t *testing.T) {
	t.Parallel()
	st := func(jitter string) string {
		return `{"type": "exponentialreqrate", "workload_params": {"request_rate": 10, "jitter": ` + jitter + `,
			"time_duration_sec": 2000, "prompt_size_min": 1, "prompt_size_max": 1,
			"output_tokens_min": 1, "output_tokens_max": 1}}`
	}
	w := mustOpal(t, opalConfig(st("1"), st("0"), st(`"0.5"`)))
	for i, wantCV := range []float64{1, 0, 0.5} {
		reqs, err := w.Requests(w.Stages[i], 3, "r")
		if err != nil {
			t.Fatal(err)
		}
		mean, cv := gapStats(reqs[1:])
		// ~20000 requests in 2000 s: stops at the duration.
		if last := reqs[len(reqs)-1].Arrival.V.Seconds(); last >= 2000 || last < 1999 {
			t.Errorf("jitter stage %d: last arrival %v", i, last)
		}
		if math.Abs(mean*10-1) > 0.02 || math.Abs(cv-wantCV) > 0.03 {
			t.Errorf("stage %d: gap mean %.4f cv %.3f, want 0.1, %v", i, mean, cv, wantCV)
		}
	}
}

func TestOpalNormalLengths(t *testing.T) {
	t.Parallel()
	w := mustOpal(t, opalConfig(`{"type": "UniformReqRate", "workload_params": {"request_rate": 1, "total_requests": 40000,
		"prompt_size_min": 10, "prompt_size_max": 4000, "prompt_size_mean": 2000, "prompt_size_stdev": 500,
		"output_tokens_min": 1, "output_tokens_max": 100, "output_tokens_mean": 20, "output_tokens_stdev": 40}}`))
	reqs, err := w.Requests(w.Stages[0], 1, "r")
	if err != nil {
		t.Fatal(err)
	}
	mean, sd, lo, hi := lengthStats(reqs, false)
	if math.Abs(mean/2000-1) > 0.01 || math.Abs(sd/500-1) > 0.03 || lo < 10 || hi > 4000 {
		t.Errorf("prompts: mean %.1f sd %.1f in [%d, %d]", mean, sd, lo, hi)
	}
	// Output N(20, 40) clamped to [1, 100]: the draws
	// rounded to 1 or less (z < −18.5/40: 32.19%) and become 1.
	_, _, lo, hi = lengthStats(reqs, true)
	ones := 0
	for _, r := range reqs {
		if r.OutputTokens.V == 1 {
			ones++
		}
	}
	if lo != 1 || hi != 100 || math.Abs(float64(ones)/40000-0.3219) > 0.01 {
		t.Errorf("outputs in [%d, %d], %d clamped to 1", lo, hi, ones)
	}
}

func TestOpalTraceStage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lines := `{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1, 2, 3, 4, 5]}
{"timestamp": 1500, "input_length": 2, "output_length": 1, "hash_ids": [1, 9]}
{"timestamp": 2500, "input_length": 2, "output_length": 1}
`
	if err := os.MkdirAll(filepath.Join(dir, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t", "x.jsonl"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sim_config.json")
	if err := os.WriteFile(cfg, opalConfig(`{"type": "trace", "workload_params": {"total_requests": 2,
		"chunk_size": 1, "multiplier_to_sec": 0.001, "trace_file": "t/x.jsonl"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := LoadOpalWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := w.Requests(w.Stages[0], 0, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[1].Arrival.V.Seconds() != 1.5 || reqs[1].BlockSize.V != 1 ||
		!reflect.DeepEqual(reqs[1].HashIDs, []int64{1, 9}) || reqs[0].OutputTokens.V != 3 {
		t.Fatalf("got %s", dump(reqs))
	}
	if err := os.WriteFile(filepath.Join(dir, "t", "x.jsonl"), []byte(lines+`{"timestamp": 3, "output_length": 1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := w.Stages[0]
	s.TotalRequests = -1
	if _, err := w.Requests(s, 0, "r"); err == nil || !strings.HasSuffix(err.Error(), "x.jsonl:4: input_length: missing or below 1") {
		t.Errorf("bad row: %v", err)
	}
}

func TestOpalBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cfg, want string }{
		{`[1]`, "cfg.json: json: cannot unmarshal"},
		{`{}`, "cfg.json: workload: missing"},
		{`{"workload": {"stages": []}}`, "cfg.json: workload.stages: empty"},
		{string(opalConfig(`{"type": "Poisson", "workload_params": {}}`)), `cfg.json: workload.stages[0].type: unknown stage type "Poisson"`},
		{string(opalConfig(strings.Replace(uniformStage, `"request_rate": 4`, `"request_rate": 0`, 1))), "cfg.json: workload.stages[0].workload_params.request_rate: not a positive finite rate (0)"},
		{string(opalConfig(strings.Replace(uniformStage, `"request_rate": 4,`, ``, 1))), "cfg.json: workload.stages[0].workload_params.request_rate: missing"},
		{string(opalConfig(strings.Replace(uniformStage, `"prompt_size_max": 3000`, `"prompt_size_max": 50`, 1))), "cfg.json: workload.stages[0].workload_params.prompt_size_max: 50 is below prompt_size_min 100"},
		{string(opalConfig(strings.Replace(uniformStage, `"output_tokens_min": 1`, `"output_tokens_min": "x"`, 1))), `workload_params.output_tokens_min: not a number ("x")`},
		{string(opalConfig(strings.Replace(uniformStage, `"total_requests": 200`, `"total_requests": -1`, 1))), "cfg.json: workload.stages[0].workload_params: neither total_requests"},
		{string(opalConfig(`{"type": "trace", "workload_params": {"chunk_size": 0, "trace_file": "a"}}`)), "cfg.json: workload.stages[0].workload_params.chunk_size: not positive (0)"},
		{string(opalConfig(strings.Replace(uniformStage, `"prompt_size_max": 3000`, `"prompt_size_max": 1e30`, 1))), "workload_params.prompt_size_max: "},
		{string(opalConfig(`{"type": "trace", "workload_params": {}}`)), "cfg.json: workload.stages[0].workload_params.trace_file: missing"},
	} {
		_, err := ParseOpalWorkload([]byte(c.cfg), "cfg.json")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// An old config whose workload is the one stage.
func TestOpalSingleStage(t *testing.T) {
	t.Parallel()
	var m map[string]any
	_ = json.Unmarshal([]byte(uniformStage), &m)
	b, _ := json.Marshal(map[string]any{"workload": m})
	w := mustOpal(t, b)
	if len(w.Stages) != 1 || w.Stages[0].Rate != 4 || w.Stages[0].PrefixTokens != 1000 {
		t.Fatalf("%+v", w.Stages)
	}
}

func FuzzParseOpalWorkload(f *testing.F) {
	f.Add(opalConfig(uniformStage))
	f.Add(opalConfig(`{"type": "trace", "workload_params": {"trace_file": "x", "chunk_size": "3"}}`))
	f.Add([]byte(`{"workload": {"type": "ExponentialReqRate"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ParseOpalWorkload(b, "f.json")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.json: ") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, s := range w.Stages {
			if s.Type == "trace" {
				continue
			}
			s.TotalRequests = min(s.TotalRequests, 50)
			if s.TotalRequests <= 0 {
				s.TotalRequests = 50
			}
			reqs, err := w.Requests(s, 1, "r")
			if err != nil {
				continue
			}
			for _, r := range reqs {
				if r.InputTokens.V < s.Prompt.Min || r.InputTokens.V > s.Prompt.Max || r.Validate() != nil {
					t.Fatalf("bad request %+v from %+v", r, s)
				}
			}
		}
	})
}
