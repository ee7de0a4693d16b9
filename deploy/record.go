package deploy

import (
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/samples"
)

// A record is the deployment a run's metadata names, resolved as far as
// it goes: model and hardware by the names this package knows (unknown
// ones are kept raw, for the message), the GPU count, parallel sizes and
// engine.
type record struct {
	model, rawModel       string // shipped name or config path; the run's own spelling
	hardware, rawHardware string // preset name; the run's spelling
	gpus                  int    // GPUs the run names (4 of "4xH200"), 0: not said
	tp, pp, dp            int
	engine                string
}

// recordOf reads the deployment of a run's metadata.
func recordOf(model, hardware string, tp, pp, dp int, engine string) record {
	r := record{rawModel: model, rawHardware: hardware, tp: tp, pp: pp, dp: dp, engine: strings.ToLower(engine)}
	if model != "" {
		r.model, _ = ModelName(model)
	}
	if hardware != "" {
		name, n := splitGPUCount(hardware)
		r.gpus = n
		if h, err := hardwareName(name); err == nil {
			r.hardware = h
		}
	}
	return r
}

// hardwareName returns the preset a GPU name resolves to.
func hardwareName(name string) (string, error) {
	h, err := model.HardwareByName(name)
	return h.Name, err
}

var gpuCount = []*regexp.Regexp{
	regexp.MustCompile(`^\s*(\d+)\s*[x×*]\s*(.+?)\s*$`),   // 4xH200, 8 × A100-40GB
	regexp.MustCompile(`^\s*(.+?)\s*[x×*]\s*(\d+)\s*$`),   // H200 x 4
	regexp.MustCompile(`^\s*(\d+)\s+(.+?)\s*$`),           // 4 H200
	regexp.MustCompile(`^\s*(.+?)\s*\(\s*(\d+)\s*\)\s*$`), // H200 (4)
}

// splitGPUCount splits a hardware string such as "4xH200" or "8 x
// A100-40GB" into the GPU name and count (0 when it names none).
func splitGPUCount(s string) (name string, count int) {
	for i, re := range gpuCount {
		m := re.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		num, name := m[1], m[2]
		if i == 1 || i == 3 {
			num, name = m[2], m[1]
		}
		if n, err := strconv.Atoi(num); err == nil && n > 0 && n <= MaxWorkers*MaxParallel {
			return name, n
		}
	}
	return strings.TrimSpace(s), 0
}

// ModelName resolves a model as a run records it to what LoadLLM reads:
// a shipped name as it is, a Hugging Face id of a shipped model
// ("meta-llama/Llama-3.3-70B-Instruct" is llama-3.3-70b: the organisation
// dropped, lower case, and the -Instruct, -Chat or -hf suffix and a
// Meta- prefix removed when the plain name is not shipped itself), or a
// path to a config.json or its folder. Suffixes that change the weights
// (-FP8, -AWQ) are not removed: such a checkpoint is not the shipped one.
func ModelName(name string) (string, bool) {
	if _, err := os.Stat(name); err == nil {
		return name, true
	}
	shipped := shippedModels()
	base := strings.ToLower(strings.TrimSpace(name))
	if i := strings.LastIndex(base, "/"); i >= 0 {
		base = base[i+1:]
	}
	cands := []string{base}
	stripped := strings.TrimPrefix(base, "meta-")
	for _, suf := range []string{"-instruct", "-chat", "-hf", "-base"} {
		stripped = strings.TrimSuffix(stripped, suf)
	}
	cands = append(cands, stripped, strings.TrimPrefix(base, "meta-"))
	for _, c := range cands {
		if shipped[c] {
			return c, true
		}
	}
	if a, ok := sameArchitecture[base]; ok && shipped[a] {
		return a, true
	}
	return "", false
}

// sameArchitecture maps checkpoints (lower case, organisation dropped)
// whose config.json has the architecture and dtype of a shipped one under
// another name to that one. DeepSeek-V2.5 merges DeepSeek-V2-Chat and
// DeepSeek-Coder-V2-Instruct (its model card); the 1210 release and the
// 0628/0724 updates keep the architecture (samples/models/SOURCES.md).
var sameArchitecture = map[string]string{
	"deepseek-v2.5":                   "deepseek-v2",
	"deepseek-v2.5-1210":              "deepseek-v2",
	"deepseek-v2-chat-0628":           "deepseek-v2",
	"deepseek-coder-v2-instruct":      "deepseek-v2",
	"deepseek-coder-v2-instruct-0724": "deepseek-v2",
	"deepseek-coder-v2-base":          "deepseek-v2",
}

// shippedModels are the names in samples/models.
func shippedModels() map[string]bool {
	names := map[string]bool{}
	entries, err := fs.ReadDir(samples.FS, samples.Models)
	if err != nil {
		return names
	}
	for _, e := range entries {
		if e.IsDir() {
			names[e.Name()] = true
		}
	}
	return names
}
