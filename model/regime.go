package model

// A StepRegime is how an engine runs a step's forward pass: a
// torch-compiled CUDA graph, a plain CUDA graph, or eagerly (kernels
// launched one at a time from the CPU). SGLang decides it per step from
// the batch (its CudaGraphRunner, read at v0.4.0.post1 and unchanged in
// form through v0.5.5): a decode-only batch of n requests replays the
// graph captured for the smallest capture size ≥ n when n is at most the
// largest one (cuda_graph_max_bs), and that graph was captured
// torch-compiled when --enable-torch-compile is on and its size is at
// most torch_compile_max_bs (32 by default in every release from v0.3.0
// to v0.5.5). Extend (prefill) batches and larger decode batches run
// eagerly, uncompiled: the compiled forward exists only inside the
// captured graphs.
type StepRegime int

const (
	// RegimeUnknown: the engine's graph limit is not known
	// (Deployment.CUDAGraphMaxBS 0); the step is priced as a graph
	// replay with no regime term, as every vLLM step is.
	RegimeUnknown StepRegime = iota
	// RegimeCompiled: a decode batch of at most TorchCompileMaxBS (and
	// CUDAGraphMaxBS) requests, replayed as a torch-compiled graph.
	RegimeCompiled
	// RegimeGraph: a decode batch of at most CUDAGraphMaxBS requests
	// replayed as a plain CUDA graph (above TorchCompileMaxBS, or with
	// nothing compiled).
	RegimeGraph
	// RegimeEager: a step with prefill, a decode batch above
	// CUDAGraphMaxBS, or any step with graphs disabled.
	RegimeEager
)

func (r StepRegime) String() string {
	switch r {
	case RegimeCompiled:
		return "compiled"
	case RegimeGraph:
		return "graph"
	case RegimeEager:
		return "eager"
	}
	return "unknown"
}

// Regime returns how the engine runs a step with prefill (any chunk) and
// decodes decode requests.
//
// Note: SGLang pads a decode batch to the next capture size, and a batch
// counts as compiled when that size is compiled; TorchCompileMaxBS is
// taken as a capture size, as the default 32 is in every release's
// capture list (v0.4.0.post1: 1, 2, 4, 8, 16, 24, 32, 40, …, 160;
// v0.4.7 to v0.5.2: 1–8, 10–32 by 2, …). A torch_compile_max_bs between
// two capture sizes would compile only up to the smaller one, and the
// padding itself (up to 7 idle rows) is not priced.
func (d *Deployment) Regime(prefill bool, decodes int) StepRegime {
	switch g := d.CUDAGraphMaxBS; {
	case g == 0:
		return RegimeUnknown
	case g < 0 || prefill || decodes > g:
		return RegimeEager
	case decodes <= d.TorchCompileMaxBS:
		return RegimeCompiled
	}
	return RegimeGraph
}

// regimeTerms sets the regime's terms of t, the step terms of a batch
// with prefill and decodes: the stage's layers as EagerLayers for an
// eager step, and as UncompiledLayers for any step not compiled on an
// engine that compiles some (TorchCompileMaxBS > 0 with graphs on): an
// eager step runs the same uncompiled kernels as a plain graph, and
// launches them besides.
//
// Note: the stage's layers are counted only for a step that has regime
// terms: a vLLM step has none (RegimeUnknown), and the count divides.
func (d *Deployment) regimeTerms(t *StepTerms, prefill bool, decodes int) {
	switch d.Regime(prefill, decodes) {
	case RegimeEager:
		layers := float64(d.stageLayers())
		t.EagerLayers = layers
		if d.compiles() {
			t.UncompiledLayers = layers
		}
	case RegimeGraph:
		if d.compiles() {
			t.UncompiledLayers = float64(d.stageLayers())
		}
	}
}

// compiles reports whether the engine runs some steps torch-compiled.
func (d *Deployment) compiles() bool {
	return d.TorchCompileMaxBS > 0 && d.CUDAGraphMaxBS > 0
}
