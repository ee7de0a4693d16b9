package ingest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
)

// clientFixtures are the hand-made inputs of the client and production
// formats, each read in place (so sibling summaries pair) and compared
// with its golden dump: requests, bad records and runs.
var clientFixtures = []struct{ path, format string }{
	{"testdata/aiperf/new.jsonl", aiperfName},
	{"testdata/genaiperf/profile_export.json", genAIPerfName},
	{"testdata/guidellm/v0.2.json", guideLLMName},
	{"testdata/llmperf/m_10_5_individual_responses.json", llmperfName},
	{"testdata/inferenceperf/per_request_lifecycle_metrics.json", inferencePerfName},
	{"testdata/azure/week2024.csv", azureName},
	{"testdata/azure/conv2023.csv", azureName},
	{"testdata/burstgpt/burst.csv", burstGPTName},
	{"testdata/lmbenchmark/demo_output_0.5.csv", lmbenchmarkName},
	{"testdata/agentic/session_a.json", agenticName},
	{"testdata/opal/stage_0/opal_stats.json", opalName},
}

// dumpInput reads path as the CLI would and dumps every record and run.
func dumpInput(t *testing.T, path string, opts Options) (string, Reader) {
	t.Helper()
	r := openFile(t, path, opts)
	reqs, bad := readAll(t, r)
	var b strings.Builder
	for _, q := range reqs {
		fmt.Fprintln(&b, q)
	}
	for _, e := range bad {
		fmt.Fprintln(&b, "bad", e)
	}
	for _, run := range r.Runs() {
		j, err := json.Marshal(run)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "run %s\n", j)
	}
	return b.String(), r
}

func TestClientFixtures(t *testing.T) {
	for _, fx := range clientFixtures {
		t.Run(fx.path, func(t *testing.T) {
			got, _ := dumpInput(t, fx.path, Options{})
			golden.Check(t, fx.path+".string", []byte(got))
			// Detection picks the format the fixture is written in.
			_, c, err := Open(fx.path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			r := openFile(t, fx.path, Options{})
			if rs := r.Runs(); len(rs) > 0 && rs[0].Source != fx.format {
				t.Errorf("detected as %s", rs[0].Source)
			}
			readAll(t, r)
			if rs := r.Runs(); len(rs) == 0 || rs[0].Source != fx.format {
				t.Errorf("runs %+v; want source %s", rs, fx.format)
			}
		})
	}
}

func TestFixtureNames(t *testing.T) {
	// Every fixture named above exists under testdata with its golden.
	for _, fx := range clientFixtures {
		if m, _ := filepath.Glob(fx.path + ".string"); len(m) != 1 {
			t.Errorf("%s: no golden (run go test -run TestClientFixtures -update)", fx.path)
		}
	}
}
