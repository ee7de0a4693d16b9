package opal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// A Config is an Opal sim_config.json, read whole (opal-sim@bc1e67e's
// configs/defaults.json and configs/hf.json define the keys).
type Config struct {
	File string

	// simulation
	NumWorkers     int
	Seed           uint64
	SimulationTime float64 // ≤ 0: until the workload is done

	// model: the model Opal's config_dir search (or hf_url) finds.
	ModelName string
	ModelFrom string // where the config.json came from: a path, or "shipped NAME"
	LLM       model.LLM

	// router.router_params
	Policy            string // MaxPrefix, Random, RoundRobin, LeastLoaded
	EnableScaling     bool
	MaxQueueThreshold float64
	ScaleLatency      float64
	MaxWorkers        int

	// worker
	KVCEventCoalesceSec float64 // worker_params.kvcevent_coalesce_time
	GPU                 string  // hw.gpu
	MemoryGB            float64
	TFLOPS              float64
	MemBWTBps           float64
	TP                  int
	MaxNumSeqs          int
	MaxNumBatchedTokens int64
	MaxKVCReadyRequests int
	LookaheadReqs       int
	ChunkedPrefill      bool
	BlockSize           int64
	InferenceModel      string // roofline (synthetic is refused)
	A, B                float64

	// kvc
	KVChunk int64
	Tiers   []replay.OpalTier

	Workload *replay.OpalWorkload
}

// Load reads the Opal config at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// LoadCluster reads the Opal config at path for its cluster alone
// (ClusterYAML, --print-config): a trace stage's trace_file that cannot
// be found is no error but a note, the stage's TraceFile left empty, so
// that a config copied from another machine shows its cluster. Every
// other error is Load's.
func LoadCluster(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var missing []string
	c, err := parse(path, data, func(err error) { missing = append(missing, err.Error()+": a replay needs it") })
	return c, missing, err
}

// opalKeys are the keys an Opal config may have, by section path; a
// stage's workload_params are checked by its type (stageKeys).
var opalKeys = map[string][]string{
	"":                        {"simulation", "model", "router", "workload", "worker", "kvc"},
	"simulation":              {"simulation_time", "simulation_duration", "seed", "num_workers", "save_simulation_data", "show_progress"},
	"model":                   {"model_params"},
	"model.model_params":      {"name", "config_dir", "hf_url"},
	"router":                  {"router_params"},
	"router.router_params":    {"enable_scaling", "max_queue_threshold", "scale_latency", "max_workers", "policy", "periodic_infra_update_collection_time", "max_event_batch_size"},
	"workload":                {"stages", "type", "workload_params"},
	"worker":                  {"worker_params", "hw", "vllm_params", "inference_params"},
	"worker.worker_params":    {"worker_local_queue_capacity", "periodic_infra_update_time", "kvcevent_coalesce_time"},
	"worker.hw":               {"gpu", "memory_gb", "tflops", "mem_bw_TBps", "tp"},
	"worker.vllm_params":      {"max_num_seqs", "max_num_batched_tokens", "max_kvc_ready_requests", "chunked_prefill", "block_size", "lookahead_reqs"},
	"worker.inference_params": {"model", "mean_latency_secs", "a", "b"},
	"kvc":                     {"kvc_tiers", "chunk_size", "save_unfull_chunk", "CPUMemory", "LocalNVMe", "DistributedFS"},
}

var tierKeys = []string{"bandwidth_GBps", "latency_nsec", "concurrency", "capacity_GB"}

var stageKeys = map[string][]string{
	"uniformreqrate":     {"request_rate", "total_requests", "prompt_size_min", "prompt_size_max", "default_prefix_length", "jitter", "output_tokens_min", "output_tokens_max", "time_duration_sec", "prompt_size_mean", "prompt_size_stdev", "output_tokens_mean", "output_tokens_stdev"},
	"exponentialreqrate": {"request_rate", "total_requests", "prompt_size_min", "prompt_size_max", "default_prefix_length", "jitter", "output_tokens_min", "output_tokens_max", "time_duration_sec", "prompt_size_mean", "prompt_size_stdev", "output_tokens_mean", "output_tokens_stdev"},
	"trace":              {"total_requests", "chunk_size", "multiplier_to_sec", "trace_file", "time_duration_sec"},
}

var stagePath = regexp.MustCompile(`^workload\.stages\[\d+\]$`)

// Parse reads an Opal config, named file in errors. It is strict: an
// unknown key, a value of the wrong type or out of range is an error
// "FILE:LINE: KEY: what is wrong".
func Parse(file string, data []byte) (*Config, error) {
	return parse(file, data, nil)
}

// parse is Parse, with missing (when not nil) given the error of each
// trace_file that cannot be found instead of returning it.
func parse(file string, data []byte, missing func(error)) (*Config, error) {
	d, err := parseDoc(file, data)
	if err != nil {
		return nil, err
	}
	if err := d.checkKeys(); err != nil {
		return nil, err
	}
	r := &reader{doc: d}
	c := &Config{File: file}
	c.NumWorkers = int(r.integer("simulation.num_workers", true, 1, 1, deploy.MaxWorkers))
	c.Seed = uint64(r.integer("simulation.seed", false, 0, 0, math.MaxInt64))
	c.SimulationTime = r.num("simulation.simulation_time", false, -1)

	c.Policy = r.str("router.router_params.policy", false, "MaxPrefix")
	if !slices.Contains([]string{"MaxPrefix", "Random", "RoundRobin", "LeastLoaded"}, c.Policy) && r.err == nil {
		r.fail("router.router_params.policy", "%q: want MaxPrefix, Random, RoundRobin or LeastLoaded", c.Policy)
	}
	c.EnableScaling = r.boolean("router.router_params.enable_scaling", false)
	c.MaxQueueThreshold = r.num("router.router_params.max_queue_threshold", false, 4)
	c.ScaleLatency = r.num("router.router_params.scale_latency", false, 40)
	c.MaxWorkers = int(r.integer("router.router_params.max_workers", false, 50, 1, deploy.MaxWorkers))

	c.KVCEventCoalesceSec = r.num("worker.worker_params.kvcevent_coalesce_time", false, 30)
	c.GPU = r.str("worker.hw.gpu", true, "")
	c.MemoryGB = r.positive("worker.hw.memory_gb", true, 0)
	c.TFLOPS = r.positive("worker.hw.tflops", true, 0)
	c.MemBWTBps = r.positive("worker.hw.mem_bw_TBps", true, 0)
	c.TP = int(r.integer("worker.hw.tp", false, 1, 1, 1024))
	c.MaxNumSeqs = int(r.integer("worker.vllm_params.max_num_seqs", true, 0, 1, 1<<20))
	c.MaxNumBatchedTokens = r.integer("worker.vllm_params.max_num_batched_tokens", true, 0, 1, 1<<30)
	c.MaxKVCReadyRequests = int(r.integer("worker.vllm_params.max_kvc_ready_requests", true, 0, 1, 1<<20))
	c.LookaheadReqs = int(r.integer("worker.vllm_params.lookahead_reqs", false, 256, 1, 1<<30))
	c.ChunkedPrefill = r.boolean("worker.vllm_params.chunked_prefill", true)
	c.BlockSize = r.integer("worker.vllm_params.block_size", false, 16, 1, 1<<20)
	c.InferenceModel = r.str("worker.inference_params.model", true, "")
	if !strings.EqualFold(c.InferenceModel, "roofline") && r.err == nil {
		r.fail("worker.inference_params.model", "%q: only Opal's roofline model is replayed (its synthetic model draws a step time per step)", c.InferenceModel)
	}
	c.A = r.positive("worker.inference_params.a", true, 0)
	c.B = r.positive("worker.inference_params.b", true, 0)

	c.KVChunk = r.integer("kvc.chunk_size", false, 256, 1, 1<<20)
	for i, name := range r.strings("kvc.kvc_tiers") {
		at := "kvc.kvc_tiers[" + strconv.Itoa(i) + "]"
		if !slices.Contains([]string{"CPUMemory", "LocalNVMe", "DistributedFS"}, name) {
			r.fail(at, "%q: want CPUMemory, LocalNVMe or DistributedFS", name)
			continue
		}
		if slices.ContainsFunc(c.Tiers, func(t replay.OpalTier) bool { return t.Name == name }) {
			r.fail(at, "%s is listed twice", name)
			continue
		}
		sec := "kvc." + name
		if _, ok := d.get(sec); !ok {
			r.fail(at, "the tier has no section kvc.%s (bandwidth_GBps, latency_nsec, capacity_GB)", name)
			continue
		}
		c.Tiers = append(c.Tiers, replay.OpalTier{
			Name:          name,
			BandwidthGBps: r.positive(sec+".bandwidth_GBps", true, 0),
			LatencyNsec:   r.nonNegative(sec+".latency_nsec", true),
			CapacityGB:    r.nonNegative(sec+".capacity_GB", true),
			Shared:        name == "DistributedFS",
		})
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := c.resolveModel(d); err != nil {
		return nil, err
	}
	w, err := replay.ParseOpalWorkload(data, file)
	if err != nil {
		return nil, d.lineError(err)
	}
	for i := range w.Stages {
		s := &w.Stages[i]
		if s.Type != "trace" {
			continue
		}
		at := fmt.Sprintf("workload.stages[%d].workload_params.trace_file", i)
		raw, _ := d.get(at)
		name, _ := raw.(string)
		p, err := findFile(file, name, false)
		if err != nil {
			if missing == nil {
				return nil, d.errorf(at, "%v", err)
			}
			missing(d.errorf(at, "%v", err))
		}
		s.TraceFile = p
	}
	c.Workload = w
	return c, nil
}

// lineError adds the line to an error of replay.ParseOpalWorkload,
// "FILE: PATH: what".
func (d *doc) lineError(err error) error {
	msg := err.Error()
	prefix := d.file + ": "
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	rest := msg[len(prefix):]
	path, what, ok := strings.Cut(rest, ": ")
	if !ok || strings.ContainsAny(path, " /") {
		return fmt.Errorf("%s:1: %s", d.file, rest)
	}
	return fmt.Errorf("%s:%d: %s: %s", d.file, d.line(path), path, what)
}

// checkKeys reports the first key no Opal config has.
func (d *doc) checkKeys() error {
	for _, p := range d.paths {
		if strings.HasSuffix(p, "]") {
			continue // a list element
		}
		parent, key := "", p
		if i := strings.LastIndexByte(p, '.'); i >= 0 {
			parent, key = p[:i], p[i+1:]
		}
		var allowed []string
		switch {
		case stagePath.MatchString(parent):
			allowed = []string{"type", "workload_params"}
		case strings.HasSuffix(parent, ".workload_params") && strings.HasPrefix(parent, "workload"):
			typ, _ := d.get(strings.TrimSuffix(parent, ".workload_params") + ".type")
			ts, _ := typ.(string)
			var ok bool
			if allowed, ok = stageKeys[strings.ToLower(ts)]; !ok {
				continue // the stage type is reported by the workload's reader
			}
		case strings.HasPrefix(parent, "kvc.") && strings.Count(parent, ".") == 1:
			allowed = tierKeys
		default:
			var ok bool
			if allowed, ok = opalKeys[parent]; !ok {
				continue // inside a value already reported or not a section
			}
		}
		if !slices.Contains(allowed, key) {
			where := parent
			if where == "" {
				where = "the top level"
			}
			return d.errorf(p, "unknown key in %s (want one of %s)", where, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// resolveModel finds the model as Opal does: model_params.config_dir is
// searched, recursively, for a folder named after model_params.name
// holding a config.json (opal/config/llm_model.py
// get_config_folder_for_model); a config_dir that is not there, or holds
// no such folder, falls back to the model of that name shipped with
// opaltrace, as does an hf_url (its last part is the name).
func (c *Config) resolveModel(d *doc) error {
	r := &reader{doc: d}
	name := r.str("model.model_params.name", false, "")
	hf := r.str("model.model_params.hf_url", false, "")
	dir := r.str("model.model_params.config_dir", false, "")
	if r.err != nil {
		return r.err
	}
	switch {
	case hf != "" && dir != "":
		return d.errorf("model.model_params", "both hf_url and config_dir: Opal takes exactly one")
	case hf != "":
		if name == "" {
			name = hf[strings.LastIndexByte(hf, '/')+1:]
		}
	case name == "":
		return d.errorf("model.model_params.name", "missing: Opal looks the model up by name in config_dir")
	}
	c.ModelName = name
	if dir != "" {
		if root, err := findFile(c.File, dir, true); err == nil {
			if p := modelFolder(root, name); p != "" {
				m, err := model.LoadConfig(p)
				if err != nil {
					return d.errorf("model.model_params.config_dir", "%v", err)
				}
				c.LLM, c.ModelFrom = m, p
				c.LLM.Name = name
				return nil
			}
		}
	}
	key := "model.model_params.name"
	if hf != "" {
		key, name = "model.model_params.hf_url", hf
	}
	m, err := deploy.LoadLLM(name)
	if err != nil {
		return d.errorf(key, "no folder %q with a config.json under config_dir %q, and opaltrace ships no such model: %v", c.ModelName, dir, err)
	}
	c.LLM, c.ModelFrom = m, "shipped "+m.Name
	return nil
}

// maxModelFolders bounds the folders the config_dir search visits, so
// that a config_dir of "/" gives up instead of walking the machine.
const maxModelFolders = 1000

// modelFolder returns the first folder under root (walked in lexical
// order, at most maxModelFolders) that has name among its path's parts
// and holds a config.json.
func modelFolder(root, name string) string {
	var found string
	visited := 0
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || found != "" || !e.IsDir() {
			return nil
		}
		if visited++; visited > maxModelFolders {
			return filepath.SkipAll
		}
		if slices.Contains(strings.Split(filepath.ToSlash(p), "/"), name) {
			if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil {
				found = p
				return filepath.SkipAll
			}
		}
		return nil
	})
	return found
}

// findFile resolves a path an Opal config names. Opal opens it relative
// to its working directory, an Opal checkout whose configs sit in
// configs/; here a relative path is looked for in the working directory,
// then beside the config and in each folder above it, and last as a bare
// name beside the config (a config copied next to its trace). An absolute
// path is taken as it is.
func findFile(config, name string, dir bool) (string, error) {
	if name == "" {
		return "", errors.New("empty")
	}
	ok := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.IsDir() == dir
	}
	if filepath.IsAbs(name) {
		if ok(name) {
			return name, nil
		}
		return "", fmt.Errorf("%s: not found", name)
	}
	tried := []string{name}
	if ok(name) {
		return name, nil
	}
	for d := filepath.Dir(config); ; d = filepath.Dir(d) {
		p := filepath.Join(d, name)
		tried = append(tried, p)
		if ok(p) {
			return p, nil
		}
		if up := filepath.Dir(d); up == d || d == "." {
			break
		}
	}
	p := filepath.Join(filepath.Dir(config), filepath.Base(name))
	if ok(p) {
		return p, nil
	}
	return "", fmt.Errorf("%q not found (looked in the working directory, beside the config and in the folders above it: %s)", name, strings.Join(tried, ", "))
}

// reader takes values out of a doc, keeping the first error.
type reader struct {
	*doc
	err error
}

func (r *reader) fail(path, format string, a ...any) {
	if r.err == nil {
		r.err = r.errorf(path, format, a...)
	}
}

// num reads a number; Opal casts strings ("a": "4") with float(), so a
// numeric string is a number too.
func (r *reader) num(path string, required bool, def float64) float64 {
	v, ok := r.get(path)
	if !ok {
		if required {
			r.fail(path, "missing")
		}
		return def
	}
	var f float64
	var err error
	switch x := v.(type) {
	case json.Number:
		f, err = x.Float64()
	case string:
		f, err = strconv.ParseFloat(strings.TrimSpace(x), 64)
	default:
		err = errors.New("not a number")
	}
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail(path, "%s is not a finite number", jsonText(v))
		return def
	}
	return f
}

func (r *reader) positive(path string, required bool, def float64) float64 {
	f := r.num(path, required, def)
	if _, ok := r.get(path); ok && !(f > 0) {
		r.fail(path, "%v: want a positive number", f)
	}
	return f
}

func (r *reader) nonNegative(path string, required bool) float64 {
	f := r.num(path, required, 0)
	if f < 0 {
		r.fail(path, "%v: want a number ≥ 0", f)
	}
	return f
}

// integer reads a whole number in [lo, hi].
func (r *reader) integer(path string, required bool, def, lo, hi int64) int64 {
	v, ok := r.get(path)
	f := r.num(path, required, float64(def))
	if !ok || r.err != nil {
		return def
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		r.fail(path, "%s: want a whole number from %d to %d", jsonText(v), lo, hi)
		return def
	}
	return int64(f)
}

func (r *reader) str(path string, required bool, def string) string {
	v, ok := r.get(path)
	if !ok {
		if required {
			r.fail(path, "missing")
		}
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		r.fail(path, "%s: want a string", jsonText(v))
		return def
	}
	return s
}

// boolean reads true/false, or the strings Opal's parse_bool takes.
func (r *reader) boolean(path string, def bool) bool {
	v, ok := r.get(path)
	if !ok {
		return def
	}
	switch x := v.(type) {
	case bool:
		return x
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "1", "yes":
			return true
		case "false", "0", "no":
			return false
		}
	}
	r.fail(path, "%s: want true or false", jsonText(v))
	return def
}

func (r *reader) strings(path string) []string {
	v, ok := r.get(path)
	if !ok {
		return nil
	}
	l, isList := v.([]any)
	if !isList {
		r.fail(path, "%s: want a list of tier names", jsonText(v))
		return nil
	}
	out := make([]string, len(l))
	for i, x := range l {
		s, isStr := x.(string)
		if !isStr {
			r.fail(path+"["+strconv.Itoa(i)+"]", "%s: want a tier name", jsonText(x))
		}
		out[i] = s
	}
	return out
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}
