package model

import (
	"strings"
	"testing"
)

func TestVLLMServeBatchDefaults(t *testing.T) {
	hw := func(name string) Hardware {
		h, err := ResolveHardware(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, c := range []struct {
		version, hw  string
		seqs, tokens int64
		why          string
	}{
		{"0.11.0", "h100", 1024, 8192, "other than the A100"},
		{"0.11.0", "h200", 1024, 8192, "70 GiB or more"},
		{"0.11.0", "a100-80gb", 256, 2048, "excludes it"},
		{"0.8.5", "a100-80gb", 1024, 8192, "vLLM 0.8.5's"},
		{"0.11.0", "a100-40gb", 256, 2048, "under 70 GiB"},
		{"0.11.0", "l40s", 256, 2048, "under 70 GiB"},
		{"", "h100", 1024, 8192, "no version recorded"},
		{"0.8.4", "a100-80gb", 256, 2048, "vLLM 0.8.4's default for an API server on a GPU other than the H100 and H200 (by device name: a100-80gb)"},
		{"0.8.4", "h200", 1024, 8192, "on an H100 or H200"},
		{"0.8.3", "a100-40gb", 1024, 2048, "vLLM 0.8.3's default for an API server on a GPU other than the H100 and H200 (by device name: a100-40gb), 1024 sequences on every GPU"},
		{"0.8.0", "h800", 1024, 2048, "other than the H100"},
		{"0.8.3", "h100", 1024, 8192, "on an H100 or H200"},
		{"0.7.3", "a100-80gb", 256, 2048, "0.7.3 ran the V0 engine by default, not modelled"},
	} {
		d := VLLMServeBatchDefaults(c.version, hw(c.hw))
		if d.MaxNumSeqs != c.seqs || d.MaxNumBatchedTokens != c.tokens || !strings.Contains(d.Why, c.why) {
			t.Errorf("%q on %s: %d seqs, %d tokens, %q; want %d, %d, %q", c.version, c.hw, d.MaxNumSeqs, d.MaxNumBatchedTokens, d.Why, c.seqs, c.tokens, c.why)
		}
	}
}
