package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/deploy"
)

// A replayFlag maps a replay flag to the cluster key it overrides.
type replayFlag struct {
	flag, key string
}

// replayFlags are the flags that override a cluster key, in the order
// they apply.
var replayFlags = []replayFlag{
	{"workers", "workers"},
	{"prefill-workers", "disaggregation.prefill_workers"},
	{"decode-router", "disaggregation.decode_router"},
	{"hardware", "hardware"},
	{"tp", "tp"},
	{"max-num-batched-tokens", "scheduler.max_num_batched_tokens"},
	{"max-num-seqs", "scheduler.max_num_seqs"},
	{"num-gpu-blocks-override", "num_gpu_blocks_override"},
	{"scheduler", "scheduler.engine"},
	{"mode", "workload.mode"},
	{"sessions", "workload.sessions"},
	{"clients", "workload.clients"},
	{"time-scale", "workload.time_scale"},
	{"stream-interval", "scheduler.stream_interval"},
	{"client-latency", "client.latency_s"},
	{"client-timeout", "client.timeout_s"},
}

// maxHashBlock bounds --block-size, the tokens per hash_ids entry of
// formats that do not record it (Mooncake's 512).
const maxHashBlock = 1 << 20

// checkBlockSizeFlag bounds --block-size where the command has it.
func checkBlockSizeFlag(c *cli.Command) error {
	if !hasFlag(c, "block-size") {
		return nil
	}
	if b := c.Int64("block-size"); b < 1 || b > maxHashBlock {
		return fmt.Errorf("--block-size %d: want a number of tokens per hash_ids entry from 1 to %d", b, maxHashBlock)
	}
	return nil
}

// clusterFor reads --config and applies the command's override flags
// (those of replayFlags it has, --model and --seed) over it, each checked
// and named in errors, as deploy.Cluster.With does.
func clusterFor(c *cli.Command) (deploy.Cluster, error) {
	if err := checkBlockSizeFlag(c); err != nil {
		return deploy.Cluster{}, err
	}
	cl, err := deploy.LoadCluster(c.String("config"))
	if err != nil {
		return cl, err
	}
	return withFlags(c, cl)
}

// withFlags applies the command's override flags over cl.
func withFlags(c *cli.Command, cl deploy.Cluster) (deploy.Cluster, error) {
	var set []deploy.Setting
	for _, f := range replayFlags {
		if !hasFlag(c, f.flag) || !c.IsSet(f.flag) {
			continue
		}
		set = append(set, deploy.Setting{Key: f.key, Value: c.Value(f.flag), From: "--" + f.flag})
	}
	if c.IsSet("model") {
		key := "model"
		if m := c.String("model"); strings.HasSuffix(m, ".yaml") || strings.HasSuffix(m, ".yml") {
			key = "cost_model"
		}
		set = append(set, deploy.Setting{Key: key, Value: c.String("model"), From: "--model"})
	}
	if hasFlag(c, "seed") && c.IsSet("seed") {
		set = append(set, deploy.Setting{Key: "seed", Value: c.Uint64("seed"), From: "--seed"})
	}
	return cl.With(set...)
}

// hasFlag reports whether the command defines the flag name.
func hasFlag(c *cli.Command, name string) bool {
	for _, f := range c.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// overridesFor loads the cost model the cluster names, if any.
func overridesFor(cl deploy.Cluster) (deploy.Overrides, error) {
	var o deploy.Overrides
	if cl.CostModel == "" {
		return o, nil
	}
	data, err := os.ReadFile(cl.CostModel)
	if err != nil {
		return o, err
	}
	cm, err := calibrate.ParseCostModel(cl.CostModel, data)
	if err != nil {
		return o, err
	}
	o.CostModel, o.CostModelText = cm, string(data)
	return o, nil
}
