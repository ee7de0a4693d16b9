package replay

import (
	"math"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// opalGranite is Opal's defaults.json deployment (granite-3.3-8b-instruct
// on one H100, a = 4, b = 24, CPUMemory tier) with n workers.
func opalGranite(n int) OpalCompat {
	return OpalCompat{
		Workers: n, Seed: 42, Router: "MaxPrefix",
		Layers: 40, Hidden: 4096, Params: 8_170_860_544, KVBytesPerToken: 163_840, MaxModelLen: 131_072,
		MemoryGB: 80, TFLOPS: 989.5, MemBWTBps: 3.3, TP: 1, A: 4, B: 24,
		BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192, ChunkedPrefill: true,
		MaxKVCReadyRequests: 8, LookaheadReqs: 256, KVChunk: 256,
		Tiers:  []OpalTier{{Name: "CPUMemory", BandwidthGBps: 50, LatencyNsec: 200, CapacityGB: 8}},
		Quirks: AllOpalQuirks(),
	}
}

// One 20,000-token prompt, 3 output tokens, as Opal ran it
// (../shared/data/formats/opal/micro_one_long): every figure of its
// opal_stats.json to the last bit.
func TestOpalCompatMicro(t *testing.T) {
	ids := make([]int64, 40)
	for i := range ids {
		ids[i] = int64(i)
	}
	in := Requests{&trace.Request{Source: "opal-trace", InputTokens: trace.Some[int64](20000), OutputTokens: trace.Some[int64](3),
		Arrival: trace.Some(trace.Time(0)), BlockSize: trace.Some[int64](512), HashIDs: ids}}
	c := opalGranite(1)
	if b := c.GPUBlocks(); b != 26534 {
		t.Errorf("GPU blocks %d, Opal 26534", b)
	}
	out, err := RunOpalCompat(c, in, "micro")
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"ttft", r.TTFTSec.V, 0.8010653623305508},
		{"latency", r.E2ESec.V, 0.8189005304469145},
		{"queuing", r.QueueSec.V, 0.0010002},
		{"kvc_io", r.KVFetchSec.V, 1.9999999999989644e-07},
		{"gpu_time", out.GPUTime[0], 0.6401062635916542},
		{"itl1", r.ITLSec[0], 0.0059450063903030426},
		{"itl2", r.ITLSec[1], 0.0059450560387879214},
		{"itl3", r.ITLSec[2], 0.005945105687272689},
		{"stage_time_end", out.End, 1},
		{"gpu_util_1", out.PerSecondGPUUtil[0], 81.79003304469144},
		{"gpu_util_2", out.PerSecondGPUUtil[1], 40.89501652234572},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, Opal %v", c.name, c.got, c.want)
		}
	}
	if len(r.ITLSec) != 3 || len(out.PerSecondFinished) != 2 || out.PerSecondFinished[0] != 1 || out.PerSecondFinished[1] != 0 {
		t.Errorf("ITL %v, per-second finished %v; Opal: 3 gaps, [1 0]", r.ITLSec, out.PerSecondFinished)
	}
	if got := math.Round(r.TTFTSec.V * 1e9); got != 801065362 {
		t.Errorf("TTFT %.0f ns, want 801065362", got)
	}
}
