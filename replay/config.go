package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A Config describes the simulated cluster and workload. The zero values
// of its fields mean "default"; DefaultConfig spells the defaults out.
type Config struct {
	// Workers is the number of identical serving instances (default 1).
	Workers int `yaml:"workers"`
	// Router names the routing policy: "round_robin" (default),
	// "random" (uniform, from Seed) or another of the routers table
	// (router.go); RouterConfig holds their settings.
	Router       string       `yaml:"router"`
	RouterConfig RouterConfig `yaml:"router_config,omitempty"`
	// Autoscale sizes the fleet by a metric, as Kubernetes' HPA does
	// (autoscale.go); off unless its metric is set.
	Autoscale AutoscaleConfig `yaml:"autoscale,omitempty"`
	// Planner sizes an aggregated fleet as Dynamo's planner does
	// (plannerload.go: policy dynamo alone); a disaggregated fleet's is
	// Disaggregation.Planner.
	Planner PlannerConfig `yaml:"planner,omitempty"`
	// Disaggregation splits the workers into prefill and decode pools
	// (disagg.go); off unless its prefill_workers is set.
	Disaggregation DisaggregationConfig `yaml:"disaggregation,omitempty"`
	Scheduler      SchedulerConfig      `yaml:"scheduler"`
	Workload       WorkloadConfig       `yaml:"workload"`
	Client         ClientConfig         `yaml:"client"`
	// Seed seeds every random choice of the replay (math/rand/v2 PCG).
	Seed uint64 `yaml:"seed"`
}

// A SchedulerConfig holds one worker's vLLM v1 scheduler settings, named
// as vLLM names its engine arguments.
type SchedulerConfig struct {
	MaxNumBatchedTokens int64 `yaml:"max_num_batched_tokens"` // token budget per step (default 8192)
	MaxNumSeqs          int   `yaml:"max_num_seqs"`           // running requests at most (default 256)
	BlockSize           int64 `yaml:"block_size"`             // tokens per KV block (default 16)
	// EnablePrefixCaching turns the full-block prefix cache on (default
	// true; a pointer so that an explicit false differs from absent).
	EnablePrefixCaching *bool `yaml:"enable_prefix_caching"`
	// KVCacheTokens is each worker's KV capacity in tokens; 0 takes the
	// capacity the caller computed from the model (Run's kvBlocks).
	KVCacheTokens int64 `yaml:"kv_cache_tokens"`
	// StreamInterval is the engines' --stream-interval: the server sends
	// the first token at once and then a chunk every StreamInterval
	// tokens, and the rest with the last token (default 1: every token).
	StreamInterval int64 `yaml:"stream_interval"`

	// Engine names the scheduler each worker runs: "vllm" (default: vLLM
	// v1, vllm.go) or "sglang" (sglang.go); the schedulers table lists
	// them. The settings above are vLLM's, under its names (SGLang
	// ignores all but BlockSize, KVCacheTokens and StreamInterval); each
	// other engine's own settings are a struct of its file, inline here.
	Engine string `yaml:"engine,omitempty"`

	SGLangConfig `yaml:",inline"`
	// OffloadConfig holds the KV offloading settings (offload.go).
	OffloadConfig `yaml:",inline"`
}

// A ClientConfig describes the simulated benchmark client.
type ClientConfig struct {
	// LatencySec is the one-way time between the client and the server
	// (network, HTTP and SSE handling): a request reaches the router
	// LatencySec after it is sent, and each chunk reaches the client
	// LatencySec after the server sends it, so TTFT and E2E include it
	// twice and ITL not at all (default 0).
	LatencySec float64 `yaml:"latency_s"`
	// TimeoutSec is how long the client waits for a request's last
	// chunk before it gives up and closes the connection (0: forever).
	// The server notices one latency later and aborts the request at
	// once if it is waiting or between steps, else when its step ends;
	// the record has status timeout.
	TimeoutSec float64 `yaml:"timeout_s"`
	// APIServerRequestSec is the serial time a worker's API server spends
	// on each request (HTTP handling, tokenising, handing it to the
	// engine) before the scheduler sees it: requests pass it one at a
	// time in arrival order, so a burst reaches the scheduler spread out
	// (ingress.go). TTFT and E2E include the wait (default 0: none).
	APIServerRequestSec float64 `yaml:"api_server_request_s"`
	// APIServerRanks is how many consecutive workers share one API
	// server: the data-parallel ranks of one server, which one front end
	// feeds (SGLang's TokenizerManager before its data-parallel
	// controller, with or without DP attention; vLLM's one API server
	// before its DP engine cores). Workers i and j share it when
	// i/APIServerRanks = j/APIServerRanks. 0 or 1: each worker its own.
	// The deploy package sets it from dp and enable_dp_attention.
	APIServerRanks int `yaml:"api_server_ranks"`
	// PrefillAPIServerRanks is APIServerRanks for the prefill pool of a
	// disaggregated fleet whose servers have other rank counts than the
	// decode pool's (SGLang's DP attention with a prefill pool of its own
	// TP: a server's ranks are its TP): consecutive prefill workers share
	// one API server by it, and the decode workers, from the first after
	// the prefill pool's slots, by APIServerRanks. 0: APIServerRanks for
	// both pools, as consecutive workers of the whole fleet. The deploy
	// package sets it from disaggregation.prefill_tp.
	PrefillAPIServerRanks int `yaml:"prefill_api_server_ranks"`
}

// A WorkloadConfig says how requests are sent.
type WorkloadConfig struct {
	// Mode is "open" (default: each request at its trace arrival time,
	// times TimeScale), "closed" (Clients concurrent clients, each
	// sending its next request, in trace order, when the previous one
	// completes) or "sessions" (agentic or chat sessions: the requests of
	// one Session in Turn order, each sent after the previous one's
	// answer and its ThinkSec; see Sessions).
	Mode    string `yaml:"mode"`
	Clients int    `yaml:"clients"` // closed loop: concurrent clients (default 1)
	// Sessions, in the sessions mode, is how many sessions run at once,
	// each starting when another ends; 0 starts each session at its
	// first request's trace arrival times TimeScale. Either way a
	// session's next turn is sent its ThinkSec after the client has the
	// previous turn's last chunk (or gave up on it).
	Sessions  int     `yaml:"sessions"`
	TimeScale float64 `yaml:"time_scale"` // open loop: arrival time multiplier (0 or absent: 1; 0.5 = twice the rate)
}

// Workload mode names.
const (
	ModeOpen     = "open"
	ModeClosed   = "closed"
	ModeSessions = "sessions"
)

// DefaultConfig returns the configuration every absent field defaults to:
// one worker, round-robin, vLLM's defaults (8192 batched tokens, 256
// sequences, 16-token blocks, prefix caching on, KV capacity from the
// model), open loop at the trace's own rate, seed 0.
func DefaultConfig() Config {
	on := true
	return Config{
		Workers: 1,
		Router:  RouterRoundRobin,
		Scheduler: SchedulerConfig{
			MaxNumBatchedTokens: vllmMaxNumBatchedTokens,
			MaxNumSeqs:          vllmMaxNumSeqs,
			BlockSize:           vllmBlockSize,
			EnablePrefixCaching: &on,
			StreamInterval:      1,
		},
		Workload: WorkloadConfig{Mode: ModeOpen, Clients: 1, TimeScale: 1},
	}
}

// withDefaults fills the zero fields of c from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if c.Router == "" {
		c.Router = d.Router
	}
	s := &c.Scheduler
	if s.MaxNumBatchedTokens == 0 {
		s.MaxNumBatchedTokens = d.Scheduler.MaxNumBatchedTokens
	}
	if s.MaxNumSeqs == 0 {
		s.MaxNumSeqs = d.Scheduler.MaxNumSeqs
	}
	if s.BlockSize == 0 {
		s.BlockSize = d.Scheduler.BlockSize
	}
	if s.EnablePrefixCaching == nil {
		s.EnablePrefixCaching = d.Scheduler.EnablePrefixCaching
	}
	if s.StreamInterval == 0 {
		s.StreamInterval = d.Scheduler.StreamInterval
	}
	w := &c.Workload
	if w.Mode == "" {
		w.Mode = d.Workload.Mode
	}
	if w.Clients == 0 {
		w.Clients = d.Workload.Clients
	}
	if w.TimeScale == 0 {
		w.TimeScale = d.Workload.TimeScale
	}
	return c
}

// Effective returns c as a replay runs it when the model gives each worker
// kvBlocks KV blocks: every default filled in, the engine named, the KV
// capacity in tokens (kv_cache_tokens, when set, overriding kvBlocks, and
// rounded down to whole blocks) and the engine's own settings with their
// defaults, some of which depend on that capacity. An output records it,
// so that a replay from the record runs the same: c.Effective(k) gives
// itself back for any k. c must be valid (Validate).
func (c Config) Effective(kvBlocks int64) Config {
	c = c.withDefaults()
	s := &c.Scheduler
	if s.KVCacheTokens > 0 {
		kvBlocks = s.KVCacheTokens / s.BlockSize
	}
	s.KVCacheTokens = kvBlocks * s.BlockSize
	c.RouterConfig = c.RouterConfig.withDefaults(c.Router, s.KVCacheTokens, s.BlockSize)
	if d := &c.Disaggregation; d.on() && d.DecodeRouter == "" && c.Router == RouterDynamo {
		d.DecodeRouter = DecodeDynamo // Dynamo routes both pools
	}
	c.Autoscale = c.Autoscale.withDefaults(c.Workers)
	c.Planner = c.Planner.withDefaults()
	c.Disaggregation = c.Disaggregation.withDefaults(c.Workers)
	if spec, ok := schedulerFor(s.Engine); ok {
		s.Engine = spec.name
		spec.defaults(s)
	}
	return c
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// A fieldError is a configuration value that is out of range; field is the
// dotted yaml path, so LoadConfig can add the line it came from.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// Validate checks c after defaults have been applied: a value out of
// range is an error naming its field (the dotted YAML key). A zero field
// is absent and takes its default, as Config cannot tell a 0 given from
// none; ParseConfig, which reads the document, refuses the 0s that are no
// valid setting (zeroInvalid).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fieldError{field, fmt.Sprintf(format, args...)})
	}
	if c.Workers < 0 {
		bad("workers", "negative (%d)", c.Workers)
	}
	if _, ok := routerFor(c.Router); !ok {
		bad("router", "unknown router %q (want %s)", c.Router, orList(routerNames()))
	}
	c.RouterConfig.validate(bad)
	if c.Router == RouterLLMD && c.RouterConfig.PrefixScorer == LLMDPrecise && c.Workers > maxListedWorkers {
		bad("workers", "%d: llm_d's precise scorer lists at most %d workers", c.Workers, maxListedWorkers)
	}
	if c.Router == RouterRecorded {
		// The placement is the trace's: no fleet that changes under
		// it, no decode router that places the decode halves.
		if c.Autoscale.on() || c.Planner.on() {
			bad("router", "recorded places requests as the trace did: not with autoscale or planner")
		}
		if d := c.Disaggregation; d.on() && d.scaled() {
			bad("router", "recorded places requests as the trace did: not with pools that an autoscaler or the planner sizes")
		}
		if d := c.Disaggregation; d.on() && d.DecodeRouter != "" {
			bad("disaggregation.decode_router", "%s: router recorded sends each request to the decode worker its trace names (worker)", d.DecodeRouter)
		}
	}
	c.Autoscale.validate(c.Workers, bad)
	c.validatePlanner(bad)
	c.Disaggregation.validate(c, bad)
	s := c.Scheduler
	if s.MaxNumBatchedTokens < 0 {
		bad("scheduler.max_num_batched_tokens", "negative (%d)", s.MaxNumBatchedTokens)
	}
	if s.MaxNumSeqs < 0 {
		bad("scheduler.max_num_seqs", "negative (%d)", s.MaxNumSeqs)
	}
	if s.BlockSize < 0 {
		bad("scheduler.block_size", "negative (%d)", s.BlockSize)
	}
	if s.KVCacheTokens < 0 {
		bad("scheduler.kv_cache_tokens", "negative (%d)", s.KVCacheTokens)
	}
	if s.StreamInterval < 0 {
		bad("scheduler.stream_interval", "negative (%d)", s.StreamInterval)
	}
	switch s.KVOffloadingBackend {
	case "", OffloadNative, OffloadLMCache:
	default:
		bad("scheduler.kv_offloading_backend", "unknown backend %q (want %s or %s)", s.KVOffloadingBackend, OffloadNative, OffloadLMCache)
	}
	if spec, ok := schedulerFor(s.Engine); !ok {
		bad("scheduler.engine", "unknown engine %q (want %s)", s.Engine, orList(engineNames()))
	} else if spec.validate != nil {
		spec.validate(s, bad)
	}
	if l := c.Client.LatencySec; !(l >= 0) || l > 3600 {
		bad("client.latency_s", "%v is not a number of seconds in [0, 3600]", l)
	}
	if l := c.Client.APIServerRequestSec; !(l >= 0) || l > 3600 {
		bad("client.api_server_request_s", "%v is not a number of seconds in [0, 3600]", l)
	}
	if n := c.Client.APIServerRanks; n < 0 || n > max(c.Workers, 1) {
		bad("client.api_server_ranks", "%d is not a number of workers in [0, %d]", n, max(c.Workers, 1))
	}
	// Bounded by the fleet's workers, as api_server_ranks is: package
	// deploy validates as it sizes the pools, when prefill_workers
	// still counts servers and workers their ranks.
	if n := c.Client.PrefillAPIServerRanks; n != 0 && c.Disaggregation.PrefillWorkers <= 0 {
		bad("client.prefill_api_server_ranks", "%d without disaggregation (a prefill pool's API servers)", n)
	} else if n < 0 || n > max(c.Workers, 1) {
		bad("client.prefill_api_server_ranks", "%d is not a number of workers in [0, %d]", n, max(c.Workers, 1))
	}
	if l := c.Client.TimeoutSec; !(l >= 0) || l > 1e7 {
		bad("client.timeout_s", "%v is not a number of seconds in [0, 1e7]", l)
	}
	w := c.Workload
	switch w.Mode {
	case ModeOpen, ModeClosed, ModeSessions:
	default:
		bad("workload.mode", "unknown mode %q (want %s, %s or %s)", w.Mode, ModeOpen, ModeClosed, ModeSessions)
	}
	if w.Sessions < 0 {
		bad("workload.sessions", "negative (%d)", w.Sessions)
	}
	if w.Clients < 0 {
		bad("workload.clients", "negative (%d)", w.Clients)
	}
	if !(w.TimeScale >= 0) || w.TimeScale > 1e9 {
		bad("workload.time_scale", "%v is not a non-negative number", w.TimeScale)
	}
	return errors.Join(errs...)
}

// LoadConfig reads a YAML configuration file. Absent fields take the
// defaults of DefaultConfig; unknown fields are errors. Errors read
// "PATH:LINE: field: what is wrong".
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a YAML configuration; name is used in errors.
func ParseConfig(name string, data []byte) (Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	var c Config
	if root.Kind != 0 {
		// Decode through a strict decoder so that misspelt keys fail.
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	err := errors.Join(zerosGiven(&root), c.Validate())
	if err != nil {
		var out []error
		for _, e := range unjoin(err) {
			var fe *fieldError
			if errors.As(e, &fe) {
				out = append(out, fmt.Errorf("%s:%d: %s", name, lineOf(&root, fe.field), fe))
			} else {
				out = append(out, fmt.Errorf("%s: %w", name, e))
			}
		}
		return Config{}, errors.Join(out...)
	}
	return c.withDefaults(), nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// zeroInvalid lists the keys whose zero value means "absent: take the
// default", and for which 0 is no setting an engine accepts (no worker, an
// empty block or batch, a stopped clock). Validate cannot tell the two
// apart, Config having plain numbers; a YAML document can, so ParseConfig
// refuses these keys given as 0. kv_cache_tokens (0: from the model),
// context_length (0: unknown), workload.sessions (0: each session at its
// arrival), seed and the client's seconds keep 0 as a value.
var zeroInvalid = []string{
	"workers",
	"scheduler.max_num_batched_tokens", "scheduler.max_num_seqs", "scheduler.block_size", "scheduler.stream_interval",
	"scheduler.chunked_prefill_size", "scheduler.max_prefill_tokens", "scheduler.max_running_requests",
	"workload.clients", "workload.time_scale",
}

// zerosGiven reports the keys of zeroInvalid that a document gives as 0.
func zerosGiven(root *yaml.Node) error {
	var errs []error
	for _, key := range zeroInvalid {
		n := nodeAt(root, key)
		if n == nil || n.Kind != yaml.ScalarNode {
			continue
		}
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil && v == 0 {
			errs = append(errs, &fieldError{key, "0 is not a valid value (leave the key out for the default)"})
		}
	}
	return errors.Join(errs...)
}

// lineOf returns the line of the value at the dotted path in a YAML
// document, or 0 when absent.
func lineOf(n *yaml.Node, path string) int {
	if n = nodeAt(n, path); n == nil {
		return 0
	}
	return n.Line
}

// nodeAt returns the value at the dotted path in a YAML document, or nil
// when absent.
func nodeAt(n *yaml.Node, path string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, key := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}
