package model

import (
	"math"
	"strings"
	"testing"
	"time"
)

// toyDense is a 12-layer Llama-shaped model: hidden 1024 in bf16, so
// 2,048 bytes of activations per token.
func toyDense(t *testing.T) LLM {
	t.Helper()
	m, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":1024,"num_hidden_layers":12,
		"num_attention_heads":8,"num_key_value_heads":8,"intermediate_size":2048,"vocab_size":1000,"torch_dtype":"bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A worker spanning nodes, priced by hand. Two all-reduces per layer,
// per stage: 24 over the 12 layers; a ring all-reduce sends 2(TP−1)/TP of the 2,048-byte
// activation per token; a stage send 2,048 bytes per token. H100: NVLink
// 450 GB/s each way, PCIe 64 GB/s. A batch of 10 decode tokens.
func TestInterNodePricing(t *testing.T) {
	m, hw := toyDense(t), h100(t)
	b := &Batch{Decode: []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}
	const tokens = 10.0
	for _, tc := range []struct {
		name     string
		p        Parallelism
		commSec  float64
		latency  float64
		sameStep bool // the step as on one node
	}{{
		// TP4 over 2 nodes of 2 GPUs: the ring crosses nodes, at the
		// node's 2 rails of 50 GB/s (GPUDirect: no PCIe bound), 100 GB/s
		// < NVLink. 24 all-reduces × 1.5 × 2,048 B = 73,728 B a token.
		name:    "tp4 across 2 nodes, gpudirect, a rail per GPU",
		p:       Parallelism{TP: 4, InterNode: &InterNode{Nodes: 2, Transport: TransportGPUDirectRDMA, Bandwidth: 50e9, LinkPerGPU: true, Latency: 5 * time.Microsecond}},
		commSec: 73728 * tokens / 100e9,
		latency: 24 * 5e-6,
	}, {
		// TP2 × PP2 over 2 nodes: each TP pair in a node (NVLink, 24 ×
		// 1 × 2,048 = 49,152 B a token), the one stage send crosses, over
		// one shared 25 GB/s RDMA link (under PCIe's 64).
		name:    "tp2 pp2 across 2 nodes, rdma, one link per node",
		p:       Parallelism{TP: 2, PP: 2, InterNode: &InterNode{Nodes: 2, Transport: TransportRDMA, Bandwidth: 25e9, Latency: 7 * time.Microsecond}},
		commSec: 49152*tokens/450e9 + 2048*tokens/25e9,
		latency: 1 * 7e-6,
	}, {
		// TCP stages through host memory: an 800 Gb/s link is bounded
		// by the GPU's 64 GB/s PCIe. PP4 over 2 nodes: 1 of 3 sends
		// crosses.
		name:    "pp4 across 2 nodes, tcp, PCIe-bound",
		p:       Parallelism{TP: 1, PP: 4, InterNode: &InterNode{Nodes: 2, Transport: TransportTCP, Bandwidth: 100e9}},
		commSec: 2*2048*tokens/450e9 + 2048*tokens/64e9,
	}} {
		d, err := NewParallelDeployment(hw, m, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		terms := d.Terms(b)
		if math.Abs(terms.CommSec-tc.commSec) > 1e-15*tc.commSec || math.Abs(terms.InterNodeLatencySec-tc.latency) > 1e-15 {
			t.Errorf("%s: comm %.9g s and latency %g s, want %.9g and %g", tc.name, terms.CommSec, terms.InterNodeLatencySec, tc.commSec, tc.latency)
		}
		one := tc.p
		one.InterNode = nil
		d1, err := NewParallelDeployment(hw, m, one)
		if err != nil {
			t.Fatal(err)
		}
		t1 := d1.Terms(b)
		want := d1.StepTime(b) + time.Duration(math.Round(((tc.commSec-t1.CommSec)/d.LinkEfficiency+tc.latency)*1e9))
		if got := d.StepTime(b); got < want-time.Nanosecond || got > want+time.Nanosecond {
			t.Errorf("%s: step %v, want %v (one node: %v)", tc.name, got, want, d1.StepTime(b))
		}
		if dec, ok := d.DecodeStepTime(len(b.Decode), 550); ok && dec != d.StepTime(b) {
			t.Errorf("%s: DecodeStepTime %v, StepTime %v", tc.name, dec, d.StepTime(b))
		}
	}
}

func TestInterNodeLayoutErrors(t *testing.T) {
	m, hw := toyDense(t), h100(t)
	for _, tc := range []struct {
		p    Parallelism
		want string
	}{
		{Parallelism{TP: 4, InterNode: &InterNode{Nodes: 3, Transport: TransportRDMA, Bandwidth: 1e9}}, "the worker's 4 GPUs (TP4 × PP1) do not divide evenly"},
		{Parallelism{TP: 2, PP: 3, InterNode: &InterNode{Nodes: 2, Transport: TransportRDMA, Bandwidth: 1e9}}, "3 GPUs per node do not hold whole TP2 groups"},
		{Parallelism{TP: 8, InterNode: &InterNode{Nodes: 2, Transport: "infiniband", Bandwidth: 1e9}}, `transport "infiniband"`},
		{Parallelism{TP: 8, InterNode: &InterNode{Nodes: 2, Transport: TransportTCP}}, "want a positive bandwidth"},
	} {
		if _, err := NewParallelDeployment(hw, m, tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p.InterNode, err, tc.want)
		}
	}
}
