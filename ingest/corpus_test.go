package ingest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// parseTxtar splits a txtar archive into its comment and sections.
func parseTxtar(data []byte) map[string][]byte {
	files := map[string][]byte{}
	name := ""
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		l := bytes.TrimRight(line, "\n")
		if bytes.HasPrefix(l, []byte("-- ")) && bytes.HasSuffix(l, []byte(" --")) && len(l) > 6 {
			name = string(l[3 : len(l)-3])
			files[name] = []byte{}
			continue
		}
		if name != "" {
			files[name] = append(files[name], line...)
		}
	}
	return files
}

var triedRE = regexp.MustCompile(`\(tried [^)]*\)`)

// describe reads input as the CLI would and describes every record: the
// request id and the fields that matter for the case, each bad record,
// and the runs.
func describe(input []byte, opts Options) string {
	var b strings.Builder
	r, err := NewReader(bytes.NewReader(input), "input", opts)
	if err != nil {
		// The list of formats tried grows with every format.
		return triedRE.ReplaceAllString(fmt.Sprintf("error: %v\n", err), "(tried …)")
	}
	for r.Scan() {
		switch rec := r.Record().(type) {
		case *trace.Request:
			if err := rec.Validate(); err != nil {
				fmt.Fprintf(&b, "INVALID %s: %v\n", rec.RequestID, err)
			}
			fmt.Fprintf(&b, "ok %s%s\n", rec.RequestID, brief(rec))
		case *SyntaxError:
			fmt.Fprintf(&b, "bad %v\n", rec)
		}
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "fatal: %v\n", err)
	}
	for _, run := range r.Runs() {
		fmt.Fprintf(&b, "run %s\n", run.Name)
	}
	return b.String()
}

// brief lists the fields a corpus case checks.
func brief(r *trace.Request) string {
	var b strings.Builder
	if r.Status != trace.StatusOK {
		fmt.Fprintf(&b, " status=%s error=%q", r.Status, r.Error)
	}
	for _, f := range []struct {
		name string
		v    trace.Opt[int64]
	}{{"input_tokens", r.InputTokens}, {"output_tokens", r.OutputTokens}} {
		if f.v.OK {
			fmt.Fprintf(&b, " %s=%d", f.name, f.v.V)
		}
	}
	for _, f := range []struct {
		name string
		v    trace.Opt[trace.Time]
	}{{"arrival_s", r.Arrival}, {"intended_arrival_s", r.IntendedArrival}} {
		if f.v.OK {
			fmt.Fprintf(&b, " %s=%.9f", f.name, f.v.V.Seconds())
		}
	}
	for _, f := range []struct {
		name string
		v    trace.Opt[float64]
	}{{"ttft_s", r.TTFTSec}, {"e2e_s", r.E2ESec}} {
		if f.v.OK {
			fmt.Fprintf(&b, " %s=%v", f.name, f.v.V)
		}
	}
	if r.ITLSec != nil {
		fmt.Fprintf(&b, " itl_s=%v", r.ITLSec)
	}
	if r.HashIDs != nil {
		fmt.Fprintf(&b, " hash_ids=%v", r.HashIDs)
	}
	return b.String()
}

func TestCorpus(t *testing.T) {
	paths, err := filepath.Glob("testdata/*/*.txtar")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			files := parseTxtar(data)
			input, ok := files["input"]
			if !ok {
				t.Fatal("no -- input -- section")
			}
			got := describe(input, Options{})
			if want := string(files["expect"]); got != want {
				t.Errorf("got:\n%swant:\n%s", got, want)
			}
		})
	}
}
