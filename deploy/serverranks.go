package deploy

import (
	"cmp"
	"fmt"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
)

// serverRanks is how many replay workers one server of each pool is: its
// data-parallel ranks (dp), or under DP attention its TP's (a rank a
// worker); without disaggregation, or with both pools' servers alike,
// the two are equal.
type serverRanks struct{ decode, prefill int }

// poolRanks returns ranks for the servers of both pools, or own for the
// prefill pool's of a disaggregated cluster that gives its own (0: none).
func poolRanks(d replay.DisaggregationConfig, ranks, own int) serverRanks {
	r := serverRanks{decode: ranks, prefill: ranks}
	if d.PrefillWorkers > 0 && own != 0 {
		r.prefill = own
	}
	return r
}

// dpAttentionRanks returns the ranks of a server under DP attention, dep
// the cluster's deployment: its TP, and for a prefill pool of its own TP
// (disaggregation.prefill_tp) that TP's, as SGLang's prefill servers of
// --tp N --enable-dp-attention have N ranks whatever the decode servers'.
func dpAttentionRanks(d replay.DisaggregationConfig, dep *model.Deployment) serverRanks {
	return poolRanks(d, dep.TP, d.PrefillTP)
}

// dataParallelRanks returns the data-parallel ranks of a server of each
// pool, dep the cluster's deployment: its dp (1 without), and for a
// prefill pool of its own (disaggregation.prefill_dp) that dp, as wide-EP
// PD deployments launch the two pools with data-parallel sizes of their
// own.
func dataParallelRanks(d replay.DisaggregationConfig, dep *model.Deployment) serverRanks {
	return poolRanks(d, max(dep.DP, 1), d.PrefillDP)
}

// fleet returns the replay workers of the cluster's servers, each a
// worker a rank, and how many of them are prefill servers of r.prefill
// ranks: d's prefill_workers, or 0 without disaggregation or when they
// leave no decode server (which disaggregationOf refuses).
func (r serverRanks) fleet(d replay.DisaggregationConfig, servers int) (workers, prefill int) {
	if p := d.PrefillWorkers; p > 0 && p < servers {
		prefill = p
	}
	return (servers-prefill)*r.decode + prefill*r.prefill, prefill
}

// apart reports whether the prefill servers, prefill of them, have other
// rank counts than the decode servers.
func (r serverRanks) apart(prefill int) bool { return prefill > 0 && r.prefill != r.decode }

// apiServersText says how many ranks one API server (front: what the
// engine calls it) takes the requests of: each pool's servers' when they
// are apart, the prefill pool's as disaggregationOf sets it unless given.
func (r serverRanks) apiServersText(front string, c replay.ClientConfig, prefill int) string {
	if r.apart(prefill) {
		return fmt.Sprintf("one %s per %d prefill ranks and per %d decode ranks", front, cmp.Or(c.PrefillAPIServerRanks, r.prefill), c.APIServerRanks)
	}
	return fmt.Sprintf("one %s per %d ranks", front, c.APIServerRanks)
}
