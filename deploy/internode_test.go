package deploy

import (
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A worker of Llama-3.1-70B at TP16 over two 8-GPU H100 nodes: the
// cluster keys reach the deployment, its all-reduces cross nodes, so a
// decode step costs more than on one (hypothetical) 16-GPU NVLink domain,
// and the header says so.
func TestInterNodeCluster(t *testing.T) {
	yml := "model: llama-3.1-70b\ntp: 16\nnodes_per_worker: 2\ninter_node:\n  transport: gpudirect-rdma\n  bandwidth_gbps: 400\n  link_per_gpu: true\n  latency_us: 8\n"
	c, err := ParseCluster("c.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, trace.Run{}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	in := s.Deployment.InterNode
	if in == nil || in.Nodes != 2 || in.Bandwidth != 50e9 || !in.LinkPerGPU || in.Latency.Microseconds() != 8 {
		t.Fatalf("inter-node %+v", in)
	}
	if h := s.Header(); !strings.Contains(h, "(TP16 over 2 nodes, gpudirect-rdma 400 Gb/s)") {
		t.Errorf("header %q", h)
	}
	c.NodesPerWorker, c.InterNode = 0, nil
	one, err := c.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	b := &model.Batch{Decode: []int64{1000, 2000, 3000}}
	if s.Deployment.StepTime(b) <= one.StepTime(b) {
		t.Errorf("across nodes %v, one NVLink domain %v", s.Deployment.StepTime(b), one.StepTime(b))
	}
}

func TestInterNodeErrors(t *testing.T) {
	for _, tc := range []struct{ yml, want string }{
		{"tp: 8\nnodes_per_worker: 2\n", "c.yaml:2: nodes_per_worker: 2: a worker spanning nodes needs inter_node"},
		{"tp: 8\ninter_node:\n  transport: rdma\n  bandwidth_gbps: 200\n", "c.yaml:3: inter_node: applies to a worker spanning nodes"},
		{"tp: 8\nnodes_per_worker: 2\ninter_node:\n  transport: ib\n  bandwidth_gbps: 200\n", `c.yaml:4: inter_node.transport: "ib": want tcp, rdma or gpudirect-rdma`},
		{"tp: 8\nnodes_per_worker: 2\ninter_node:\n  transport: tcp\n", "inter_node.bandwidth_gbps: missing"},
		{"tp: 8\nnodes_per_worker: 2\ninter_node:\n  transport: tcp\n  bandwidth_gbps: 0\n", "c.yaml:5: inter_node.bandwidth_gbps: 0: want a line rate in Gb/s above 0"},
		{"tp: 8\nnodes_per_worker: 3\ninter_node:\n  transport: tcp\n  bandwidth_gbps: 100\n", "c.yaml:2: nodes_per_worker: 3 nodes per worker: the worker's 8 GPUs (TP8 × PP1) do not divide evenly"},
		{"tp: 8\nnodes_per_worker: 2\ninter_node:\n  transport: tcp\n  bandwidth_gbps: 100\n  link_per_gpu: yes please\n", "c.yaml:6: inter_node.link_per_gpu"},
	} {
		c, err := ParseCluster("c.yaml", []byte(tc.yml))
		if err == nil {
			_, err = c.Deployment()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yml, err, tc.want)
		}
	}
}
