package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The hardening cases (../shared/repro/hardening.sh): each bad input ends
// in a clear error with its exact text, or a correct result.

// TestFlagBounds: every numeric flag of stats, report and ingest is
// checked where it is parsed, and the error names the flag and its bound.
func TestFlagBounds(t *testing.T) {
	path := shareddata.Path(t, lambdaLabs)
	out := filepath.Join(t.TempDir(), "o.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--percentiles", "NaN", path}, `--percentiles: "NaN" is not a percentile in [0, 100]`},
		{[]string{"stats", "--percentiles", "50,-1", path}, `--percentiles: "-1" is not a percentile in [0, 100]`},
		{[]string{"stats", "--resamples", "-5", "--compare", path, path}, `invalid value "-5" for flag -resamples: -5 is not in [100, 100000]`},
		{[]string{"stats", "--resamples", "0", "--compare", path, path}, `invalid value "0" for flag -resamples: 0 is not in [100, 100000]`},
		{[]string{"stats", "--trim-warmup", "NaN", path}, `invalid value "NaN" for flag -trim-warmup: NaN is not a number of seconds in [0, 315576000]`},
		{[]string{"stats", "--trim-cooldown", "-1", path}, `invalid value "-1" for flag -trim-cooldown: -1 is not a number of seconds in [0, 315576000]`},
		{[]string{"stats", "--margin", "NaN", "--compare", path, path}, `--margin: "NaN" is not a relative margin in (0, 1) like 5% or 0.05`},
		{[]string{"stats", "--margin", "150%", "--compare", path, path}, `--margin: "150%" is not a relative margin in (0, 1) like 5% or 0.05`},
		{[]string{"stats", "--max-errors", "-5", path}, `invalid value "-5" for flag -max-errors: -5 is not in [0, 1073741824]`},
		{[]string{"ingest", "--max-errors", "-5", "-o", out, path}, `invalid value "-5" for flag -max-errors: -5 is not in [0, 1073741824]`},
		{[]string{"ingest", "--tp", "-2", "-o", out, path}, `invalid value "-2" for flag -tp: -2 is not in [0, 65536]`},
		{[]string{"ingest", "--max-document-bytes", "0", "-o", out, path}, `invalid value "0" for flag -max-document-bytes: 0 is not in [1, 1099511627776]`},
		{[]string{"ingest", "--max-document-bytes", "1000", "-o", out, path}, path + ": a whole JSON document over the limit of 1000 bytes (--max-document-bytes)"},
		{[]string{"report", "--max-errors", "-5", "--html", filepath.Join(t.TempDir(), "r.html"), path}, `invalid value "-5" for flag -max-errors: -5 is not in [0, 1073741824]`},
	} {
		want := c.want
		if strings.HasPrefix(want, "invalid value") {
			// A flag that does not parse is a usage error: one line with
			// a hint, exit status 2, no help dump.
			want += " (see 'opaltrace " + c.args[0] + " --help')"
		}
		stdout, stderr, err := opaltrace(t, c.args...)
		if err == nil || err.Error() != want {
			t.Errorf("%v:\n got %v\nwant %s", c.args, err, want)
		}
		if _, ok := errors.AsType[*usageError](err); ok != strings.HasPrefix(c.want, "invalid value") {
			t.Errorf("%v: usage error %v, want %v", c.args, ok, !ok)
		}
		if out := stdout + stderr; strings.Contains(out, "USAGE") || strings.Contains(out, "OPTIONS") {
			t.Errorf("%v: the help is printed on a usage error:\n%s", c.args, out)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused ingest wrote %s", out)
	}
}

// TestSamePath: an output that is an input (by device and inode, through
// a symlink too) or another output is refused before anything is written.
func TestSamePath(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "same.jsonl")
	data := "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n"
	if err := os.WriteFile(in, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ingest", "-o", in, in}, "ingest: --output " + in + " is the input " + in + ": refusing to overwrite an input"},
		{[]string{"ingest", "-o", link, in}, "ingest: --output " + link + " is the input " + in + ": refusing to overwrite an input"},
		{[]string{"report", "--html", in, "a=" + link}, "report: --html " + in + " is the input " + link + ": refusing to overwrite an input"},
		{[]string{"replay", "--per-second", out, "-o", out, in}, "replay: --output " + out + " and --per-second " + out + " are the same file: give each output its own path"},
		{[]string{"replay", "--per-second", link, "-o", out, in}, "replay: --per-second " + link + " is the input " + in + ": refusing to overwrite an input"},
	} {
		_, _, err := opaltrace(t, c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v:\n got %v\nwant %s", c.args, err, c.want)
		}
	}
	if b, _ := os.ReadFile(in); string(b) != data {
		t.Errorf("the input was changed to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d files in the directory, want the input and its link", len(ents))
	}
}

// TestReplayRejectsOverContext: a 300,000-token prompt on a model with a
// 131,072-token context is rejected with vLLM's reason, not simulated.
func TestReplayRejectsOverContext(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "long.jsonl")
	os.WriteFile(in, []byte("{\"timestamp\": 0, \"input_length\": 300000, \"output_length\": 10, \"hash_ids\": [1]}\n"+
		"{\"timestamp\": 10, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [2]}\n"), 0o644)
	out := filepath.Join(dir, "sim.parquet")
	for _, sched := range []string{"vllm", "sglang"} {
		if _, stderr, err := opaltrace(t, "replay", "--workers", "1", "--hardware", "h100", "--model", "llama-3.1-8b", "--scheduler", sched, "-o", out, in); err != nil {
			t.Fatalf("%s: %v\n%s", sched, err, stderr)
		}
		_, reqs, err := trace.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want := "max_model_len: the model's maximum context length is 131072 tokens; the request has 300010 (300000 in the prompt, 10 in the completion)"
		if len(reqs) != 2 || reqs[0].Status != trace.StatusRejected || reqs[0].Error != want || reqs[1].Status != trace.StatusOK {
			for _, r := range reqs {
				t.Logf("%s", r)
			}
			t.Errorf("%s: want the long request rejected with %q and the other ok", sched, want)
		}
	}
}
