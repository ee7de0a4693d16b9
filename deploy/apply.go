package deploy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// vllmOptions are the engine options recorded at ingest (Run.Extra
// "engine_opt.KEY", vLLM's argument names) that set a cluster key.
var vllmOptions = []struct{ opt, key string }{
	{"max_num_batched_tokens", "scheduler.max_num_batched_tokens"},
	{"max_num_seqs", "scheduler.max_num_seqs"},
	{"block_size", "scheduler.block_size"},
	{"enable_prefix_caching", "scheduler.enable_prefix_caching"},
	{"gpu_memory_utilization", "gpu_memory_utilization"},
	{"num_gpu_blocks_override", "num_gpu_blocks_override"},
	{"mem_fraction_static", "mem_fraction_static"},
	{"kv_cache_dtype", "kv_cache_dtype"},
	{"enable_dp_attention", "enable_dp_attention"},
}

// applyRecord sets the keys of c that the cluster file and the settings
// left at their defaults from what run records, and returns the notes
// that say so. It is an error when the record is unusable and the run is
// measured (see Overrides.Measured).
func applyRecord(c *Cluster, run trace.Run, o Overrides) ([]string, error) {
	name := run.Name
	if name == "" {
		name = "(unnamed)"
	}
	r := recordOf(run.Model, run.Hardware, run.TP, run.PP, run.DP, run.Engine)
	var notes []string
	note := func(format string, args ...any) {
		notes = append(notes, fmt.Sprintf("run %s: ", name)+fmt.Sprintf(format, args...))
	}
	// take sets key from the record unless the file or a setting gave
	// it; then a different recorded value is noted.
	take := func(key string, rec any, shown string) error {
		if from, ok := c.Given(key); ok {
			if cur := fmt.Sprint(c.value(key)); cur != fmt.Sprint(rec) {
				note("records %s %s; replayed with %v (%s)", key, shown, cur, from)
			}
			return nil
		}
		if err := c.set(key, rec); err != nil {
			return fmt.Errorf("run %s: %s %s: %v", name, key, shown, err)
		}
		c.mark(key, "run "+name)
		return nil
	}
	if r.model != "" {
		if err := take("model", r.model, strconv.Quote(r.rawModel)); err != nil {
			return nil, err
		}
	}
	if r.hardware != "" {
		if err := take("hardware", r.hardware, strconv.Quote(r.rawHardware)); err != nil {
			return nil, err
		}
	}
	for _, p := range []struct {
		key string
		v   int
	}{{"tp", r.tp}, {"pp", r.pp}, {"dp", r.dp}} {
		if p.v > 0 {
			if err := take(p.key, p.v, strconv.Itoa(p.v)); err != nil {
				return nil, err
			}
		}
	}
	if r.tp == 0 && r.pp == 0 && r.dp == 0 && r.gpus > 1 {
		if _, ok := c.Given("tp"); !ok {
			c.TP = r.gpus
			c.mark("tp", "run "+name)
			note("records %d GPUs (%q) and no parallel sizes: TP%d", r.gpus, r.rawHardware, r.gpus)
		}
	}
	if r.engine == "vllm" || r.engine == "sglang" {
		if err := take("scheduler.engine", r.engine, r.engine); err != nil {
			return nil, err
		}
	}
	if v := run.Extra["engine_version"]; v != "" {
		if err := take("engine_version", v, strconv.Quote(v)); err != nil {
			return nil, err
		}
	}
	var opts []string
	for _, v := range vllmOptions {
		raw, ok := engineOption(run, v.opt)
		if !ok {
			continue
		}
		val, err := parseOption(c, v.key, raw)
		if err != nil {
			return nil, fmt.Errorf("run %s: %s%s: %q: %v", name, engineOptPrefix, v.opt, raw, err)
		}
		if err := take(v.key, val, raw); err != nil {
			return nil, err
		}
		opts = append(opts, v.opt+"="+raw)
	}
	// vLLM's --enable-expert-parallel spreads the experts over every GPU
	// of the server, TP·DP of them (config/parallel.py: expert parallel
	// size = tensor × data parallel size).
	if raw, ok := engineOption(run, "enable_expert_parallel"); ok {
		on, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, fmt.Errorf("run %s: %senable_expert_parallel: %q: %v", name, engineOptPrefix, raw, err)
		}
		if ep := max(c.TP, 1) * max(c.DP, 1); on && ep > 1 {
			if err := take("ep", ep, fmt.Sprintf("%d (enable_expert_parallel, TP·DP)", ep)); err != nil {
				return nil, err
			}
		}
		opts = append(opts, "enable_expert_parallel="+raw)
	}
	if len(opts) > 0 {
		sort.Strings(opts)
		note("engine options from its record: %s", strings.Join(opts, ", "))
	}
	if sized := r.tp > 0 || r.pp > 0 || r.dp > 0; sized && r.gpus > 0 {
		// A machine's GPUs, of which the server took some, or a count
		// that contradicts the sizes: the sizes say what ran. (A dp
		// recorded with DP attention, whose ranks are inside TP, is
		// refused later: model.Deployment.checkDPAttention.)
		if used := max(r.tp, 1) * max(r.pp, 1) * max(r.dp, 1); used != r.gpus {
			note("records %d GPUs (%q) but parallel sizes of %d (tp %d, pp %d, dp %d): replayed on the sizes' %d", r.gpus, r.rawHardware, used, max(r.tp, 1), max(r.pp, 1), max(r.dp, 1), used)
		}
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("run %s: its recorded deployment: %v", name, err)
	}

	if run.Disaggregated && c.Disaggregation.PrefillWorkers == 0 {
		// SGLang's server_info names one prefill and one decode server
		// whatever the pools' sizes (TonyLi15's 1P2D run lists one
		// of each), so the record cannot size them.
		note("ran prefill/decode disaggregated, which its record does not size: replayed aggregated, unless the cluster file gives disaggregation.prefill_workers and workers")
	}

	// What could not be used.
	var missing []string
	if _, ok := c.Given("model"); !ok {
		if r.rawModel != "" {
			note("records model %q, which is neither a shipped model nor a config.json path", r.rawModel)
		}
		missing = append(missing, "model")
	}
	if _, ok := c.Given("hardware"); !ok {
		if r.rawHardware != "" {
			note("records hardware %q, which is not a GPU preset", r.rawHardware)
		}
		missing = append(missing, "hardware")
	}
	if len(missing) == 0 {
		return notes, nil
	}
	what := strings.Join(missing, " and ")
	if o.Measured && !o.AssumeDeployment {
		var why []string
		for _, n := range notes {
			why = append(why, strings.TrimPrefix(n, "run "+name+": "))
		}
		if len(why) == 0 {
			why = []string{"no " + what + " recorded"}
		}
		return nil, fmt.Errorf("run %s: its deployment is not known (%s): give --%s (or a cluster file) for it, or --assume-deployment to replay it on %s", name, strings.Join(why, "; "), strings.Join(missing, " and --"), defaultsOf(c, missing))
	}
	note("no %s recorded: replayed on %s (defaults; the results say nothing of the deployment that served it)", what, defaultsOf(c, missing))
	return notes, nil
}

// defaultsOf names the default values of the missing keys.
func defaultsOf(c *Cluster, missing []string) string {
	var parts []string
	for _, k := range missing {
		parts = append(parts, fmt.Sprintf("%s %v", k, c.value(k)))
	}
	return strings.Join(parts, ", ")
}

// parseOption reads a recorded engine option as the type of key.
func parseOption(c *Cluster, key, raw string) (any, error) {
	switch c.value(key).(type) {
	case int64, int:
		n, err := strconv.ParseInt(raw, 10, 64)
		return n, err
	case float64:
		return strconv.ParseFloat(raw, 64)
	case bool, *bool:
		return strconv.ParseBool(raw)
	}
	return raw, nil
}
