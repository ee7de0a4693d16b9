package deploy

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/replay"
)

// A Setting is one value given besides the cluster file: a command-line
// flag, or a value a calibration or a plan chooses. Key is a cluster key
// path ("workers", "scheduler.max_num_seqs"); Value has the key's Go
// type or converts to it (an int for an int64 key); From says what gave
// it ("--workers"), for notes and errors.
type Setting struct {
	Key   string
	Value any
	From  string
}

// With returns c with the settings applied in order and checked as the
// file's values are: an error names the setting's From and the bound
// ("--workers 0: want a number of workers from 1 to 4096").
func (c Cluster) With(settings ...Setting) (Cluster, error) {
	c.given = maps.Clone(c.given)
	if c.HardwareOverride != nil {
		h := *c.HardwareOverride
		c.HardwareOverride = &h
	}
	on := c.Scheduler.EnablePrefixCaching
	if on != nil {
		b := *on
		c.Scheduler.EnablePrefixCaching = &b
	}
	for _, s := range settings {
		if err := c.set(s.Key, s.Value); err != nil {
			return Cluster{}, fmt.Errorf("%s: %v", s.From, err)
		}
		c.mark(s.Key, s.From)
	}
	if err := c.check(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}

// set sets the field at the dotted key path to v.
func (c *Cluster) set(key string, v any) error {
	f := reflect.ValueOf(c).Elem()
	for k := range strings.SplitSeq(key, ".") {
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				f.Set(reflect.New(f.Type().Elem()))
			}
			f = f.Elem()
		}
		if f.Kind() != reflect.Struct {
			return fmt.Errorf("unknown cluster key %q", key)
		}
		var ok bool
		if f, ok = fieldByKey(f, k); !ok {
			return fmt.Errorf("unknown cluster key %q", key)
		}
	}
	val := reflect.ValueOf(v)
	dst := f
	if f.Kind() == reflect.Pointer {
		dst = reflect.New(f.Type().Elem()).Elem()
	}
	if !val.IsValid() || !sameKind(val.Kind(), dst.Kind()) || !val.Type().ConvertibleTo(dst.Type()) {
		return fmt.Errorf("cluster key %s: a %T is not a %s", key, v, dst.Type())
	}
	dst.Set(val.Convert(dst.Type()))
	if f.Kind() == reflect.Pointer {
		f.Set(dst.Addr())
	}
	return nil
}

// sameKind allows the conversions that lose nothing a setting means:
// between integer types, from integers to floats, and between equal kinds.
func sameKind(from, to reflect.Kind) bool {
	isInt := func(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Uint64 }
	isFloat := func(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }
	switch {
	case isInt(to):
		return isInt(from)
	case isFloat(to):
		return isInt(from) || isFloat(from)
	}
	return from == to
}

// Bounds of the cluster's numbers. They keep every setting inside what
// the engines accept and what the simulator can hold: MaxWorkers because
// each worker allocates its KV block tables up front (a worker of an 8B
// model on an H100 holds some 30,000 blocks, an H200's 70B TP4 twice
// that), the time scale so that arrivals of a day-long trace stay far
// inside int64 nanoseconds (292 years).
const (
	MaxWorkers      = 4096
	MaxParallel     = 1024    // tp, pp, dp, ep
	MaxBatchTokens  = 1 << 24 // max_num_batched_tokens, chunked_prefill_size, max_prefill_tokens, context_length
	MaxSeqs         = 1 << 20 // max_num_seqs, max_running_requests, clients, sessions
	MaxBlockSize    = 1024    // tokens per KV block (vLLM offers up to 256, SGLang pages are smaller)
	MaxKVTokens     = 1 << 40
	MaxTimeScale    = 1e4
	MinTimeScale    = 1e-6
	MaxStreamTokens = 1 << 20
	MaxTierGiB      = 1 << 30 // a KV tier or store, GiB (an exbibyte)
)

// An intRule bounds an integer key. An optional key may be 0 when not
// given (its default is derived elsewhere), not when given, unless
// zeroGiven: kv_cache_tokens 0 is how an effective configuration writes
// "derived from the model", so that it reads back.
type intRule struct {
	key       string
	get       func(*Cluster) int64
	min, max  int64
	what      string
	optional  bool
	zeroGiven bool
}

var intRules = []intRule{
	{"workers", func(c *Cluster) int64 { return int64(c.Workers) }, 1, MaxWorkers, "a number of workers", false, false},
	{"tp", func(c *Cluster) int64 { return int64(c.TP) }, 1, MaxParallel, "a tensor-parallel degree", false, false},
	{"pp", func(c *Cluster) int64 { return int64(c.PP) }, 1, MaxParallel, "a number of pipeline stages", true, false},
	{"dp", func(c *Cluster) int64 { return int64(c.DP) }, 1, MaxParallel, "a data-parallel size", true, false},
	{"ep", func(c *Cluster) int64 { return int64(c.EP) }, 1, MaxParallel, "an expert-parallel size", true, false},
	{"scheduler.max_num_batched_tokens", func(c *Cluster) int64 { return c.Scheduler.MaxNumBatchedTokens }, 1, MaxBatchTokens, "a token budget per step", false, false},
	{"scheduler.max_num_seqs", func(c *Cluster) int64 { return int64(c.Scheduler.MaxNumSeqs) }, 1, MaxSeqs, "a number of running sequences", false, false},
	{"scheduler.block_size", func(c *Cluster) int64 { return c.Scheduler.BlockSize }, 1, MaxBlockSize, "a number of tokens per KV block", false, false},
	{"scheduler.kv_cache_tokens", func(c *Cluster) int64 { return c.Scheduler.KVCacheTokens }, 1, MaxKVTokens, "a KV capacity in tokens (0: derived from the model)", true, true},
	{"scheduler.stream_interval", func(c *Cluster) int64 { return c.Scheduler.StreamInterval }, 1, MaxStreamTokens, "a number of tokens per streamed chunk", false, false},
	{"scheduler.chunked_prefill_size", func(c *Cluster) int64 { return c.Scheduler.ChunkedPrefillSize }, 1, MaxBatchTokens, "a number of prefill tokens per step", true, false},
	{"scheduler.max_prefill_tokens", func(c *Cluster) int64 { return c.Scheduler.MaxPrefillTokens }, 1, MaxBatchTokens, "a number of prompt tokens per step", true, false},
	{"scheduler.max_running_requests", func(c *Cluster) int64 { return int64(c.Scheduler.MaxRunningRequests) }, 1, MaxSeqs, "a number of running requests", true, false},
	{"scheduler.context_length", func(c *Cluster) int64 { return c.Scheduler.ContextLength }, 1, MaxBatchTokens, "a context length in tokens", true, false},
	{"num_gpu_blocks_override", func(c *Cluster) int64 { return c.NumGPUBlocksOverride }, 1, MaxKVTokens, "a number of KV blocks per worker", true, false},
	{"workload.clients", func(c *Cluster) int64 { return int64(c.Workload.Clients) }, 1, MaxSeqs, "a number of clients", false, false},
	{"workload.sessions", func(c *Cluster) int64 { return int64(c.Workload.Sessions) }, 0, MaxSeqs, "a number of concurrent sessions (0: each at its arrival)", false, false},
	{"scheduler.lmcache.chunk_size", func(c *Cluster) int64 { return lmcache(c).ChunkSize }, 1, MaxBatchTokens, "a number of tokens per chunk", true, false},
	{"nodes_per_worker", func(c *Cluster) int64 { return int64(c.NodesPerWorker) }, 1, MaxParallel, "a number of nodes per worker", true, false},
}

// interNode returns c's inter_node settings, or none.
func interNode(c *Cluster) *InterNodeSpec {
	if n := c.InterNode; n != nil {
		return n
	}
	return &InterNodeSpec{}
}

// lmcache returns c's LMCache settings, or none.
func lmcache(c *Cluster) *replay.LMCacheConfig {
	if l := c.Scheduler.LMCache; l != nil {
		return l
	}
	return &replay.LMCacheConfig{}
}

// A floatRule bounds a real key to [min, max], or (min, max] when open;
// an optional one may be 0 when not given.
type floatRule struct {
	key      string
	get      func(*Cluster) float64
	min, max float64
	open     bool
	what     string
	optional bool
}

var floatRules = []floatRule{
	{"gpu_memory_utilization", func(c *Cluster) float64 { return c.GPUMemoryUtilization }, 0, 1, true, "a fraction of GPU memory", false},
	{"mem_fraction_static", func(c *Cluster) float64 { return c.MemFractionStatic }, 0, 1, true, "a fraction of GPU memory", true},
	{"workload.time_scale", func(c *Cluster) float64 { return c.Workload.TimeScale }, MinTimeScale, MaxTimeScale, false, "an arrival time multiplier", false},
	{"scheduler.schedule_conservativeness", func(c *Cluster) float64 { return c.Scheduler.ScheduleConservativeness }, 0, 100, false, "a conservativeness", false},
	{"client.latency_s", func(c *Cluster) float64 { return c.Client.LatencySec }, 0, 3600, false, "a number of seconds", false},
	{"client.timeout_s", func(c *Cluster) float64 { return c.Client.TimeoutSec }, 0, 1e7, false, "a number of seconds (0: no timeout)", false},
	{"scheduler.kv_offloading_size", func(c *Cluster) float64 { return c.Scheduler.KVOffloadingSize }, 0, MaxTierGiB, true, "a CPU tier size in GiB", true},
	{"scheduler.lmcache.max_local_cpu_size", func(c *Cluster) float64 { return lmcache(c).MaxLocalCPUSize }, 0, MaxTierGiB, true, "a CPU tier size in GiB", true},
	{"scheduler.lmcache.max_local_disk_size", func(c *Cluster) float64 { return lmcache(c).MaxLocalDiskSize }, 0, MaxTierGiB, true, "a disk tier size in GiB", true},
	{"kv_store_gib", func(c *Cluster) float64 { return c.KVStoreGiB }, 0, MaxTierGiB, true, "a KV store size in GiB", true},
	{"inter_node.bandwidth_gbps", func(c *Cluster) float64 { return interNode(c).BandwidthGbps }, 0, 1e6, true, "a line rate in Gb/s", true},
	{"inter_node.latency_us", func(c *Cluster) float64 { return interNode(c).LatencyUs }, 0, 1e6, false, "a latency in µs", true},
}

// check bounds every number of c. A key left at 0 that its rule allows
// to be absent passes; the same 0 given by the file or an override is an
// error. The messages name where the value came from.
func (c *Cluster) check() error {
	var errs []error
	for _, r := range intRules {
		v := r.get(c)
		from, given := c.given[r.key]
		if v == 0 && r.optional && (!given || r.zeroGiven) {
			continue
		}
		if v < r.min || v > r.max {
			errs = append(errs, c.bad(r.key, from, strconv.FormatInt(v, 10), fmt.Sprintf("want %s from %d to %d", r.what, r.min, r.max)))
		}
	}
	for _, r := range floatRules {
		v := r.get(c)
		from, given := c.given[r.key]
		if v == 0 && r.optional && !given {
			continue
		}
		low := v < r.min || r.open && v == r.min
		if low || v > r.max || v != v {
			lo := "from"
			if r.open {
				lo = "above"
			}
			errs = append(errs, c.bad(r.key, from, strconv.FormatFloat(v, 'g', -1, 64), fmt.Sprintf("want %s %s %g to %g", r.what, lo, r.min, r.max)))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The names (router, mode, engine, policy): replay's own check,
	// whose messages start with the key.
	v := c.Config
	if c.serversOfRanks() {
		v = unsized(v)
	}
	return c.validate(v)
}

// unsized returns cfg with its API servers' ranks within the bound
// replay.Config.Validate sets them, its workers: for a cluster whose
// workers still count servers of several ranks, whose API servers' ranks
// are bounded by the fleet's workers, a worker a rank, and checked once
// the ranks are known (dataParallel, dpAttention; takeGPUCount may set
// the TP before, and the error names the fleet's bound).
func unsized(cfg replay.Config) replay.Config {
	cl, most := &cfg.Client, max(cfg.Workers, 1)
	cl.APIServerRanks = min(max(cl.APIServerRanks, 0), most)
	cl.PrefillAPIServerRanks = min(max(cl.PrefillAPIServerRanks, 0), most)
	return cfg
}

// serversOfRanks reports whether a server of the cluster may be several
// replay workers, a rank each: data parallelism of either pool, or
// SGLang's DP attention (a server's TP ranks).
func (c *Cluster) serversOfRanks() bool {
	return c.DP > 1 || c.EnableDPAttention || c.Disaggregation.PrefillDP > 1
}

// validate is replay's own check of cfg, c's configuration or what it
// becomes, each error naming where its key was given (replay's messages
// start with the key).
func (c *Cluster) validate(cfg replay.Config) error {
	var errs []error
	if err := cfg.Validate(); err != nil {
		for _, e := range unjoin(err) {
			key, msg, _ := strings.Cut(e.Error(), ": ")
			errs = append(errs, c.bad(key, c.given[key], "", msg))
		}
	}
	return errors.Join(errs...)
}

// bad formats an error about key: "FILE:LINE: KEY: VALUE: MSG" when the
// file gave it, "FLAG VALUE: MSG" when a flag did.
func (c *Cluster) bad(key, from, value, msg string) error {
	if value != "" {
		msg = value + ": " + msg
	}
	switch {
	case strings.HasPrefix(from, "-"):
		if value != "" {
			return fmt.Errorf("%s %s", from, msg)
		}
		return fmt.Errorf("%s: %s", from, msg)
	case from != "":
		return fmt.Errorf("%s: %s: %s", from, key, msg)
	}
	return fmt.Errorf("%s: %s", key, msg)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// value returns the value at the dotted key path (a *bool dereferenced;
// nil when absent).
func (c *Cluster) value(key string) any {
	f := reflect.ValueOf(c).Elem()
	for k := range strings.SplitSeq(key, ".") {
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				return nil
			}
			f = f.Elem()
		}
		var ok bool
		if f, ok = fieldByKey(f, k); !ok {
			return nil
		}
	}
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return nil
		}
		return f.Elem().Interface()
	}
	return f.Interface()
}
