package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// An SGLang run that recorded --enable-torch-compile compiles decode
// batches up to SGLang's default torch_compile_max_bs (32) or the one it
// recorded (under either of its names); without it nothing is compiled.
// The setup's notes print the regimes with the options that chose them.
func TestSGLangTorchCompileRegimes(t *testing.T) {
	for _, tc := range []struct {
		opts      map[string]string
		want      int
		graphs    int
		wantNotes string
	}{
		{map[string]string{"engine_opt.enable_torch_compile": "true"}, 32, 160,
			"steps: decode batches up to 32 torch-compiled CUDA graphs, up to 160 plain CUDA graphs, larger ones and prefill eager (enable_torch_compile, torch_compile_max_bs 32, cuda_graph_max_bs 160)"},
		{map[string]string{"engine_opt.enable_torch_compile": "true", "engine_opt.torch_compile_max_bs": "16"}, 16, 160,
			"up to 16 torch-compiled CUDA graphs"},
		{map[string]string{"engine_opt.enable_torch_compile": "true", "engine_opt.max_torch_compile_bs": "8"}, 8, 160,
			"torch_compile_max_bs 8,"},
		{map[string]string{"engine_opt.enable_torch_compile": "true", "engine_opt.cuda_graph_max_bs": "24"}, 32, 24,
			"up to 24 torch-compiled CUDA graphs, up to 24 plain"},
		{map[string]string{"engine_opt.torch_compile_max_bs": "16"}, 0, 160,
			"steps: decode batches up to 160 CUDA graphs, larger ones and prefill eager (cuda_graph_max_bs 160; torch compile off)"},
		{map[string]string{"engine_opt.enable_torch_compile": "true", "engine_opt.disable_cuda_graph": "true"}, 32, -1,
			"steps: every step eager (disable_cuda_graph)"},
	} {
		run := trace.Run{Name: "r", Model: "llama-3.1-8b", Hardware: "h200", TP: 1, Engine: "sglang", Extra: tc.opts}
		s, err := Resolve(DefaultCluster(), run, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		d := s.Deployment
		if d.TorchCompileMaxBS != tc.want || d.CUDAGraphMaxBS != tc.graphs {
			t.Errorf("%v: torch_compile_max_bs %d, cuda_graph_max_bs %d; want %d, %d", tc.opts, d.TorchCompileMaxBS, d.CUDAGraphMaxBS, tc.want, tc.graphs)
		}
		if notes := strings.Join(s.Notes, "\n"); !strings.Contains(notes, tc.wantNotes) {
			t.Errorf("%v: notes\n%s\nwant %q", tc.opts, notes, tc.wantNotes)
		}
	}
	s, err := Resolve(DefaultCluster(), trace.Run{Name: "v", Model: "llama-3.1-8b", Hardware: "h200", Engine: "vllm",
		Extra: map[string]string{"engine_opt.enable_torch_compile": "true"}}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Deployment.TorchCompileMaxBS != 0 || strings.Contains(strings.Join(s.Notes, "\n"), "steps:") {
		t.Errorf("vLLM worker: torch_compile_max_bs %d, notes %q", s.Deployment.TorchCompileMaxBS, s.Notes)
	}
}
