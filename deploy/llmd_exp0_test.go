package deploy

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

var llmdTable = flag.Bool("llmdtable", false, "replay llm-d exp-0's LMBenchmark ShareGPT workload on its plain-vLLM deployment and write testdata/llmd_exp0_*.md (uncalibrated, and at the surajssd A100 fit)")

// surajssdFit are the coefficients scripts/fidelity's surajssd section
// fits by replay in the loop (Llama-3.3-70B, 8 × A100-SXM4-40GB TP 8, vLLM
// 0.8.3, fitted on qps 1 and 4 with --fit +serial_fraction; the README's
// fidelity section as regenerated on 1aa732e): another A100 deployment of
// a Llama-3 70B under vLLM, for llm-d exp-0's 2 × A100-SXM4-80GB TP 2,
// which no fit has seen. attention_mfu is tied to mfu there, as here.
var surajssdFit = map[string]float64{
	calibrate.CoefMFU:             0.4968,
	calibrate.CoefAttentionMFU:    0.4968,
	calibrate.CoefBandwidthEff:    0.4559,
	calibrate.CoefRequestOverhead: 0.00907,
	calibrate.CoefSerialFraction:  0.4203,
	calibrate.CoefStepOverhead:    0.0003002,
}

const llmdDir = "measurements/llmd_exp0_a100_tp2_llama70b"

// lmbenchEntry is one element of LMBenchmark's sharegpt run.json or
// warmup.json.
type lmbenchEntry struct {
	Input        string `json:"input"`
	OutputLength int64  `json:"output_length"`
}

func readLMBenchJSON(t *testing.T, name string) []lmbenchEntry {
	t.Helper()
	b, err := os.ReadFile(shareddata.Path(t, llmdDir+"/workload_LMBenchmark_sharegpt/"+name))
	if err != nil {
		t.Fatal(err)
	}
	var out []lmbenchEntry
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// llama31ChatHead is what vLLM's default Llama 3.1 chat template puts
// before a lone user message (no system message given): the same text
// starts every prompt, so its blocks are shared by all of them.
const llama31ChatHead = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"

// textHashIDs names the prefix blocks of a prompt of tokens tokens whose
// text is text, without a tokenizer: token i is taken to span bytes
// [i·r, (i+1)·r) of the text (r bytes a token, fixed for the whole
// workload, so a text that is a prefix of another maps to the same
// blocks), and block k's id chains the previous id with the bytes of
// its tokens (FNV-64a), so equal ids mean equal prefixes. A block that
// would reach past the text's end (the template's closing tokens, or r
// above the prompt's real ratio) gets an id of its own request, seq.
func textHashIDs(text string, tokens, block int64, r float64, seq int) []int64 {
	ids := make([]int64, tokens/block)
	var prev uint64
	for k := range ids {
		end := int(float64(int64(k+1)*block) * r)
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], prev)
		h.Write(b[:])
		if end <= len(text) {
			h.Write([]byte(text[int(float64(int64(k)*block)*r):end]))
		} else {
			fmt.Fprintf(h, "\x00tail of request %d block %d", seq, k)
		}
		prev = h.Sum64()
		ids[k] = int64(prev)
	}
	return ids
}

// TestTextHashIDsPrefix checks textHashIDs: a prompt whose text extends
// another's shares every block of it that lies within the shorter text, a
// text that differs in its first byte shares none, and blocks past the
// text are the request's own.
func TestTextHashIDsPrefix(t *testing.T) {
	a := strings.Repeat("user asks; model answers. ", 40)       // 1,040 bytes
	ab := a + strings.Repeat("and a new question follows. ", 4) // 112 bytes more: 288 tokens, 18 blocks
	const r = 4.0
	ida := textHashIDs(a, 260/16*16, 16, r, 0) // 16 blocks, 1,024 bytes
	idab := textHashIDs(ab, int64(len(ab))/4, 16, r, 1)
	for k := range ida {
		if ida[k] != idab[k] {
			t.Fatalf("block %d of the shorter prompt not shared", k)
		}
	}
	if len(idab) != 18 {
		t.Fatalf("longer prompt: %d blocks", len(idab))
	}
	other := textHashIDs("U"+a[1:], 260/16*16, 16, r, 2)
	for k := range other {
		if other[k] == ida[k] {
			t.Fatalf("block %d shared by texts that differ in the first byte", k)
		}
	}
	// 20 blocks at 4 bytes a token need 1,280 bytes: blocks 16..19 are past
	// the text, and two requests with the same text differ there only.
	x, y := textHashIDs(a, 320, 16, r, 3), textHashIDs(a, 320, 16, r, 4)
	for k := range x {
		if (x[k] == y[k]) != (k < 16) {
			t.Fatalf("block %d: shared %v", k, x[k] == y[k])
		}
	}
}

// TestLLMDExp0Table replays llm-d exp-0's plain-vLLM runs
// (../shared/data/measurements/llmd_exp0_a100_tp2_llama70b/vllm-70b: one
// server of 2 × A100-SXM4-80GB, TP 2, Llama-3.1-70B-Instruct, vLLM V1
// defaults with prefix caching and chunked prefill, max_num_batched_tokens
// 8192, max_num_seqs 256, gpu_memory_utilization 0.95) from their
// workload, uncalibrated, and writes observed against simulated TTFT per
// QPS to testdata/llmd_exp0_vllm70b.md (run with -llmdtable).
//
// The workload is LMBenchmark's sharegpt/run.sh as SOURCES.md gives it,
// per QPS: warmup.json's 55 requests sent at spacing 1/QPS and waited
// for, 10 s pause, then run.json's 252 requests at spacing 1/QPS. Each
// prompt is str(float(QPS)) + " " + input (Python's str of the float
// the script parsed: "1.0" for QPS 1) as one user message. Prompt and
// output lengths are the run's recorded server counts (prompt_tokens,
// generation_tokens: the simulator cannot know where the model stopped
// at EOS); the warm-up's, not recorded, are the text at the run's bytes
// per token and output_length. Hash ids come from the text
// (textHashIDs) with 16-token blocks, vLLM's; bytes per token r is the
// run's total prompt bytes (chat head included) over its total
// prompt_tokens, the one tokenizer-free approximation used.
//
// The baseline-llm-d build (baseline-llm-d-70b: llm-d-dev 0.0.4, a vLLM
// build with LMCache installed but not enabled, on the same server and
// flags) is functionally plain vLLM, so the same replay is compared with
// its runs too (testdata/llmd_exp0_baseline_llmd70b.md); the two builds'
// measured TTFTs part from 1 QPS (SOURCES.md: 9.2 s and 5.4 s mean at
// 1.34 QPS), which the replay, knowing no build, cannot tell apart: the
// prompt and output lengths, taken from each build's runs, are all that
// differs.
//
// Each build is also replayed with the step model and the client's
// per-request overhead at surajssdFit (testdata/llmd_exp0_*_surajssd.md):
// held out across deployments, as a user with one calibrated A100 sweep
// would predict another. The fractions of peak carry from the 40 GB to the
// 80 GB A100 (the same SM, 312 TFLOP/s bf16; the replay prices each at
// its own memory bandwidth, 1.555 and 2.039 TB/s), from TP 8 to TP 2 (the
// collectives priced by the step model), and from vLLM 0.8.3 to the
// version exp-0 ran (not recorded).
func TestLLMDExp0Table(t *testing.T) {
	for _, b := range []struct {
		dir, golden, title string
		coef               map[string]float64
	}{
		{"vllm-70b", "llmd_exp0_vllm70b.md", "plain vLLM", nil},
		{"baseline-llm-d-70b", "llmd_exp0_baseline_llmd70b.md", "the baseline-llm-d build (llm-d-dev 0.0.4, LMCache off)", nil},
		{"vllm-70b", "llmd_exp0_vllm70b_surajssd.md", "plain vLLM", surajssdFit},
		{"baseline-llm-d-70b", "llmd_exp0_baseline_llmd70b_surajssd.md", "the baseline-llm-d build (llm-d-dev 0.0.4, LMCache off)", surajssdFit},
	} {
		name := b.dir
		if b.coef != nil {
			name += "/surajssd"
		}
		t.Run(name, func(t *testing.T) { llmdExp0Table(t, b.dir, b.golden, b.title, b.coef) })
	}
}

// llmdExp0Table replays exp-0's workload against the runs of one build
// (a folder of llmdDir) and checks its table against golden; with coef,
// the step model and the client's overheads at those coefficients
// (through the cost model's apply path, as replay --model does).
func llmdExp0Table(t *testing.T, build, goldenFile, title string, coef map[string]float64) {
	run := readLMBenchJSON(t, "run.json")
	warm := readLMBenchJSON(t, "warmup.json")
	const cluster = `hardware: a100-80gb
model: llama-3.1-70b
tp: 2
workers: 1
gpu_memory_utilization: 0.95
scheduler:
  block_size: 16
  max_num_batched_tokens: 8192
  max_num_seqs: 256
  enable_prefix_caching: true
`
	c, err := ParseCluster("llmd_exp0.yaml", []byte(cluster))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, trace.Run{}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	how, stepModel := "uncalibrated", "roofline step model, no calibration"
	if coef != nil {
		names := applyFit(s, coef)
		how = "calibrated on another A100 deployment: surajssd's fit, held out"
		stepModel = "roofline step model and client overhead at the surajssd section's fit (Llama-3.3-70B, 8 × A100-40GB TP 8,\n" +
			"vLLM 0.8.3, fitted on qps 1 and 4: " + names + "),\nnothing fitted to exp-0"
	}
	const block = 16
	var b strings.Builder
	fmt.Fprintf(&b, "# llm-d exp-0, %s: LMBenchmark ShareGPT replayed (%s)\n\n", title, how)
	b.WriteString("One server of 2 × A100-SXM4-80GB, TP 2, Llama-3.1-70B-Instruct, vLLM V1 defaults (prefix caching, chunked\n")
	b.WriteString("prefill), max_num_batched_tokens 8192, max_num_seqs 256, gpu_memory_utilization 0.95 (max_model_len 20000\n")
	fmt.Fprintf(&b, "bounds no prompt here); %s. Per QPS: warmup.json (55) at spacing 1/QPS,\n", stepModel)
	b.WriteString("waited for, 10 s, then run.json (252) at spacing 1/QPS; prompts \"<QPS> \" + input behind the Llama 3.1 chat\n")
	b.WriteString("head, hash ids chained over 16-token blocks of the text at the run's bytes per token (see TestLLMDExp0Table).\n")
	fmt.Fprintf(&b, "Observed: %s/LMBench_sharegpt_output_QPS.csv (client TTFT to the first content). Error: simulated / observed − 1.\n", build)
	fmt.Fprintf(&b, "KV cache: %s.\n", s.KVHow)
	b.WriteString("Regenerate: go test ./deploy -run TestLLMDExp0Table -llmdtable\n\n")
	b.WriteString("| QPS | hit rate | mean TTFT obs (s) | sim (s) | error | median obs (s) | sim (s) | error | p99 obs (s) | sim (s) | error |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, qps := range []string{"0.5", "0.67", "0.84", "1", "1.17", "1.34"} {
		rate, _ := strconv.ParseFloat(qps, 64)
		var obs []*trace.Request
		csvPath := shareddata.Path(t, llmdDir+"/"+build+"/LMBench_sharegpt_output_"+qps+".csv")
		if _, _, err := ingest.Files([]string{csvPath}, ingest.Options{Format: "lmbenchmark"},
			func(r *trace.Request) error { obs = append(obs, r.Clone()); return nil }, nil); err != nil {
			t.Fatal(err)
		}
		if len(obs) != len(run) {
			t.Fatalf("QPS %s: %d observed requests, run.json has %d", qps, len(obs), len(run))
		}
		prefix := llama31ChatHead + strconv.FormatFloat(rate, 'f', -1, 64)
		if !strings.Contains(prefix[len(llama31ChatHead):], ".") {
			prefix += ".0" // Python's str(1.0)
		}
		prefix += " "
		var bytes, tokens int64
		for i, e := range run {
			bytes += int64(len(prefix) + len(e.Input))
			tokens += obs[i].InputTokens.V
		}
		r := float64(bytes) / float64(tokens)
		mk := func(id string, seq int, text string, in, out int64, at float64) *trace.Request {
			return &trace.Request{RequestID: id, Source: "lmbenchmark", Status: trace.StatusOK,
				Arrival: trace.Some(trace.TimeFromSeconds(at)), InputTokens: trace.Some(in), OutputTokens: trace.Some(out),
				BlockSize: trace.Some(int64(block)), HashIDs: textHashIDs(text, in, block, r, seq)}
		}
		var warmReqs []*trace.Request
		for j, e := range warm {
			text := prefix + e.Input
			warmReqs = append(warmReqs, mk(fmt.Sprintf("warmup/%d", j), j, text, int64(float64(len(text))/r), e.OutputLength, float64(j)/rate))
		}
		var warmEnd float64
		if _, err := replay.RunInputs(s.Config, s.Step, s.KVBlocks, replay.Requests(warmReqs), func(q *trace.Request) error {
			warmEnd = max(warmEnd, q.Arrival.V.Seconds()+q.E2ESec.V)
			return nil
		}, replay.Options{Transient: true}); err != nil {
			t.Fatal(err)
		}
		start := warmEnd + 10
		reqs := warmReqs
		for i, e := range run {
			reqs = append(reqs, mk(fmt.Sprintf("run/%d", i), len(warm)+i, prefix+e.Input, obs[i].InputTokens.V, obs[i].OutputTokens.V, start+float64(i)/rate))
		}
		var sim []float64
		var cached, prompt int64
		st, err := replay.RunInputs(s.Config, s.Step, s.KVBlocks, replay.Requests(reqs), func(q *trace.Request) error {
			if strings.HasPrefix(q.RequestID, "run/") && q.Status == trace.StatusOK {
				sim = append(sim, q.TTFTSec.V)
				cached += q.CachedTokens.Or(0)
				prompt += q.InputTokens.V
			}
			return nil
		}, replay.Options{Transient: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(sim) != len(run) || st.Completed != len(reqs) {
			t.Fatalf("QPS %s: %d of %d run requests, %d of %d in all completed", qps, len(sim), len(run), st.Completed, len(reqs))
		}
		var o []float64
		for _, q := range obs {
			o = append(o, q.TTFTSec.V)
		}
		od, sd := analyze.NewDist(o), analyze.NewDist(sim)
		row := []float64{od.Mean, sd.Mean, od.Percentile(50), sd.Percentile(50), od.Percentile(99), sd.Percentile(99)}
		fmt.Fprintf(&b, "| %s | %.4f |", qps, float64(cached)/float64(prompt))
		for k := 0; k < len(row); k += 2 {
			fmt.Fprintf(&b, " %.3f | %.3f | %+.0f %% |", row[k], row[k+1], (row[k+1]/row[k]-1)*100)
		}
		b.WriteString("\n")
	}
	t.Log("\n" + b.String())
	// The table is a golden file: every run checks it, the flag (or
	// -update) rewrites it.
	golden.CheckOrWrite(t, filepath.Join("testdata", goldenFile), []byte(b.String()), *llmdTable)
}
