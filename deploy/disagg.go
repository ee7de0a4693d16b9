package deploy

import (
	"fmt"
	"strconv"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// disaggregationOf fills in the prefill/decode hand-over of c's
// disaggregation (replay.DisaggregationConfig) what the cluster file
// leaves out: the KV a prompt token sends (the model's, all of a worker's
// ranks: each TP rank sends its own heads, replicated ones included) and
// the link it goes over (the node's network, node_override's network and
// nic_gbps included, unless transfer_gbps is given), and returns the note
// that says so.
func disaggregationOf(c *Cluster, cfg *replay.Config, dep *model.Deployment) (string, error) {
	d := &cfg.Disaggregation
	if d.PrefillWorkers >= max(cfg.Workers, 1) {
		return "", c.bad("disaggregation.prefill_workers", c.given["disaggregation.prefill_workers"], strconv.Itoa(d.PrefillWorkers),
			fmt.Sprintf("leaves no decode worker of %d workers", max(cfg.Workers, 1)))
	}
	ranks := int64(dep.TP * max(dep.PP, 1))
	kv := "the model's"
	if d.KVBytesPerToken == 0 {
		d.KVBytesPerToken = dep.KVBytesPerTokenPerRank() * ranks
	} else {
		kv = "given"
	}
	link := "given"
	if d.TransferGBps == 0 {
		n, err := c.node(dep)
		if err != nil {
			return "", err
		}
		d.TransferGBps = n.Network.Bandwidth / 1e9
		if _, ok := c.given["disaggregation.transfer_latency_s"]; !ok {
			d.TransferLatencySec = n.Network.Latency.Seconds()
		}
		link = "the " + n.Name + " node's network"
	}
	how := "vLLM's KV connector behind its proxy: the decode worker computes the last prompt token again"
	if EngineName(*cfg) == replay.EngineSGLang {
		how = "SGLang's PD servers: the decode server streams the prefill server's first token"
	}
	return fmt.Sprintf("prefill/decode disaggregated (%s): %d prefill and %d decode workers; %d KV bytes a prompt token (%s, %d ranks), sent at %.4g GB/s and %.4g ms a transfer (%s)",
		how, d.PrefillWorkers, max(cfg.Workers, 1)-d.PrefillWorkers, d.KVBytesPerToken, kv, ranks, d.TransferGBps, d.TransferLatencySec*1e3, link), nil
}
