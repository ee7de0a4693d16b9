package deploy

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// pdVLLMH800Cluster is the Mooncake documentation's vLLM PD setup: two
// nodes of 8 × H800, Qwen3-8B at TP 8 on each (one prefill instance, one
// decode instance), vLLM 0.11.2.dev358 with --no-enable-prefix-caching,
// MooncakeConnector between them over RoCE. The link is the node's RDMA
// profile at the 200 GB/s line rate against which the page states its
// bandwidth utilisation (kv_bandwidth_GBps / bandwidth_utilization_pct:
// 36.53 / 18.3 % … 142.25 / 71.1 %, all 200 GB/s), that is 4 × 400 Gb/s.
const pdVLLMH800Cluster = `hardware: h800
model: testdata/qwen3-8b
tp: 8
engine_version: 0.11.2
` + pd1P1D + `scheduler:
  engine: vllm
  enable_prefix_caching: false
`

// pd1P1D is both pages' cluster: one prefill and one decode node, whose
// 4 × 400 Gb/s RoCE NICs carry the KV.
const pd1P1D = `workers: 2
node_override:
  network: rdma
  nic_gbps: 1600
disaggregation:
  prefill_workers: 1
`

// pdChatTemplateTokens is what the openai-chat backend's chat template
// adds to each random prompt, as the page's SOURCES.md states it (~10; its
// KV sizes, rounded to whole 16-token blocks, say 1 to 16).
const pdChatTemplateTokens = 10

// A pdRow is one row of a Mooncake documentation PD table.
type pdRow struct {
	prompt      int64
	ttft, xfer  float64 // ms
	kvSize      string
	utilisation float64
}

// readPDTable reads a pd_1p1d_*.csv of ../shared/data's mooncake_docs.
func readPDTable(t *testing.T, name string) []pdRow {
	t.Helper()
	raw, err := os.ReadFile(shareddata.Path(t, "measurements/mooncake_docs/"+name))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if h := lines[0]; !strings.HasPrefix(h, "prompt_tokens,") || !strings.HasSuffix(h, "ttft_ms,kv_size,kv_transfer_ms,kv_bandwidth_GBps,bandwidth_utilization_pct") {
		t.Fatalf("%s: header %q", name, h)
	}
	var rows []pdRow
	for i, line := range lines[1:] {
		f := strings.Split(line, ",")
		var r pdRow
		var bw float64
		if len(f) != 6 {
			t.Fatalf("%s:%d: %d fields", name, i+2, len(f))
		}
		if _, err := fmt.Sscan(f[0], &r.prompt); err != nil {
			t.Fatalf("%s:%d: %v", name, i+2, err)
		}
		for _, x := range []struct {
			s string
			v *float64
		}{{f[1], &r.ttft}, {f[3], &r.xfer}, {f[4], &bw}, {f[5], &r.utilisation}} {
			if _, err := fmt.Sscan(x.s, x.v); err != nil {
				t.Fatalf("%s:%d: %v", name, i+2, err)
			}
		}
		r.kvSize = f[2]
		rows = append(rows, r)
	}
	return rows
}

// pdH20Cluster is the Mooncake documentation's SGLang PD setup: two
// nodes of 8 × H20-3e (143 GB), Qwen3-235B-A22B-Instruct-2507 in bf16 at
// TP 8 on each (one prefill and one decode server), SGLang main of July
// 2026 (43124cdd: after v0.5.10, whose defaults' rule stands for it) with
// Mooncake's transfer engine over 4 × 400 GbE RoCE, radix cache and
// chunked prefill off (--chunked-prefill-size -1: no limit, here 65,536,
// more than any prompt), stream interval 1. The page's utilisation column
// is against 200 GB/s, as the vLLM page's.
const pdH20Cluster = `hardware: h20-3e
model: testdata/qwen3-235b-a22b-instruct-2507
tp: 8
engine_version: 0.5.10
` + pd1P1D + `scheduler:
  engine: sglang
  disable_radix_cache: true
  chunked_prefill_size: 65536
  stream_interval: 1
`

// A pdTable is one of the Mooncake documentation's PD tables and the
// replay of its benchmark.
type pdTable struct {
	csv, golden, title string
	cluster            string
	extra              int64  // tokens the client adds to each prompt (chat template)
	client             string // the benchmark's command, as the page gives it
}

var pdTables = []pdTable{
	{
		csv: "pd_1p1d_ttft_vllm_h800_qwen3-8b.csv", golden: "pd_mooncake_docs_vllm_h800",
		title: "vLLM prefill/decode disaggregation, 1P1D, 2 × (8 × H800), Qwen3-8B TP 8", cluster: pdVLLMH800Cluster, extra: pdChatTemplateTokens,
		client: "vllm bench serve --dataset-name random --random-output-len 128 --num-prompts 50 --max-concurrency 1 --backend openai-chat (each prompt plus " + fmt.Sprint(pdChatTemplateTokens) + " chat-template tokens)",
	},
	{
		csv: "pd_1p1d_ttft_sglang_h20_qwen3-235b.csv", golden: "pd_mooncake_docs_sglang_h20",
		title: "SGLang prefill/decode disaggregation, 1P1D, 2 × (8 × H20-3e), Qwen3-235B-A22B TP 8", cluster: pdH20Cluster,
		client: "python -m sglang.benchmark.serving --dataset-name random --random-range-ratio 1.0 --random-output-len 128 --num-prompts 50 --max-concurrency 1 --request-rate inf --tokenize-prompt",
	},
}

// TestMooncakeDocsPD replays the Mooncake documentation's two
// prefill/decode tables (TTFT against prompt length at concurrency 1, the
// KV sent from the prefill node to the decode node): for each prompt
// length, the page's 50 random prompts of that length and 128 output
// tokens, one client, through a prefill worker, the KV's transfer and a
// decode worker. Uncalibrated, and at a fit of another deployment of the
// same engine (vLLM: the surajssd section's, Llama-3.3-70B on 8 × A100;
// SGLang: the DataCrunch 405B section's, Llama-3.1-405B on 8 × H200),
// nothing fitted to these tables but the link's 80 % of line rate and
// 0.4 ms a transfer, which model.Node's RDMA profile took from their
// transfer columns. It fails when a table differs from its golden file
// (-update rewrites them).
func TestMooncakeDocsPD(t *testing.T) {
	for _, tab := range pdTables {
		for _, fit := range []struct {
			suffix, how string
			coef        map[string]float64
		}{
			{"", "uncalibrated: the roofline's default coefficients", nil},
			{"_calibrated", "", nil},
		} {
			coef, how := fit.coef, fit.how
			if fit.suffix != "" {
				if strings.Contains(tab.cluster, "engine: sglang") {
					coef, how = dc405Fit, "at the DataCrunch 405B section's fit (Llama-3.1-405B, 8 × H200 TP 8, SGLang; expert_mfu = mfu), held out"
				} else {
					coef, how = surajssdFit, "at the surajssd section's fit (Llama-3.3-70B, 8 × A100-40GB TP 8, vLLM 0.8.3), held out"
				}
			}
			golden.Check(t, "testdata/"+tab.golden+fit.suffix+".md", []byte(pdReplayTable(t, tab, coef, how)))
		}
	}
}

// pdReplayTable replays tab's benchmark at the coefficients coef (nil:
// the defaults) and returns its markdown table.
func pdReplayTable(t *testing.T, tab pdTable, coef map[string]float64, how string) string {
	t.Helper()
	rows := readPDTable(t, tab.csv)
	s := resolveYAML(t, tab.cluster)
	if coef != nil {
		how += " (" + applyFit(s, coef) + ")"
	}
	title := tab.title
	if coef != nil {
		title += ", at a fit held out from it"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Mooncake documentation: %s\n\n", title)
	fmt.Fprintf(&b, "Measured: the page's mean TTFT and KV transfer time, 50 requests at concurrency 1 (%s).\n", tab.csv)
	fmt.Fprintf(&b, "Client: `%s`.\n", tab.client)
	fmt.Fprintf(&b, "Replayed: %s; one client, 128 output tokens; %s.\n", s.Header(), how)
	b.WriteString("The KV link's figures (80 % of the 200 GB/s line, 0.4 ms a transfer: model.Node's RDMA profile) were read off\n")
	b.WriteString("these tables' transfer columns, so the transfer column is in-sample; the TTFT column tests the rest. Error: replayed / measured − 1.\n")
	b.WriteString("Regenerate: go test ./deploy -run TestMooncakeDocsPD -update\n\n")
	for _, n := range s.Notes {
		if strings.HasPrefix(n, "prefill/decode") {
			b.WriteString("- " + n + "\n")
		}
	}
	b.WriteString("\n| prompt tokens | KV (page) | TTFT measured (ms) | replayed | error | KV transfer measured (ms) | replayed | error |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		var reqs []*trace.Request
		for i := range 50 {
			reqs = append(reqs, &trace.Request{
				RequestID: fmt.Sprintf("p%d/%d", r.prompt, i), Source: "test", Status: trace.StatusOK,
				InputTokens: trace.Some(r.prompt + tab.extra), OutputTokens: trace.Some(int64(128)),
			})
		}
		cfg := s.Config
		cfg.Workload = replay.WorkloadConfig{Mode: replay.ModeClosed, Clients: 1}
		var ttft, xfer float64
		var n int
		_, err := replay.Run(cfg, s.Step, s.KVBlocks, reqs, func(o *trace.Request) error {
			if o.Status != trace.StatusOK {
				return fmt.Errorf("%s: %s %s", o.RequestID, o.Status, o.Error)
			}
			ttft += o.TTFTSec.V
			xfer += o.KVFetchSec.V
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ttft, xfer = 1e3*ttft/float64(n), 1e3*xfer/float64(n)
		fmt.Fprintf(&b, "| %d | %s | %.2f | %.2f | %+.1f %% | %.2f | %.2f | %+.1f %% |\n",
			r.prompt, r.kvSize, r.ttft, ttft, (ttft/r.ttft-1)*100, r.xfer, xfer, (xfer/r.xfer-1)*100)
	}
	return b.String()
}
