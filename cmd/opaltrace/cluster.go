package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/samples"
)

// A cluster is the file form of `replay --config`: the deployment (GPU,
// model, parallelism, memory) and the replay settings (workers, router,
// scheduler, workload), in one YAML document.
type cluster struct {
	// Hardware is a GPU preset name (h100, h200, a100-80gb, l40s, b200).
	Hardware string `yaml:"hardware"`
	// Model is a model name shipped in samples/models (llama-3.1-8b,
	// llama-3.1-70b) or a path to a Hugging Face config.json or its folder.
	Model string `yaml:"model"`
	// TP is the tensor-parallel degree of each worker.
	TP int `yaml:"tp"`
	// GPUMemoryUtilization is vLLM's --gpu-memory-utilization.
	GPUMemoryUtilization float64 `yaml:"gpu_memory_utilization"`
	// HardwareOverride changes the preset's figures; with hardware
	// "custom" it describes the GPU (see model.HardwareSpec).
	HardwareOverride *model.HardwareSpec `yaml:"hardware_override,omitempty"`
	// PP, DP and EP are the pipeline, data and expert parallel sizes of
	// each worker (0: 1). EP is 1 or TP·DP.
	PP int `yaml:"pp,omitempty"`
	DP int `yaml:"dp,omitempty"`
	EP int `yaml:"ep,omitempty"`
	// KVCacheDType is vLLM's --kv-cache-dtype (auto, fp8, ...).
	KVCacheDType string `yaml:"kv_cache_dtype,omitempty"`
	// CostModel is a costmodel.yaml written by `opaltrace calibrate`
	// whose coefficients (and form) price the steps.
	CostModel string `yaml:"cost_model,omitempty"`

	replay.Config `yaml:",inline"`

	// perSecond, when set, is where replay writes its per-second
	// statistics (replay --per-second); not part of the file form.
	perSecond string
}

func defaultCluster() cluster {
	return cluster{Hardware: "h100", Model: "llama-3.1-8b", TP: 1, GPUMemoryUtilization: 0.9, Config: replay.DefaultConfig()}
}

// loadCluster reads a cluster file over the defaults. Unknown keys are
// errors: a typo must not silently leave a default in place.
func loadCluster(path string) (cluster, error) {
	c := defaultCluster()
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := c.Config.Validate(); err != nil {
		return c, fmt.Errorf("%s: %v", path, err)
	}
	return c, nil
}

// deployment builds the cost model of one worker.
func (c cluster) deployment() (*model.Deployment, error) {
	hw, err := model.ResolveHardware(c.Hardware, c.HardwareOverride)
	if err != nil {
		return nil, err
	}
	llm, err := loadLLM(c.Model)
	if err != nil {
		return nil, err
	}
	if llm, err = llm.WithKVCacheDType(c.KVCacheDType); err != nil {
		return nil, err
	}
	return model.NewParallelDeployment(hw, llm, model.Parallelism{TP: c.TP, PP: c.PP, DP: c.DP, EP: c.EP})
}

// stepModel returns what prices the steps: the deployment's roofline,
// or the cost model file's coefficients and form applied to it.
func (c cluster) stepModel(dep *model.Deployment) (model.StepModel, error) {
	if c.CostModel == "" {
		return dep, nil
	}
	data, err := os.ReadFile(c.CostModel)
	if err != nil {
		return nil, err
	}
	cm, err := calibrate.ParseCostModel(c.CostModel, data)
	if err != nil {
		return nil, err
	}
	if err := cm.Check(dep.Hardware.Name, dep.LLM.Name, dep.TP); err != nil {
		return nil, fmt.Errorf("%s: %v", c.CostModel, err)
	}
	return cm.StepModel(dep)
}

// costModelText says what priced the steps, for the outputs' metadata:
// the cost model file as written by calibrate, or the roofline with its
// coefficients.
func (c cluster) costModelText(dep *model.Deployment) (string, error) {
	if c.CostModel != "" {
		data, err := os.ReadFile(c.CostModel)
		return string(data), err
	}
	return fmt.Sprintf("roofline: %s on %d × %s (%.4g FLOP/s, %.4g B/s); mfu %g, attention_mfu %g, bandwidth_efficiency %g, link_efficiency %g, step_overhead %v\n",
		dep.LLM.Name, dep.TP, dep.Hardware.Name, dep.Hardware.PeakFLOPS, dep.Hardware.MemBandwidth,
		dep.MFU, dep.AttentionMFU, dep.BandwidthEfficiency, dep.LinkEfficiency, dep.StepOverhead), nil
}

// loadLLM resolves a shipped model name or a config.json path.
func loadLLM(name string) (model.LLM, error) {
	if _, err := os.Stat(name); err == nil {
		return model.LoadConfig(name)
	}
	sub, err := fs.Sub(samples.FS, samples.Models)
	if err != nil {
		return model.LLM{}, err
	}
	return model.LLMByName(sub, name)
}

// yaml returns the effective configuration, for the output's metadata.
func (c cluster) yaml() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return ""
	}
	return string(b)
}
