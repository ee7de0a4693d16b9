package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
)

// TestPresetTable writes every shipped model on every hardware preset at
// the usual TP sizes: weights and KV per GPU, KV capacity at 0.9, and the
// step times of three reference batches. A change to a preset, a formula
// or a default shows up here as a diff to review.
func TestPresetTable(t *testing.T) {
	prefill := &Batch{Prefill: []PrefillChunk{{Tokens: 2048}}}
	decode := &Batch{Decode: make([]int64, 64)}
	for i := range decode.Decode {
		decode.Decode[i] = 1000
	}
	mixed := &Batch{Prefill: []PrefillChunk{{Tokens: 1024, Context: 4096}}, Decode: decode.Decode}

	var b strings.Builder
	fmt.Fprintf(&b, "# model hardware tp: weights GiB/GPU, KV B/token/GPU, KV tokens @0.9 | step: prefill 2048, decode 64×1000, mixed 1024@4096+64×1000\n")
	for _, name := range configNames(samples) {
		m := loadSample(t, name)
		fmt.Fprintf(&b, "%s: params %d, KV %d B/token, FLOPs/token@0 %.0f\n", name, m.Params(), m.KVBytesPerToken(), m.FLOPsPerToken(0))
		for _, hwName := range HardwareNames() {
			hw, err := HardwareByName(hwName)
			if err != nil {
				t.Fatal(err)
			}
			for _, tp := range []int{1, 2, 4, 8} {
				d, err := NewDeployment(hw, m, tp)
				if err != nil {
					t.Fatal(err)
				}
				kv := "does not fit"
				if n, err := d.KVCacheTokens(0.9); err == nil {
					kv = fmt.Sprint(n)
				}
				fmt.Fprintf(&b, "  %-10s tp%d: %7.2f GiB, %6d B, %12s | %v, %v, %v\n", hwName, tp,
					float64(d.WeightBytesPerRank())/(1<<30), d.KVBytesPerTokenPerRank(), kv,
					d.StepTime(prefill), d.StepTime(decode), d.StepTime(mixed))
			}
		}
	}
	golden.Check(t, "testdata/presets.golden", []byte(b.String()))
}
