package deploy

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

func TestEngineOptPrefix(t *testing.T) {
	if engineOptPrefix != ingest.EngineOptPrefix {
		t.Errorf("engineOptPrefix %q, ingest writes %q", engineOptPrefix, ingest.EngineOptPrefix)
	}
}

// The default cluster resolves to a replay of Llama-3.1-8B on one H100
// whose KV capacity is the roofline's and whose record says so.
func TestResolveDefault(t *testing.T) {
	s, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := DefaultCluster().Deployment()
	if err != nil {
		t.Fatal(err)
	}
	// No run recorded max_num_seqs or max_num_batched_tokens: vLLM's API
	// server defaults on an H100 (1024 and 8192) size the KV cache and
	// drive the scheduler.
	dep.BlockSize = 16
	want, _, err := dep.KVCacheTokensFor(model.VLLMProfile{GPUMemoryUtilization: 0.9, MaxNumBatchedTokens: 8192, MaxNumSeqs: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if s.KVTokens != want || s.KVBlocks != want/16 || s.Step != model.StepModel(s.Deployment) {
		t.Errorf("KV %d tokens, %d blocks; want %d, %d", s.KVTokens, s.KVBlocks, want, want/16)
	}
	if sc := s.Config.Scheduler; sc.MaxNumSeqs != 1024 || sc.MaxNumBatchedTokens != 8192 ||
		!strings.Contains(strings.Join(s.Notes, "\n"), "max_num_seqs 1024, max_num_batched_tokens 8192 (vLLM's default for an API server on a GPU of 70 GiB or more other than the A100: h100 has 79.65 GiB; no version recorded: the rule of 0.9 and later assumed)") ||
		!strings.Contains(s.KVHow, "profiled at 8192 tokens and 1024 sequences") {
		t.Errorf("scheduler %d seqs, %d tokens; notes %q; KV %s", sc.MaxNumSeqs, sc.MaxNumBatchedTokens, s.Notes, s.KVHow)
	}
	effective := DefaultCluster()
	effective.Config.Scheduler.MaxNumSeqs = 1024
	r := s.Run
	if r.Source != "simulated" || r.Model != "llama-3.1-8b" || r.Hardware != "h100" || r.TP != 1 || r.Engine != "vllm" ||
		r.Extra["config"] != effective.YAML() || !strings.HasPrefix(r.Extra["cost_model"], "roofline: llama-3.1-8b on 1 × h100") {
		t.Errorf("run %+v", r)
	}
	if s.Config.Scheduler.ContextLength != int64(s.Deployment.LLM.MaxPositionEmbeddings) {
		t.Errorf("context length %d", s.Config.Scheduler.ContextLength)
	}
	// The effective configuration reads back as a cluster file.
	back, err := ParseCluster("config", []byte(r.Extra["config"]))
	if err != nil || back.YAML() != r.Extra["config"] {
		t.Errorf("config does not read back: %v", err)
	}
}

// A run an SGLang server served is replayed through SGLang's scheduler
// unless the cluster names one; the simulated run says which. Its
// recorded server options fill SGLang's defaults, not what the cluster set.
func TestEngineOptions(t *testing.T) {
	pick := func(cfg replay.Config, run trace.Run) replay.Config {
		t.Helper()
		c, err := engineOptions(cfg, run, run.Extra["engine_version"])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sg := trace.Run{Engine: "sglang"}
	if c := pick(replay.Config{}, sg); c.Scheduler.Engine != replay.EngineSGLang || EngineName(c) != "sglang" {
		t.Errorf("sglang run: engine %q", c.Scheduler.Engine)
	}
	if c := pick(replay.Config{}, trace.Run{Engine: "vllm"}); EngineName(c) != "vllm" {
		t.Errorf("vllm run: engine %q", EngineName(c))
	}
	var cfg replay.Config
	cfg.Scheduler.Engine = replay.EngineVLLM
	if c := pick(cfg, sg); c.Scheduler.Engine != replay.EngineVLLM {
		t.Errorf("the cluster's choice was overridden: %q", c.Scheduler.Engine)
	}
	opts := trace.Run{Name: "r", Engine: "sglang", Extra: map[string]string{
		"engine_opt.disable_radix_cache": "true", "engine_opt.chunked_prefill_size": "4096",
		"engine_opt.max_prefill_tokens": "2048", "engine_opt.schedule_policy": "fcfs", "engine_opt.tp": "2",
	}}
	cfg = replay.Config{}
	cfg.Scheduler.MaxPrefillTokens = 1000
	c := pick(cfg, opts).Scheduler
	if !c.DisableRadixCache || c.ChunkedPrefillSize != 4096 || c.MaxPrefillTokens != 1000 || c.SchedulePolicy != "fcfs" {
		t.Errorf("options not applied: %+v", c)
	}
	opts.Extra["engine_opt.chunked_prefill_size"] = "many"
	opts.Extra["engine_opt.schedule_policy"] = "lof"
	if _, err := engineOptions(replay.Config{}, opts, opts.Extra["engine_version"]); err == nil ||
		!strings.Contains(err.Error(), `run r: engine_opt.chunked_prefill_size: "many"`) {
		t.Errorf("bad option: %v", err)
	}
	delete(opts.Extra, "engine_opt.chunked_prefill_size")
	if _, err := engineOptions(replay.Config{}, opts, opts.Extra["engine_version"]); err == nil || !strings.Contains(err.Error(), "schedule_policy") {
		t.Errorf("bad policy: %v", err)
	}
	// Through Resolve: the run's engine shows in the setup and its record.
	s, err := Resolve(DefaultCluster(), trace.Run{Name: "r", Engine: "sglang"}, Overrides{})
	if err != nil || s.Config.Scheduler.Engine != "sglang" || s.Run.Engine != "sglang" {
		t.Errorf("sglang run resolved to %+v, %v", s, err)
	}
}

// A cluster file can describe a custom GPU, other parallel sizes and an
// fp8 KV cache.
func TestClusterHardwareOverride(t *testing.T) {
	c, err := ParseCluster("c.yaml", []byte(`hardware: custom
hardware_override:
  peak_bf16_tflops: 500
  mem_mib: 49152
  mem_bandwidth_tbps: 2
  link_gbps: 100
model: llama-3.1-70b
tp: 4
pp: 2
kv_cache_dtype: fp8
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	// 40 layers per stage · 2 KV heads per rank · 2 · 128 · 1 B.
	if d.Hardware.PeakFLOPS != 500e12 || d.Hardware.MemBytes != 49152<<20 || d.PP != 2 || d.KVBytesPerTokenPerRank() != 40*2*2*128 {
		t.Errorf("deployment: %+v, KV/token/rank %d", d.Hardware, d.KVBytesPerTokenPerRank())
	}
	c, err = ParseCluster("c.yaml", []byte("hardware: custom\nhardware_override: {peak_bf16_tflops: 500}\n"))
	if err == nil {
		_, err = Resolve(c, trace.Run{}, Overrides{})
	}
	if err == nil || !strings.Contains(err.Error(), "must give peak_bf16_tflops, mem_mib and mem_bandwidth_tbps") {
		t.Errorf("incomplete custom hardware: %v", err)
	}
}

// A fixedCost is a cost model of one coefficient, as a calibration's
// candidate would be.
type fixedCost struct {
	overhead float64
	fitted   string
}

func (f fixedCost) Check(hw, m string, tp int) error {
	if f.fitted != "" && f.fitted != hw {
		return errors.New("fitted for " + f.fitted)
	}
	return nil
}

func (f fixedCost) StepModel(d *model.Deployment) (model.StepModel, error) {
	d.MFU = f.overhead
	return d, nil
}

// A cost model given as an override prices the steps and is recorded;
// one fitted for other hardware is refused; a cluster naming a cost model
// file that the caller did not load is an error, not a silent roofline.
func TestResolveCostModel(t *testing.T) {
	s, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{CostModel: fixedCost{overhead: 0.25}, CostModelText: "fixed\n"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Deployment.MFU != 0.25 || s.CostModelText != "fixed\n" || s.Run.Extra["cost_model"] != "fixed\n" {
		t.Errorf("cost model not applied: mfu %v, text %q", s.Deployment.MFU, s.CostModelText)
	}
	c := DefaultCluster()
	c.CostModel = "cm.yaml"
	if _, err := Resolve(c, trace.Run{}, Overrides{CostModel: fixedCost{fitted: "h200"}}); err == nil || err.Error() != "cm.yaml: fitted for h200" {
		t.Errorf("mismatched cost model: %v", err)
	}
	if _, err := Resolve(c, trace.Run{}, Overrides{}); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("unloaded cost model: %v", err)
	}
}

// Overrides' settings apply over the file and are checked.
func TestResolveSettings(t *testing.T) {
	s, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{Settings: []Setting{
		{"workers", 4, "--workers"}, {"scheduler.block_size", 32, "--kv-block-size"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Workers != 4 || s.KVBlocks != s.KVTokens/32 || s.Cluster.Workers != 4 {
		t.Errorf("settings: workers %d, %d blocks of %d tokens", s.Config.Workers, s.KVBlocks, s.KVTokens)
	}
	if _, err := Resolve(DefaultCluster(), trace.Run{}, Overrides{Settings: []Setting{{"workers", 0, "--workers"}}}); err == nil ||
		err.Error() != "--workers 0: want a number of workers from 1 to 4096" {
		t.Errorf("zero workers: %v", err)
	}
}

func TestModelName(t *testing.T) {
	for in, want := range map[string]string{
		"meta-llama/Llama-3.3-70B-Instruct":     "llama-3.3-70b",
		"meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
		"meta-llama/Llama-3.1-8B":               "llama-3.1-8b",
		"Qwen/Qwen3-32B":                        "qwen3-32b",
		"deepseek-ai/DeepSeek-V3":               "deepseek-v3",
		"ibm-granite/granite-3.3-8b-instruct":   "granite-3.3-8b-instruct",
		"openai/gpt-oss-20b":                    "gpt-oss-20b",
		"llama-3.1-8b":                          "llama-3.1-8b",
		// Llama 3 is not 3.1: its own config (8,192 positions, no RoPE
		// scaling).
		"meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
		"meta-llama/Meta-Llama-3-8B":          "llama-3-8b",
		// The three runs of ../shared/data these configs came for.
		"Qwen/Qwen3-30B-A3B-Instruct-2507":       "qwen3-30b-a3b-instruct-2507",
		"01-ai/Yi-1.5-34B-Chat":                  "yi-1.5-34b",
		"Qwen/Qwen3-30B-A3B":                     "",
		"01-ai/Yi-34B-Chat":                      "",
		"meta-llama/Llama-3.1-405B-Instruct-FP8": "",
		"Qwen/Qwen2.5-3B-Instruct":               "",
		// The DataCrunch DeepSeek run's two launch lines: one architecture,
		// bf16 and fp8.
		"deepseek-ai/DeepSeek-V2.5-1210":             "deepseek-v2",
		"neuralmagic/DeepSeek-Coder-V2-Instruct-FP8": "deepseek-coder-v2-instruct-fp8",
		"deepseek-ai/DeepSeek-V2-Chat":               "deepseek-v2",
		"deepseek-ai/DeepSeek-V2-Lite-Chat":          "deepseek-v2-lite",
	} {
		if got, ok := ModelName(in); got != want || ok != (want != "") {
			t.Errorf("ModelName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestSplitGPUCount(t *testing.T) {
	for in, want := range map[string]struct {
		name string
		n    int
	}{
		"4xH200": {"H200", 4}, "8 x A100-40GB": {"A100-40GB", 8}, "H200 × 4": {"H200", 4}, "h100": {"h100", 0},
		"2 RTX PRO 6000": {"RTX PRO 6000", 2}, "Standard_ND96asr_v4 x 1": {"Standard_ND96asr_v4", 1},
	} {
		if name, n := splitGPUCount(in); name != want.name || n != want.n {
			t.Errorf("splitGPUCount(%q) = %q, %d; want %q, %d", in, name, n, want.name, want.n)
		}
	}
}

// The run's record fills what the file leaves at its defaults; the
// file's keys win, with a note; engine options recorded at ingest apply;
// an unusable record of a measured run is refused unless assumed.
func TestResolveRecord(t *testing.T) {
	run := trace.Run{Name: "r", Model: "meta-llama/Llama-3.3-70B-Instruct", Hardware: "8xA100-SXM4-40GB", Engine: "vllm",
		Extra: map[string]string{"engine_opt.max_num_seqs": "128", "engine_opt.enable_prefix_caching": "false"}}
	s, err := Resolve(DefaultCluster(), run, Overrides{Measured: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster.Model != "llama-3.3-70b" || s.Cluster.Hardware != "a100-40gb" || s.Cluster.TP != 8 ||
		s.Config.Scheduler.MaxNumSeqs != 128 || *s.Config.Scheduler.EnablePrefixCaching || s.Header() != "llama-3.3-70b on 8×a100-40gb (TP8), vllm, 1 worker" {
		t.Errorf("resolved %s; %+v", s.Header(), s.Config.Scheduler)
	}
	c, err := ParseCluster("c.yaml", []byte("hardware: h100\nworkers: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err = Resolve(c, run, Overrides{Measured: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster.Hardware != "h100" || !strings.Contains(strings.Join(s.Notes, "\n"), `run r: records hardware "8xA100-SXM4-40GB"; replayed with h100 (c.yaml:1)`) {
		t.Errorf("file over record: %s; notes %q", s.Cluster.Hardware, s.Notes)
	}
	bad := trace.Run{Name: "u", Model: "Qwen/Qwen2.5-3B-Instruct"}
	if _, err := Resolve(DefaultCluster(), bad, Overrides{Measured: true}); err == nil ||
		err.Error() != `run u: its deployment is not known (records model "Qwen/Qwen2.5-3B-Instruct", which is neither a shipped model nor a config.json path): give --model and --hardware (or a cluster file) for it, or --assume-deployment to replay it on model llama-3.1-8b, hardware h100` {
		t.Errorf("unknown deployment: %v", err)
	}
	s, err = Resolve(DefaultCluster(), bad, Overrides{Measured: true, AssumeDeployment: true})
	if err != nil || !strings.Contains(strings.Join(s.Notes, "\n"), "no model and hardware recorded: replayed on model llama-3.1-8b, hardware h100") {
		t.Errorf("assumed: %v, setup %+v", err, s)
	}
	// A GPU count and parallel sizes that disagree: the sizes ran, said
	// so; sizes that agree, nothing.
	for _, c := range []struct {
		run  trace.Run
		note string
	}{
		{trace.Run{Name: "g", Model: "llama-3.1-8b", Hardware: "4xH200", TP: 2}, `run g: records 4 GPUs ("4xH200") but parallel sizes of 2 (tp 2, pp 1, dp 1): replayed on the sizes' 2`},
		{trace.Run{Name: "g", Model: "llama-3.1-8b", Hardware: "4xH200", TP: 2, DP: 2}, ""},
		{trace.Run{Name: "g", Model: "deepseek-v2-lite", Hardware: "8xH200", TP: 8, Engine: "sglang",
			Extra: map[string]string{"engine_opt.enable_dp_attention": "true"}}, ""},
	} {
		s, err := Resolve(DefaultCluster(), c.run, Overrides{})
		if err != nil {
			t.Errorf("%+v: %v", c.run, err)
			continue
		}
		notes := strings.Join(s.Notes, "\n")
		if (c.note == "") == strings.Contains(notes, "but parallel sizes") || c.note != "" && !strings.Contains(notes, c.note) {
			t.Errorf("%+v: notes:\n%s\nwant %q", c.run, notes, c.note)
		}
	}
	opt := trace.Run{Name: "o", Model: "llama-3.1-8b", Hardware: "h100", Extra: map[string]string{"engine_opt.max_num_seqs": "lots"}}
	if _, err := Resolve(DefaultCluster(), opt, Overrides{}); err == nil || !strings.Contains(err.Error(), `run o: engine_opt.max_num_seqs: "lots"`) {
		t.Errorf("bad option: %v", err)
	}
}

// KV capacity as the engines size it: SGLang's mem_fraction_static (its
// default by TP size at SGLang 0.4.0.post1, assumed when no version is
// recorded) of the memory free before loading, less the weights, the
// rotary cache (model dtype at 0.4.0.post1) and the allocator's rounding,
// the H200's CUDA total and start-up memory unknown and said so; vLLM's
// num_gpu_blocks_override.
func TestKVCapacity(t *testing.T) {
	run := trace.Run{Name: "dc", Model: "llama-3.3-70b", Hardware: "4xH200", Engine: "sglang"}
	s, err := Resolve(DefaultCluster(), run, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	d := s.Deployment
	free := d.Hardware.MemBytes
	rounding := int64(2<<20 + 4<<20 - 161*16<<10) // PyTorch's allocator: embedding and LM head to 2 MiB, norms in 2 MiB segments
	want := (free - d.WeightBytesPerRank() - 131072*128*2 - rounding - int64(float64(free)*0.15)) / d.KVBytesPerTokenPerRank()
	if s.KVTokens != want || !strings.Contains(s.KVHow, "(SGLang 0.4.0.post1's default mem_fraction_static 0.85; per GPU, in 1-token pages: 140.40 GiB free before loading") ||
		!strings.Contains(s.KVHow, "CUDA's total for h200 not known") {
		t.Errorf("SGLang KV %d (%s), want %d", s.KVTokens, s.KVHow, want)
	}
	s, err = Resolve(DefaultCluster(), run, Overrides{Settings: []Setting{{"mem_fraction_static", 0.5, "--x"}}})
	if err != nil || s.KVTokens >= want {
		t.Errorf("mem_fraction_static 0.5: %v, %d tokens", err, s.KVTokens)
	}
	s, err = Resolve(DefaultCluster(), trace.Run{}, Overrides{Settings: []Setting{{"num_gpu_blocks_override", 2588, "--num-gpu-blocks-override"}}})
	if err != nil || s.KVTokens != 2588*16 || s.KVBlocks != 2588 {
		t.Errorf("override: %v, %d tokens, %d blocks", err, s.KVTokens, s.KVBlocks)
	}
}

// A Hugging Face id given by the cluster file or a flag loads the
// shipped config, as a recorded one does.
func TestLoadLLMHuggingFaceID(t *testing.T) {
	m, err := LoadLLM("meta-llama/Llama-3.3-70B-Instruct")
	if err != nil || m.Name != "llama-3.3-70b" {
		t.Errorf("%q, %v", m.Name, err)
	}
	if _, err := LoadLLM("Qwen/Qwen2.5-3B-Instruct"); err == nil {
		t.Error("an unshipped model loaded")
	}
}

// A bad hardware_override value, or a custom GPU missing its figures, is
// an error naming the key and its line, as node_override's are.
func TestHardwareOverrideBadInput(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"workers: 1\nhardware_override:\n  mem_bandwidth_tbps: 1e12\n",
			"c.yaml:3: hardware_override.mem_bandwidth_tbps: 1e+12 is over the limit of 1e+09"},
		{"hardware_override:\n  mem_mib: 1e300\n",
			"c.yaml:2: hardware_override.mem_mib: 1e+300 is over the limit of 1073741824"},
		{"hardware: custom\nhardware_override: {peak_bf16_tflops: 500}\n",
			"c.yaml:1: hardware: custom: hardware_override must give peak_bf16_tflops, mem_mib and mem_bandwidth_tbps"},
	} {
		if err := resolveErr(c.text); err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
}

// An SGLang run's workers replay CUDA graphs up to SGLang 0.4's default
// cuda_graph_max_bs (160 on an H200; 80 at TP4 and 8 below on a GPU under
// 25,000 MB), or what the run recorded; vLLM's get no limit.
func TestSGLangCUDAGraphMaxBS(t *testing.T) {
	for _, tc := range []struct {
		hw   string
		tp   int
		opts map[string]string
		want int
	}{
		{"h200", 4, nil, 160},
		{"rtx-4090", 1, nil, 8},
		{"rtx-4090", 4, nil, 80},
		{"h200", 4, map[string]string{"engine_opt.cuda_graph_max_bs": "256"}, 256},
		{"h200", 4, map[string]string{"engine_opt.disable_cuda_graph": "true"}, -1},
	} {
		run := trace.Run{Name: "r", Model: "llama-3.1-8b", Hardware: tc.hw, TP: tc.tp, Engine: "sglang", Extra: tc.opts}
		s, err := Resolve(DefaultCluster(), run, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Deployment.CUDAGraphMaxBS; got != tc.want {
			t.Errorf("%s TP%d %v: cuda_graph_max_bs %d, want %d", tc.hw, tc.tp, tc.opts, got, tc.want)
		}
	}
	s, err := Resolve(DefaultCluster(), trace.Run{Name: "v", Model: "llama-3.1-8b", Hardware: "h200", Engine: "vllm"}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Deployment.CUDAGraphMaxBS != 0 {
		t.Errorf("vLLM worker: cuda_graph_max_bs %d", s.Deployment.CUDAGraphMaxBS)
	}
}

// vLLM's default max_num_seqs and max_num_batched_tokens follow the run's
// version and GPU; a recorded value or a setting wins over them.
func TestVLLMBatchDefaults(t *testing.T) {
	for _, c := range []struct {
		name         string
		run          trace.Run
		settings     []Setting
		seqs, tokens int
		note         string
	}{
		{"a100-40gb", trace.Run{Name: "a", Model: "llama-3.1-8b", Hardware: "a100-40gb", Engine: "vllm", Extra: map[string]string{"engine_version": "0.11.0"}},
			nil, 256, 2048, "max_num_seqs 256, max_num_batched_tokens 2048 (vLLM 0.11.0's default for an API server on a GPU of under 70 GiB"},
		{"a100-80gb 0.9", trace.Run{Name: "b", Model: "llama-3.1-8b", Hardware: "a100-80gb", Engine: "vllm", Extra: map[string]string{"engine_version": "0.9.2"}},
			nil, 256, 2048, "on an A100"},
		{"a100-80gb 0.8.5", trace.Run{Name: "c", Model: "llama-3.1-8b", Hardware: "a100-80gb", Engine: "vllm", Extra: map[string]string{"engine_version": "0.8.5"}},
			nil, 1024, 8192, "vLLM 0.8.5's default for an API server on a GPU of 70 GiB or more: a100-80gb"},
		{"recorded", trace.Run{Name: "d", Model: "llama-3.1-8b", Hardware: "h200", Engine: "vllm", Extra: map[string]string{"engine_opt.max_num_seqs": "64"}},
			nil, 64, 8192, "max_num_batched_tokens 8192 (vLLM's"},
		{"setting", trace.Run{Name: "e", Model: "llama-3.1-8b", Hardware: "h100", Engine: "vllm"},
			[]Setting{{"scheduler.max_num_seqs", 32, "--max-num-seqs"}, {"scheduler.max_num_batched_tokens", 4096, "--max-num-batched-tokens"}}, 32, 4096, ""},
	} {
		s, err := Resolve(DefaultCluster(), c.run, Overrides{Settings: c.settings})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sc := s.Config.Scheduler
		notes := strings.Join(s.Notes, "\n")
		if sc.MaxNumSeqs != c.seqs || sc.MaxNumBatchedTokens != int64(c.tokens) || s.Cluster.Config.Scheduler.MaxNumSeqs != c.seqs ||
			!strings.Contains(s.KVHow, fmt.Sprintf("profiled at %d tokens and %d sequences", c.tokens, c.seqs)) ||
			c.note != "" && !strings.Contains(notes, c.note) || c.note == "" && strings.Contains(notes, "vLLM's") {
			t.Errorf("%s: %d seqs, %d tokens; KV %s; notes %q", c.name, sc.MaxNumSeqs, sc.MaxNumBatchedTokens, s.KVHow, s.Notes)
		}
	}
}

// An SGLang run's options it and the cluster leave out take the defaults
// of its recorded version on its GPU, and the note says which rule chose
// them; what the cluster gives wins; with no version recorded
// v0.4.0.post1's rule is assumed, and said.
func TestSGLangServeDefaults(t *testing.T) {
	run := trace.Run{Name: "a", Model: "llama-3.1-8b", Hardware: "2xA10", Engine: "sglang", Extra: map[string]string{"engine_version": "0.5.2"}}
	s, err := Resolve(DefaultCluster(), run, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	g := s.Config.Scheduler
	notes := strings.Join(s.Notes, "\n")
	if g.SchedulePolicy != "fcfs" || g.ChunkedPrefillSize != 2048 || s.Deployment.CUDAGraphMaxBS != 8 || s.Cluster.EngineVersion != "0.5.2" ||
		!strings.Contains(notes, "schedule_policy fcfs, chunked_prefill_size 2048, mem_fraction_static 0.867 (SGLang 0.5.2's defaults (mem_fraction_static leaving 3072 MiB") ||
		!strings.Contains(s.KVHow, "SGLang 0.5.2's default mem_fraction_static 0.867; per GPU, in 1-token pages: 21.72 GiB free before loading (22.07 CUDA total − 0.35 process)") {
		t.Errorf("0.5.2 on 2×A10: %s, %d, graphs to %d; notes:\n%s\nKV: %s", g.SchedulePolicy, g.ChunkedPrefillSize, s.Deployment.CUDAGraphMaxBS, notes, s.KVHow)
	}
	c := DefaultCluster()
	c, err = c.With(Setting{"scheduler.chunked_prefill_size", 4096, "--x"}, Setting{"mem_fraction_static", 0.8, "--y"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Resolve(c, run, Overrides{}); err != nil {
		t.Fatal(err)
	}
	if g := s.Config.Scheduler; g.ChunkedPrefillSize != 4096 || g.SchedulePolicy != "fcfs" || !strings.Contains(s.KVHow, "(SGLang: mem_fraction_static 0.8;") ||
		!strings.Contains(strings.Join(s.Notes, "\n"), "schedule_policy fcfs (SGLang 0.5.2's") || strings.Contains(strings.Join(s.Notes, "\n"), "mem_fraction_static 0.867") {
		t.Errorf("given: %d, %s, %s, %q", g.ChunkedPrefillSize, g.SchedulePolicy, s.KVHow, s.Notes)
	}
	delete(run.Extra, "engine_version")
	if s, err = Resolve(DefaultCluster(), run, Overrides{}); err != nil {
		t.Fatal(err)
	}
	if g := s.Config.Scheduler; g.SchedulePolicy != "lpm" || g.ChunkedPrefillSize != 2048 || s.Deployment.CUDAGraphMaxBS != 8 ||
		!strings.Contains(strings.Join(s.Notes, "\n"), "no version recorded: 0.4.0.post1 assumed") {
		t.Errorf("no version: %s, %d, %d; %q", g.SchedulePolicy, g.ChunkedPrefillSize, s.Deployment.CUDAGraphMaxBS, s.Notes)
	}
}

// Whether a recorded SGLang run ran the overlap scheduler follows the
// cluster's engine_version, as its other defaults do: the run's recorded
// version, or the one a cluster file gives instead.
func TestSGLangOverlapFollowsEngineVersion(t *testing.T) {
	run := trace.Run{Name: "a", Model: "llama-3.1-8b", Hardware: "2xA10", Engine: "sglang", Extra: map[string]string{"engine_version": "0.3.6"}}
	for _, c := range []struct {
		cluster string // engine_version in the cluster file, "" for none
		want    bool
	}{
		{"", false},
		{"0.4.0.post1", true},
	} {
		var o Overrides
		if c.cluster != "" {
			o.Settings = []Setting{{"engine_version", c.cluster, "cluster.yaml:3"}}
		}
		s, err := Resolve(DefaultCluster(), run, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Config.Scheduler.OverlapSchedule; got != c.want || s.Cluster.EngineVersion != cmp.Or(c.cluster, "0.3.6") {
			t.Errorf("recorded 0.3.6, cluster %q: engine_version %q, overlap %v, want %v", c.cluster, s.Cluster.EngineVersion, got, c.want)
		}
	}
}
