package calibrate

import (
	"bytes"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
)

// A hand-computed table: 1 MB of KV per token; the CPU tier loads over
// 100 µs + bytes / 25 GB/s, the disk tier over 1,000 µs + bytes / 5 GB/s,
// so at 1,000 tokens the CPU hit costs 0.1 + 40 = 40.1 ms and the disk hit
// 1 + 200 = 201 ms over the GPU hit. The fit returns those figures, and
// on an HGX H100 node (PCIe 2 µs, host memory 1 µs) the keys take the
// other links' latencies off: pcie 99 µs, nvme 1,000 − 1 − 99 = 900 µs.
func TestFitLinksExact(t *testing.T) {
	table := "# hand-computed\nprompt_tokens,ttft_gpu_ms,ttft_cpu_ms,ttft_disk_ms\n" +
		"1000,50,90.1,251\n" +
		"2000,60,140.1,461\n" +
		"4000,80,240.1,881\n"
	pts, err := ParseLinkTable("t.csv", []byte(table))
	if err != nil {
		t.Fatal(err)
	}
	fits, err := FitLinks(pts, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	want := []LinkFit{{Tier: LinkHost, Points: 3, Bandwidth: 25e9, Latency: 100e-6}, {Tier: LinkDisk, Points: 3, Bandwidth: 5e9, Latency: 1e-3}}
	if len(fits) != len(want) {
		t.Fatalf("%d fits, want %d", len(fits), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for i, f := range fits {
		w := want[i]
		if f.Tier != w.Tier || f.Points != w.Points || !near(f.Bandwidth, w.Bandwidth) || !near(f.Latency, w.Latency) || f.R2 < 1-1e-12 || f.MAPE > 1e-12 || len(f.Warnings) > 0 {
			t.Errorf("fit %+v, want %+v", f, w)
		}
	}
	n, err := model.NodeByName("hgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	spec, warn := LinkNodeSpec(fits, n, 1)
	if *spec.PCIeGBps != 25 || *spec.PCIeLatencyUs != 99 || *spec.NVMeGBps != 5 || *spec.NVMeLatencyUs != 900 || spec.NetworkGBps != nil || len(warn) > 0 {
		t.Errorf("keys pcie %v GB/s %v µs, nvme %v GB/s %v µs; warnings %q", *spec.PCIeGBps, *spec.PCIeLatencyUs, *spec.NVMeGBps, *spec.NVMeLatencyUs, warn)
	}
	// A worker of 2 GPUs loads over two PCIe links at once: each has half.
	if spec, _ := LinkNodeSpec(fits, n, 2); *spec.PCIeGBps != 12.5 {
		t.Errorf("2 GPUs: pcie %v GB/s, want 12.5", *spec.PCIeGBps)
	}
	// The keys, applied to the node, give the fitted path back.
	m, err := n.With(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := model.PathTime([]model.Link{m.NVMe, m.HostDRAM, m.PCIe}, 4000*1_000_000); got.Seconds() != 0.801 {
		t.Errorf("disk path of 4,000 tokens on the fitted node: %v, want 801 ms", got)
	}
}

// The Mooncake docs' SGLang PD table (H20, Qwen3-235B, TP 8 to TP 8 over
// 4×400 GbE RoCE): KV transfer times against the printed KV sizes are a
// line of about 165 GB/s and 1.8 ms (golden: -update rewrites it).
func TestFitLinksMooncakePD(t *testing.T) {
	path := shareddata.Path(t, "measurements/mooncake_docs/pd_1p1d_ttft_sglang_h20_qwen3-235b.csv")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := ParseLinkTable(path, data)
	if err != nil {
		t.Fatal(err)
	}
	fits, err := FitLinks(pts, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f := fits[0]; len(fits) != 1 || f.Tier != LinkRemote || f.Points != 9 || f.R2 < 0.99 || f.Bandwidth < 100e9 || f.Bandwidth > 200e9 {
		t.Errorf("fits %+v", fits)
	}
	var b bytes.Buffer
	if err := WriteLinkFits(&b, fits, nil); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/link_mooncake_pd_sglang.txt", b.Bytes())
}

func TestParseLinkTableErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "t.csv:1: header: no header line"},
		{"tokens,ttft_cpu_ms\n", "t.csv:1: header: no prompt_tokens column"},
		{"prompt_tokens,ttft_cpu_ms\n1,2\n", "t.csv:1: ttft_cpu: a tier's TTFT needs the GPU-hit TTFT"},
		{"prompt_tokens,seconds\n1,2\n", "t.csv:1: header: no tier column"},
		{"prompt_tokens,kv_transfer_ms\n", "t.csv:1: table: no measurements"},
		{"prompt_tokens,kv_transfer_ms\n128,2\n0,3\n", "t.csv:3: prompt_tokens: \"0\" is not a positive token count"},
		{"prompt_tokens,kv_transfer_ms\n# c\n128,-2\n", "t.csv:3: kv_transfer_ms: \"-2\" is not a non-negative number"},
		{"prompt_tokens,kv_transfer_ms,kv_size\n128,2,49 XB\n", "t.csv:2: kv_size: \"49 XB\" is not a size"},
		{"prompt_tokens,ttft_gpu_ms,ttft_cpu_ms\n128,20,10\n", "t.csv:2: ttft_cpu_ms: 0.01 s is below the GPU-hit TTFT 0.02 s"},
		{"prompt_tokens,ttft_gpu_ms,ttft_cpu_ms\n128,20\n", "t.csv:2: ttft_cpu_ms: missing"},
		{"prompt_tokens,prompt_tokens,kv_transfer_ms\n", "t.csv:1: prompt_tokens: column given twice"},
	} {
		_, err := ParseLinkTable("t.csv", []byte(c.in))
		var te *TableError
		if !errors.As(err, &te) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %s…", c.in, err, c.want)
		}
	}
	// One size only, or a time that falls with the size: nothing to fit.
	for _, in := range []string{"prompt_tokens,kv_transfer_ms\n128,2\n128,3\n", "prompt_tokens,kv_transfer_ms\n128,3\n256,2\n512,1\n"} {
		pts, err := ParseLinkTable("t.csv", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := FitLinks(pts, 1000); err == nil {
			t.Errorf("%q: fitted", in)
		}
	}
}

func FuzzParseLinkTable(f *testing.F) {
	f.Add([]byte("prompt_tokens,ttft_gpu_ms,ttft_cpu_ms,ttft_disk_ms\n1000,50,90.1,251\n2000,60,140.1,461\n"))
	f.Add([]byte("prompt_tokens,ttft_ms,kv_size,kv_transfer_ms\n128,129.21,49 MB,2.07\n256,125.76,99 MB,2.58\n"))
	f.Add([]byte("prompt_tokens,kv_bytes,kv_transfer_s\n# c\n1,1e6,0.001\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pts, err := ParseLinkTable("t", data)
		if err != nil {
			var te *TableError
			if !errors.As(err, &te) || te.Line < 1 {
				t.Fatalf("error %v is not a TableError with a line", err)
			}
			return
		}
		for _, p := range pts {
			if p.Tokens <= 0 || p.Bytes < 0 || !(p.Seconds >= 0) || p.Line < 1 {
				t.Fatalf("accepted %+v", p)
			}
		}
		if fits, err := FitLinks(pts, 1000); err == nil {
			for _, f := range fits {
				if !(f.Bandwidth > 0) || f.Latency < 0 || math.IsInf(f.Bandwidth, 0) {
					t.Fatalf("fit %+v", f)
				}
			}
		}
	})
}
