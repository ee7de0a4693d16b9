package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// The SGLang PD benchmark (its runs say sglang) replays through the SGLang
// scheduler without being told; --scheduler sglang replays a Mooncake
// slice, twice, into byte-identical files.
func TestReplaySGLang(t *testing.T) {
	dir := t.TempDir()
	pd := shareddata.Path(t, "formats/sglang_bench_serving/TonyLi15_sglang-benchmark_pd_1p2d_n100_in512_out128_c64.jsonl")
	out := filepath.Join(dir, "pd.parquet")
	// It records its model (Qwen2.5-3B, not shipped) but no GPU: a
	// measured run of an unknown deployment is replayed only when asked.
	if _, _, err := opaltrace(t, "replay", "-o", out, pd); err == nil || !strings.Contains(err.Error(), "its deployment is not known") {
		t.Fatalf("replay of an unknown deployment: %v", err)
	}
	assertNoFile(t, out)
	if _, stderr, err := opaltrace(t, "replay", "--assume-deployment", "-o", out, pd); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr)
	}
	runs, reqs, err := trace.ReadFile(out)
	if err != nil || len(runs) != 1 || runs[0].Engine != "sglang" || len(reqs) != 100 {
		t.Fatalf("%v: runs %+v, %d requests", err, runs, len(reqs))
	}

	in := sampleSlice(t, dir, 300)
	if a, b := replayTwice(t, dir, "sg", "--scheduler", "sglang", "--workers", "2", in); !bytes.Equal(a, b) {
		t.Error("two SGLang replays with the same inputs wrote different files")
	}
	runs, reqs, err = trace.ReadFile(filepath.Join(dir, "sga.parquet"))
	if err != nil || runs[0].Engine != "sglang" || len(reqs) != 300 {
		t.Fatalf("%v: runs %+v, %d requests", err, runs, len(reqs))
	}
	if _, _, err := opaltrace(t, "replay", "--scheduler", "trt", "-o", filepath.Join(dir, "x.parquet"), in); err == nil {
		t.Error("an unknown scheduler was accepted")
	}
}

// The replay flags that feed the deployment are bounded, and the message
// gives the bound (a trace replay and a sampled one check alike).
func TestReplayFlagBounds(t *testing.T) {
	dir := t.TempDir()
	in := sampleSlice(t, dir, 10)
	out := filepath.Join(dir, "x.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers 0: want a number of workers from 1 to 4096"},
		{[]string{"--workers", "5000000"}, "--workers 5000000: want a number of workers from 1 to 4096"},
		{[]string{"--tp", "-2"}, "--tp -2: want a tensor-parallel degree from 1 to 1024"},
		{[]string{"--time-scale", "1e9"}, "--time-scale 1e+09: want an arrival time multiplier from 1e-06 to 10000"},
		{[]string{"--time-scale", "0"}, "--time-scale 0: want an arrival time multiplier from 1e-06 to 10000"},
		{[]string{"--block-size", "-1"}, "--block-size -1: want a number of tokens per hash_ids entry from 1 to 1048576"},
		{[]string{"--max-num-batched-tokens", "0"}, "--max-num-batched-tokens 0: want a token budget per step from 1 to 16777216"},
		{[]string{"--max-num-seqs", "0", "--workers", "0"}, "--workers 0: want a number of workers from 1 to 4096\n--max-num-seqs 0: want a number of running sequences from 1 to 1048576"},
	} {
		_, _, err := opaltrace(t, append(append([]string{"replay", "-o", out}, c.args...), in)...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
		assertNoFile(t, out)
	}
}
