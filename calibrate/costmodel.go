package calibrate

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opaltrace/opaltrace/model"
)

// CostModelVersion is the version of the costmodel.yaml layout.
const CostModelVersion = 1

// A CostModel is the content of a costmodel.yaml: fitted coefficients
// with their units and provenance, the deployment they were fitted for,
// and the fits they came from with their statistics.
type CostModel struct {
	Version  int    `yaml:"opaltrace_cost_model"`
	Form     string `yaml:"form"`
	Hardware string `yaml:"hardware,omitempty"`
	Model    string `yaml:"model,omitempty"`
	TP       int    `yaml:"tp,omitempty"`
	// Coefficients by name (see the Coef constants). Only identified
	// coefficients are written; the replay keeps its defaults for the
	// others.
	Coefficients map[string]Coefficient `yaml:"coefficients"`
	Fits         []*Fit                 `yaml:"fits,omitempty"`
	// Replay is the fit by replay in the loop the coefficients came
	// from, when they did (FitReplay).
	Replay   *ReplayFit `yaml:"replay_fit,omitempty"`
	Warnings []string   `yaml:"warnings,omitempty"`
}

// A Coefficient is one fitted value.
type Coefficient struct {
	Value float64 `yaml:"value"`
	Unit  string  `yaml:"unit"`
	From  string  `yaml:"from"` // the fit and term it was derived from
}

// Coefficient names of a costmodel.yaml.
const (
	CoefMFU          = "mfu"
	CoefAttentionMFU = "attention_mfu"
	// CoefExpertMFU is the routed experts' GEMMs' fraction of peak
	// FLOP/s (model.Deployment.ExpertMFU); absent, mfu prices them.
	CoefExpertMFU    = "expert_mfu"
	CoefBandwidthEff = "bandwidth_efficiency"
	// CoefKVBandwidthEff is the attention kernels' fraction of HBM
	// bandwidth on KV reads and writes (model.Deployment.
	// KVBandwidthEfficiency); absent, bandwidth_efficiency prices them.
	CoefKVBandwidthEff = "kv_bandwidth_efficiency"
	CoefLinkEff        = "link_efficiency"
	CoefStepOverhead   = "step_overhead_s"
	CoefOpalA          = "opal_a"
	CoefOpalB          = "opal_b"
	CoefOpalBandwidth  = "opal_bandwidth_bytes_per_s"
	CoefNVMeBandwidth  = "nvme_bandwidth_bytes_per_s"
	CoefNVMeLatency    = "nvme_latency_s"
	CoefPCIeBandwidth  = "pcie_bandwidth_bytes_per_s"
	CoefPCIeLatency    = "pcie_latency_s"
	// CoefCollectiveLatency is NCCL's α, the fixed cost of one
	// collective (model.Deployment.CollectiveLatency).
	CoefCollectiveLatency = "collective_latency_s"
	// CoefRequestOverhead and CoefChunkOverhead are the client/API
	// overheads (ClientOverhead).
	CoefRequestOverhead = "client_request_overhead_s"
	CoefChunkOverhead   = "client_chunk_overhead_s"
	// CoefAPIServer is the API server's serial time per request
	// (replay.ClientConfig.APIServerRequestSec): a queue, where the
	// per-request overhead is a delay (apiserver.go).
	CoefAPIServer = "api_server_request_s"
	// CoefEagerLayerLaunch is the CPU time to launch one layer's kernels
	// in a step that runs without a CUDA graph (model.Deployment.
	// EagerLayerLaunch): SGLang's decode batches above cuda_graph_max_bs
	// and its prefill steps.
	CoefEagerLayerLaunch = "eager_layer_launch_s"
	// CoefEagerLayerCPU is the host's time to issue one layer's kernels
	// in a step without a CUDA graph, as a bound the step's GPU time
	// hides when longer (model.Deployment.EagerLayerCPU): launches run
	// ahead of the GPU, so they cost only what the GPU work does not
	// cover.
	CoefEagerLayerCPU = "eager_layer_cpu_s"
	// CoefUncompiledLayer is what one layer of a step costs more when it
	// is not torch-compiled, on an engine that compiles its small decode
	// batches (model.Deployment.UncompiledLayer): SGLang's plain-graph
	// and eager steps under --enable-torch-compile.
	CoefUncompiledLayer = "uncompiled_layer_s"
	// CoefSerialFraction is the share of the lesser of a step's compute
	// and memory times not hidden under the greater (model.Deployment.
	// SerialFraction): 0 the roofline's max, 1 their sum.
	CoefSerialFraction = "serial_fraction"
)

var coefUnits = map[string]string{
	CoefMFU:            "fraction of peak FLOP/s",
	CoefAttentionMFU:   "fraction of peak FLOP/s",
	CoefExpertMFU:      "fraction of peak FLOP/s",
	CoefBandwidthEff:   "fraction of peak memory bandwidth",
	CoefKVBandwidthEff: "fraction of peak memory bandwidth",
	CoefLinkEff:        "fraction of link bandwidth",
	CoefStepOverhead:   "s",
	CoefOpalA:          "FLOP per (layer·hidden·token pair)",
	CoefOpalB:          "FLOP per (layer·hidden²·token)",
	CoefOpalBandwidth:  "B/s",
	CoefNVMeBandwidth:  "B/s",
	CoefNVMeLatency:    "s",
	CoefPCIeBandwidth:  "B/s",
	CoefPCIeLatency:    "s",

	CoefCollectiveLatency: "s per collective",
	CoefRequestOverhead:   "s per request",
	CoefChunkOverhead:     "s per streamed chunk",
	CoefAPIServer:         "s per request, serial",
	CoefEagerLayerLaunch:  "s per layer of a step without a CUDA graph",
	CoefEagerLayerCPU:     "s per layer of a step without a CUDA graph, a bound on the step",
	CoefUncompiledLayer:   "s per layer of a step not torch-compiled",
	CoefSerialFraction:    "fraction of the lesser of compute and memory time",
}

// NewCostModel derives the coefficients of a cost model from the fits of
// res. dep is the deployment the fits were computed for; hardware and
// model name it in the file.
func NewCostModel(res *Result, dep *model.Deployment, hardware, modelName string) *CostModel {
	cm := &CostModel{
		Version: CostModelVersion, Form: res.Form, Hardware: hardware, Model: modelName, TP: dep.TP,
		Coefficients: map[string]Coefficient{}, Fits: res.Fits,
	}
	cm.Warnings = append(cm.Warnings, res.Warnings...)
	set := func(name string, v float64, from string) {
		if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
			cm.Coefficients[name] = Coefficient{Value: v, Unit: coefUnits[name], From: from}
		}
	}
	term := func(q, name string) (float64, bool) {
		f := res.Fit(q)
		if f == nil {
			return 0, false
		}
		t := f.Term(name)
		if t == nil || !t.Identified || t.Value <= 0 {
			return 0, false
		}
		return t.Value, true
	}
	from := func(q, name string) string { return q + "." + name }

	if res.Form == model.FormOpal {
		if v, ok := term(QPrefill, TermOpalA); ok {
			set(CoefOpalA, v, from(QPrefill, TermOpalA))
		}
		if v, ok := term(QPrefill, TermOpalB); ok {
			set(CoefOpalB, v, from(QPrefill, TermOpalB))
		}
		if v, ok := term(QDecode, TermInvBWEff); ok {
			set(CoefOpalBandwidth, dep.Hardware.MemBandwidth/v, from(QDecode, TermInvBWEff))
		}
	} else {
		for _, c := range []struct{ term, coef string }{{TermInvMFU, CoefMFU}, {TermInvAttnMFU, CoefAttentionMFU}, {TermInvExpertMFU, CoefExpertMFU}} {
			if v, ok := term(QPrefill, c.term); ok {
				if 1/v > 1 {
					cm.Warnings = append(cm.Warnings, fmt.Sprintf("%s = %.3f exceeds peak, not used: the prefill times are shorter than the shape allows (wrong model, hardware or parallelism?)", c.coef, 1/v))
				} else {
					set(c.coef, 1/v, from(QPrefill, c.term))
				}
			}
		}
		if v, ok := term(QDecode, TermInvBWEff); ok && 1/v > 1 {
			cm.Warnings = append(cm.Warnings, fmt.Sprintf("%s = %.3f exceeds peak, not used: decode is faster than its KV reads allow at full bandwidth, so the fit has attributed KV time elsewhere (steps where decode hides under a prefill chunk's compute?)", CoefBandwidthEff, 1/v))
		} else if ok {
			set(CoefBandwidthEff, 1/v, from(QDecode, TermInvBWEff))
		}
	}
	// The step overhead: a decode step is the overhead plus the weight
	// read, which the decode fit separates once it knows the bandwidth
	// efficiency; a prefill's fixed cost also carries one weight read
	// and overhead per chunk, so its intercept is the fallback.
	overheadSet := false
	if v, ok := term(QDecode, TermInvBWEff); ok && res.Form == model.FormRoofline && 1/v <= 1 {
		if base, ok := term(QDecode, TermDecodeBase); ok {
			w := dep.Terms(&model.Batch{Decode: []int64{0}}).WeightSec
			if oh := base - w*v; oh > 0 {
				set(CoefStepOverhead, oh, from(QDecode, TermDecodeBase)+" − weight read")
				overheadSet = true
			} else {
				cm.Warnings = append(cm.Warnings, fmt.Sprintf("step overhead not derived from decode: the base %.3g s is below the weight read %.3g s at the fitted efficiency", base, w*v))
			}
		}
	}
	if v, ok := term(QPrefill, TermOverhead); ok && !overheadSet {
		if base, ok := term(QDecode, TermDecodeBase); ok && v > base {
			cm.Warnings = append(cm.Warnings, fmt.Sprintf("prefill's step overhead %.3g s exceeds the whole decode step base %.3g s: not used as step overhead", v, base))
		} else {
			set(CoefStepOverhead, v, from(QPrefill, TermOverhead))
		}
	}
	if v, ok := term(QDecode, TermEagerLayers); ok {
		set(CoefEagerLayerLaunch, v, from(QDecode, TermEagerLayers))
	}
	// Two estimates of 1/MFU: the prefill fit's, and the decode fit's
	// price of the prefill compute that shared decode steps.
	if a, ok := term(QPrefill, TermInvMFU); ok {
		if b, ok := term(QDecode, TermPrefillStall); ok && math.Abs(a-b) > 0.15*b {
			cm.Warnings = append(cm.Warnings, fmt.Sprintf("mfu from prefill_s (%.3f) and from the prefill stalls of decode_s_per_token (%.3f) differ by more than 15%%: the prefill times carry contention the model does not see", 1/a, 1/b))
		}
	}
	for _, tier := range []struct{ q, bw, lat string }{
		{QStorage, CoefNVMeBandwidth, CoefNVMeLatency},
		{QHost, CoefPCIeBandwidth, CoefPCIeLatency},
	} {
		if v, ok := term(tier.q, TermSecPerByte); ok {
			set(tier.bw, 1/v, from(tier.q, TermSecPerByte))
		}
		if v, ok := term(tier.q, TermLatency); ok {
			set(tier.lat, v, from(tier.q, TermLatency))
		}
	}
	for _, f := range res.Fits {
		cm.Warnings = append(cm.Warnings, f.Warnings...)
	}
	return cm
}

// Marshal returns the YAML of cm (map keys sorted, so the same fits give
// the same bytes).
func (cm *CostModel) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# opaltrace cost model: coefficients fitted by `opaltrace calibrate`, with the fits they came from.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cm); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// coefRange is the range a coefficient's value must lie in, by its unit:
// [min, max], and what the values are, for the message.
//
// Note: the bounds keep every price finite and every value physical. A
// fraction of peak is at most 1, whoever wrote it: NewCostModel leaves out
// a least-squares fit's value above 1, FitReplay's search stops at 1
// (with a warning that something is mispriced), and a file with one is
// refused; a tiny one, or a tiny bandwidth, made a step or a transfer
// longer than time.Duration holds (an mfu of 1e-300 priced a step at
// −2562047h47m). A fixed cost over an hour is no cost model, and
// nvme_latency_s: 1e300 overflowed into a negative latency.
func coefRange(name string) (lo, hi float64, what string) {
	switch coefUnits[name] {
	case "fraction of peak FLOP/s", "fraction of peak memory bandwidth", "fraction of link bandwidth":
		return 1e-3, 1, "a fraction of peak"
	case "fraction of the lesser of compute and memory time":
		return 1e-9, 1, "a fraction"
	case "B/s":
		return 1e6, 1e15, "a bandwidth in B/s (1 MB/s to 1 PB/s)"
	case "FLOP per (layer·hidden·token pair)", "FLOP per (layer·hidden²·token)":
		return 1e-3, 1e6, "a FLOP coefficient"
	}
	return 1e-9, 3600, "a time in seconds (1 ns to an hour)"
}

// ParseCostModel reads a costmodel.yaml. Unknown keys and coefficient
// names are errors, as are values out of their range (coefRange); an error
// names the file, the line and the key.
func ParseCostModel(file string, data []byte) (*CostModel, error) {
	var cm CostModel
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cm); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%s:1: empty cost model (want opaltrace_cost_model: %d and coefficients)", file, CostModelVersion)
		}
		return nil, yamlError(file, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, fmt.Errorf("%s:%d: a second YAML document: a cost model is one document", file, max(extra.Line, 1))
	}
	if cm.Version != CostModelVersion {
		return nil, fmt.Errorf("%s:%d: opaltrace_cost_model: version %d, want %d", file, yamlLine(&doc, "opaltrace_cost_model"), cm.Version, CostModelVersion)
	}
	switch cm.Form {
	case "":
		cm.Form = model.FormRoofline
	case model.FormRoofline, model.FormOpal:
	default:
		return nil, fmt.Errorf("%s:%d: form: %q, want %s or %s", file, yamlLine(&doc, "form"), cm.Form, model.FormRoofline, model.FormOpal)
	}
	names := make([]string, 0, len(cm.Coefficients))
	for name := range cm.Coefficients {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c := cm.Coefficients[name]
		v := c.Value
		line := yamlLine(&doc, "coefficients", name)
		if _, ok := coefUnits[name]; !ok {
			return nil, fmt.Errorf("%s:%d: coefficients.%s: unknown coefficient", file, line, name)
		}
		if lo, hi, what := coefRange(name); !(v >= lo && v <= hi) {
			return nil, fmt.Errorf("%s:%d: coefficients.%s: %v is not %s in [%g, %g]", file, line, name, v, what, lo, hi)
		}
	}
	return &cm, nil
}

// yamlError turns a decoding error into FILE:LINE: what, the line taken
// from yaml's "line N: " (the first error, when there are several).
func yamlError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if te, ok := err.(*yaml.TypeError); ok && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d: ", &line); n == 1 {
		msg = msg[strings.Index(msg, ": ")+2:]
		if f, ok := strings.CutPrefix(msg, "field "); ok {
			if k, _, ok := strings.Cut(f, " not found in type"); ok {
				msg = k + ": unknown key"
			}
		}
		return fmt.Errorf("%s:%d: %s", file, line, msg)
	}
	return fmt.Errorf("%s: %s", file, msg)
}

// yamlLine returns the line of the value at path (mapping keys from the
// top) in doc, or of the deepest part of the path found; 1 when none is.
func yamlLine(doc *yaml.Node, path ...string) int {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := max(n.Line, 1)
	for _, key := range path {
		next := (*yaml.Node)(nil)
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				line = n.Content[i].Line
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

// Check returns an error when cm was fitted for another GPU or model
// than the ones named by hardware and model. The layout does not count:
// the coefficients describe the GPU and the model (efficiencies, fixed
// costs, the latency of one collective), and the roofline prices any TP,
// PP or EP from them, so a cost model fitted on TP8 prices TP4×PP2. tp
// is the layout asked for; the file's TP says what it was fitted on.
func (cm *CostModel) Check(hardware, modelName string, tp int) error {
	var diff []string
	if cm.Hardware != "" && !strings.EqualFold(cm.Hardware, hardware) {
		diff = append(diff, fmt.Sprintf("hardware %s (cluster: %s)", cm.Hardware, hardware))
	}
	if cm.Model != "" && cm.Model != modelName {
		diff = append(diff, fmt.Sprintf("model %s (cluster: %s)", cm.Model, modelName))
	}
	if len(diff) > 0 {
		return fmt.Errorf("cost model was fitted for %s", strings.Join(diff, ", "))
	}
	return nil
}

func (cm *CostModel) get(name string) (float64, bool) {
	c, ok := cm.Coefficients[name]
	return c.Value, ok
}

// Apply sets the roofline coefficients of d that cm holds.
func (cm *CostModel) Apply(d *model.Deployment) {
	if v, ok := cm.get(CoefMFU); ok {
		d.MFU = v
	}
	if v, ok := cm.get(CoefAttentionMFU); ok {
		d.AttentionMFU = v
	}
	if v, ok := cm.get(CoefExpertMFU); ok {
		d.ExpertMFU = v
	}
	if v, ok := cm.get(CoefBandwidthEff); ok {
		d.BandwidthEfficiency = v
	}
	if v, ok := cm.get(CoefKVBandwidthEff); ok {
		d.KVBandwidthEfficiency = v
	}
	if v, ok := cm.get(CoefLinkEff); ok {
		d.LinkEfficiency = v
	}
	if v, ok := cm.get(CoefStepOverhead); ok {
		d.StepOverhead = time.Duration(math.Round(v * 1e9))
	}
	if v, ok := cm.get(CoefCollectiveLatency); ok {
		d.CollectiveLatency = time.Duration(math.Round(v * 1e9))
	}
	if v, ok := cm.get(CoefEagerLayerLaunch); ok {
		d.EagerLayerLaunch = time.Duration(math.Round(v * 1e9))
	}
	if v, ok := cm.get(CoefEagerLayerCPU); ok {
		d.EagerLayerCPU = time.Duration(math.Round(v * 1e9))
	}
	if v, ok := cm.get(CoefUncompiledLayer); ok {
		d.UncompiledLayer = time.Duration(math.Round(v * 1e9))
	}
	if v, ok := cm.get(CoefSerialFraction); ok {
		d.SerialFraction = v
	}
}

// ApplyNode sets the link coefficients of n that cm holds and returns
// the keys it set. The fits (calibrate --server-side) see a worker's
// whole KV load per request, spread over its gpusPerWorker GPUs, each
// loading its share over its own PCIe link at the same time: the fitted
// bandwidth is theirs together, so one GPU's link (model.Node.PCIe, per
// GPU and direction, as the replay prices it) is that divided by them.
// NVMe is the node's, shared by its GPUs, and taken as fitted.
func (cm *CostModel) ApplyNode(n *model.Node, gpusPerWorker int) []string {
	var set []string
	if v, ok := cm.get(CoefNVMeBandwidth); ok {
		n.NVMe.Bandwidth = v
		set = append(set, CoefNVMeBandwidth)
	}
	if v, ok := cm.get(CoefNVMeLatency); ok {
		n.NVMe.Latency = time.Duration(math.Round(v * 1e9))
		set = append(set, CoefNVMeLatency)
	}
	if v, ok := cm.get(CoefPCIeBandwidth); ok {
		n.PCIe.Bandwidth = v / float64(max(gpusPerWorker, 1))
		set = append(set, CoefPCIeBandwidth)
	}
	if v, ok := cm.get(CoefPCIeLatency); ok {
		n.PCIe.Latency = time.Duration(math.Round(v * 1e9))
		set = append(set, CoefPCIeLatency)
	}
	return set
}

// StepModel returns the step model of cm's form for d, with cm's
// coefficients: d itself (coefficients applied) for the roofline, an
// OpalStep for the Opal form.
func (cm *CostModel) StepModel(d *model.Deployment) (model.StepModel, error) {
	if cm.Form != model.FormOpal {
		cm.Apply(d)
		return d, nil
	}
	o, err := model.NewOpalStep(d.LLM, d.Hardware, d.TP)
	if err != nil {
		return nil, err
	}
	if v, ok := cm.get(CoefOpalA); ok {
		o.A = v
	}
	if v, ok := cm.get(CoefOpalB); ok {
		o.B = v
	}
	if v, ok := cm.get(CoefOpalBandwidth); ok {
		o.Bandwidth = v
	}
	if v, ok := cm.get(CoefStepOverhead); ok {
		o.StepOverhead = time.Duration(math.Round(v * 1e9))
	}
	return o, nil
}

// StartValues returns the coefficients of cm a replay fit can start
// from (ReplayOptions.Start): those of ReplayCoefficients it holds, but
// attention's efficiency where it only followed MFU's (tied: the fit
// that starts from it ties them again unless it fits it).
func (cm *CostModel) StartValues() map[string]float64 {
	out := map[string]float64{}
	for _, name := range ReplayCoefficients {
		c, ok := cm.Coefficients[name]
		if !ok || c.From == tiedToMFUFrom {
			continue
		}
		out[name] = c.Value
	}
	return out
}
