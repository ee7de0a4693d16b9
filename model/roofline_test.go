package model

import (
	"math"
	"testing"
	"time"
)

func newH100(t testing.TB, model string, tp int) *Deployment {
	t.Helper()
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(hw, loadSample(t, model), tp)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestStepTimeEmpty(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	if got := d.StepTime(&Batch{}); got != 0 {
		t.Errorf("empty batch = %v, want 0", got)
	}
	if got := d.StepTime(nil); got != 0 {
		t.Errorf("nil batch = %v, want 0", got)
	}
}

// One 2,048-token prefill chunk with no cached context, Llama-3.1-8B on
// one H100, default coefficients (MFU 0.5, bandwidth efficiency 0.8,
// overhead 300 µs).
//
// FLOPs:
//
//	layer matmuls  2 · 32 · (2·4096·4096 + 2·4096·1024 + 3·4096·14336) · 2048
//	             = 2 · 6,979,321,856 · 2048          = 28,587,302,322,176
//	LM head        2 · 128256 · 4096 · 1 sequence     =      1,050,673,152
//	attention      4·32·32·128 · 2048·(0 + 2049/2)
//	             = 524,288 · 2,098,176               =  1,100,048,498,688
//	total                                            = 29,688,401,494,016
//
// compute = 29,688,401,494,016 / (989.5e12 · 0.5) = 60.006875177 ms.
// memory  = (weights without the embedding (8,030,261,248 − 525,336,576)·2
// = 15,009,849,344 B + KV written 2048·131,072 = 268,435,456 B) /
// (3.35e12 · 0.8) = 5.70 ms, so the step is compute-bound:
// 60,006,875 ns + 300,000 ns = 60,306,875 ns.
func TestStepTimeSinglePrefillByHand(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	got := d.StepTime(&Batch{Prefill: []PrefillChunk{{Tokens: 2048}}})
	if want := 60_306_875 * time.Nanosecond; got != want {
		t.Errorf("StepTime = %d ns, want %d ns", got, want)
	}
}

// 64 requests decoding one token each over 1,000 cached tokens,
// Llama-3.1-8B on one H100.
//
// memory = (15,009,849,344 B weights + 131,072 · (64·1000 read + 64
// written) = 8,396,996,608 B KV) / 2.68e12 = 8.733898 ms.
// compute = (2·6,979,321,856·64 + 1,050,673,152·64 + 524,288·64·1001)
// / 494.75e12 = 994,184,265,728 / 494.75e12 = 2.01 ms: memory-bound.
// step = 8,733,898 ns + 300,000 ns = 9,033,898 ns.
func TestStepTimeDecodeMemoryBound(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	b := &Batch{Decode: make([]int64, 64)}
	for i := range b.Decode {
		b.Decode[i] = 1000
	}
	if got, want := d.StepTime(b), 9_033_898*time.Nanosecond; got != want {
		t.Errorf("StepTime = %d ns, want %d ns", got, want)
	}
	// Halving the bandwidth efficiency must nearly double a memory-bound
	// step; halving MFU must not change it.
	d.MFU = DefaultMFU / 2
	if got := d.StepTime(b); got != 9_033_898*time.Nanosecond {
		t.Errorf("MFU changed a memory-bound step: %v", got)
	}
	d.BandwidthEfficiency = DefaultBandwidthEfficiency / 2
	if got, want := d.StepTime(b), (2*8_733_898+300_000)*time.Nanosecond; got < want-1 || got > want+1 {
		t.Errorf("half bandwidth: %d ns, want %d", got, want)
	}
}

// The batch of TestStepTimeDecodeMemoryBound with the KV reads at their
// own efficiency, 0.2, and the weights at the default 0.8:
//
//	memory = 15,009,849,344 B / (3.35e12 · 0.8) + 8,396,996,608 B / (3.35e12 · 0.2)
//	       = 5,600,690.05 ns + 12,532,830.76 ns = 18,133,520.81 ns,
//
// step = 18,133,521 ns + 300,000 ns = 18,433,521 ns. A prefill-free
// batch of one request barely moves (its KV is a few MB); and the
// KV efficiency set to the weights' prices the step as leaving it 0 does.
func TestKVBandwidthEfficiencyByHand(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	b := &Batch{Decode: make([]int64, 64)}
	for i := range b.Decode {
		b.Decode[i] = 1000
	}
	one := &Batch{Decode: []int64{10}}
	shared, sharedOne := d.StepTime(b), d.StepTime(one)
	d.KVBandwidthEfficiency = 0.2
	if got, want := d.StepTime(b), 18_433_521*time.Nanosecond; got != want {
		t.Errorf("StepTime = %d ns, want %d ns", got, want)
	}
	if got := d.StepTime(one); got-sharedOne > 10*time.Microsecond {
		t.Errorf("one short decode: %v with KV efficiency 0.2, %v without", got, sharedOne)
	}
	if n, ok := d.DecodeStepTime(64, 64_000); !ok || n != d.StepTime(b) {
		t.Errorf("DecodeStepTime = %v, %v; StepTime %v", n, ok, d.StepTime(b))
	}
	d.KVBandwidthEfficiency = d.BandwidthEfficiency
	if got := d.StepTime(b); got < shared-time.Nanosecond || got > shared+time.Nanosecond {
		t.Errorf("KV efficiency = weights': %v, want %v as with none", got, shared)
	}
}

// A decode token over c cached tokens costs what a 1-token prefill chunk
// over c does: one pass treats them alike.
func TestDecodeEqualsOneTokenChunk(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	a := d.StepTime(&Batch{Decode: []int64{5000}})
	b := d.StepTime(&Batch{Prefill: []PrefillChunk{{Tokens: 1, Context: 5000}}})
	if a != b {
		t.Errorf("decode %v != 1-token chunk %v", a, b)
	}
}

// A mixed batch is one pass: it costs less than its parts priced apart
// (weights are read once, overhead paid once) and at least the larger.
func TestMixedBatchIsOnePass(t *testing.T) {
	d := newH100(t, "llama-3.1-8b", 1)
	pre := &Batch{Prefill: []PrefillChunk{{Tokens: 512, Context: 1024}}}
	dec := &Batch{Decode: []int64{300, 4000, 12000}}
	mixed := &Batch{Prefill: pre.Prefill, Decode: dec.Decode}
	p, q, m := d.StepTime(pre), d.StepTime(dec), d.StepTime(mixed)
	if m >= p+q || m < max(p, q) {
		t.Errorf("mixed %v, prefill %v, decode %v", m, p, q)
	}
}

func TestStepTimeMonotone(t *testing.T) {
	for _, tp := range []int{1, 2, 8} {
		d := newH100(t, "llama-3.1-8b", tp)
		var prev time.Duration
		for ctx := int64(0); ctx <= 131072; ctx += 4096 {
			b := &Batch{
				Prefill: []PrefillChunk{{Tokens: 256, Context: ctx}},
				Decode:  []int64{ctx, ctx / 2, 7},
			}
			got := d.StepTime(b)
			if got < prev {
				t.Fatalf("tp=%d: context %d: %v < %v at shorter context", tp, ctx, got, prev)
			}
			prev = got
		}
		prev = 0
		for n := int64(1); n <= 16384; n *= 2 {
			got := d.StepTime(&Batch{Prefill: []PrefillChunk{{Tokens: n, Context: 100}}})
			if got < prev {
				t.Fatalf("tp=%d: %d tokens: %v < %v with fewer tokens", tp, n, got, prev)
			}
			prev = got
		}
	}
}

// Tensor parallelism splits the work and adds all-reduce time.
// Llama-3.1-70B, TP 4, 1,024-token prefill: each rank sends
// 2 all-reduces · 80 layers · 2·3/4 · 1024 tokens · 8192 · 2 B
// = 4,026,531,840 B over 450e9 · 0.8 B/s = 11.184810 ms.
func TestTensorParallelComm(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 1024}}}
	withComm := d.StepTime(b)
	d.Hardware.LinkBandwidth *= 1e9 // stands in for a free link
	d.k = d.consts()
	noComm := d.StepTime(b)
	if got, want := withComm-noComm, 11_184_811*time.Nanosecond; got < want-2 || got > want+2 {
		t.Errorf("all-reduce time = %d ns, want ≈ %d", got, want)
	}
	d1 := newH100(t, "llama-3.1-8b", 1)
	d2 := newH100(t, "llama-3.1-8b", 2)
	big := &Batch{Prefill: []PrefillChunk{{Tokens: 8192}}}
	if d2.StepTime(big) >= d1.StepTime(big) {
		t.Errorf("TP 2 prefill %v not faster than TP 1 %v", d2.StepTime(big), d1.StepTime(big))
	}
}

func TestDeploymentLiteral(t *testing.T) {
	// A Deployment written as a literal prices like one from NewDeployment.
	n := newH100(t, "llama-3.1-8b", 1)
	lit := &Deployment{Hardware: n.Hardware, LLM: n.LLM, TP: 1, MFU: n.MFU,
		BandwidthEfficiency: n.BandwidthEfficiency, LinkEfficiency: n.LinkEfficiency, StepOverhead: n.StepOverhead}
	b := &Batch{Prefill: []PrefillChunk{{Tokens: 700, Context: 50}}, Decode: []int64{9, 99}}
	if a, c := n.StepTime(b), lit.StepTime(b); a != c {
		t.Errorf("literal %v != constructed %v", c, a)
	}
}

func TestNewDeploymentErrors(t *testing.T) {
	hw, _ := HardwareByName("h100")
	m := loadSample(t, "llama-3.1-8b")
	for _, tp := range []int{0, 3, 64} {
		if _, err := NewDeployment(hw, m, tp); err == nil {
			t.Errorf("tp=%d accepted", tp)
		}
	}
	if _, err := NewDeployment(hw, LLM{}, 1); err == nil {
		t.Error("empty LLM accepted")
	}
}

func TestStepTimeNoAllocs(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	b := &Batch{
		Prefill: []PrefillChunk{{Tokens: 2048, Context: 512}, {Tokens: 100, Context: 0}},
		Decode:  []int64{10, 200, 3000, 40000},
	}
	if n := testing.AllocsPerRun(1000, func() { d.StepTime(b) }); n != 0 {
		t.Errorf("StepTime allocates %v times per call", n)
	}
}

func BenchmarkStepTime(b *testing.B) {
	d := newH100(b, "llama-3.1-8b", 1)
	batch := &Batch{Prefill: []PrefillChunk{{Tokens: 2048, Context: 512}}, Decode: make([]int64, 128)}
	for i := range batch.Decode {
		batch.Decode[i] = int64(100 * i)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.StepTime(batch)
	}
}

// DecodeStepTime prices a decode-only batch from its size and context sum
// exactly as StepTime prices the batch itself, for every sample model
// without sliding-window layers (dense, MoE, MLA; TP and EP), and declines
// the models that have them.
func TestDecodeStepTimeEqualsStepTime(t *testing.T) {
	hw, err := HardwareByName("h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "granite-3.3-8b"} {
		m := loadSample(t, name)
		for _, tp := range []int{1, 8} {
			d, err := NewDeployment(hw, m, tp)
			if err != nil {
				continue // does not fit, or TP does not divide the heads
			}
			sliding := len(m.LayerSliding) > 0 && m.SlidingWindow > 0
			checked := 0
			for n := 1; n <= 300; n += 7 {
				b := &Batch{Decode: make([]int64, n)}
				var sum int64
				for i := range b.Decode {
					b.Decode[i] = int64((i*7919 + n*31) % 20000)
					sum += b.Decode[i]
				}
				got, ok := d.DecodeStepTime(n, sum)
				if ok == sliding {
					t.Fatalf("%s TP%d: DecodeStepTime ok = %v with sliding-window layers %v", name, tp, ok, sliding)
				}
				if !ok {
					continue
				}
				if want := d.StepTime(b); got != want {
					t.Errorf("%s TP%d, %d decodes over %d: DecodeStepTime %v, StepTime %v", name, tp, n, sum, got, want)
				}
				checked++
			}
			t.Logf("%s TP%d: %d batches checked (sliding window: %v)", name, tp, checked, sliding)
		}
	}
}

// decodeBatch is a decode step of n requests with 1,000 tokens of
// context each.
func decodeBatch(n int) *Batch {
	b := &Batch{Decode: make([]int64, n)}
	for i := range b.Decode {
		b.Decode[i] = 1000
	}
	return b
}

// An SGLang-style deployment launches eagerly above cuda_graph_max_bs and
// for prefill: Llama-3.1-70B at TP4 has 80 layers, so at 300 µs a layer
// an eager step takes 24 ms longer than the GPU's time, a step replayed
// as a graph nothing.
func TestEagerLaunchTerm(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	small := &Batch{Prefill: []PrefillChunk{{Tokens: 8}}}
	gpu160, gpu161, gpuSmall := d.StepTime(decodeBatch(160)), d.StepTime(decodeBatch(161)), d.StepTime(small)
	d.CUDAGraphMaxBS, d.EagerLayerLaunch = 160, 300*time.Microsecond
	const launch = 80 * 300 * time.Microsecond
	if got := d.StepTime(decodeBatch(160)); got != gpu160 {
		t.Errorf("160 decodes (a graph): %v, was %v", got, gpu160)
	}
	if got := d.StepTime(decodeBatch(161)); got != gpu161+launch {
		t.Errorf("161 decodes (eager): %v, want %v + %v", got, gpu161, launch)
	}
	if got, ok := d.DecodeStepTime(161, 161*1000); !ok || got != d.StepTime(decodeBatch(161)) {
		t.Errorf("DecodeStepTime %v, StepTime %v", got, d.StepTime(decodeBatch(161)))
	}
	if got := d.StepTime(small); got != gpuSmall+launch {
		t.Errorf("a small prefill (eager): %v, want %v + %v", got, gpuSmall, launch)
	}
	d.CUDAGraphMaxBS = -1
	if got := d.StepTime(decodeBatch(1)); got <= launch {
		t.Errorf("graphs disabled, 1 decode: %v, want more than %v", got, launch)
	}
	d.CUDAGraphMaxBS = 0
	if got := d.StepTime(decodeBatch(161)); got != gpu161 {
		t.Errorf("no graph limit: %v, want %v", got, gpu161)
	}
}

// TestSerialFraction: a decode batch of 64 on a 70B model at TP4 is
// memory-bound; SerialFraction adds that share of its compute time (the
// lesser) to the roofline's max, 0 leaving the price as it was and 1
// pricing compute and memory one after the other; a compute-bound
// prefill adds the share of its memory time. DecodeStepTime agrees.
func TestSerialFraction(t *testing.T) {
	d := newH100(t, "llama-3.1-70b", 4)
	decode := &Batch{Decode: make([]int64, 64)}
	for i := range decode.Decode {
		decode.Decode[i] = 1000
	}
	prefill := &Batch{Prefill: []PrefillChunk{{Tokens: 8192}}}
	for _, b := range []*Batch{decode, prefill} {
		tm := d.Terms(b)
		compute := tm.LinearSec/d.MFU + tm.AttentionSec/d.MFU
		memory := (tm.WeightSec + tm.KVSec) / d.BandwidthEfficiency
		base := d.StepTime(b)
		if (b == decode) != (memory > compute) {
			t.Fatalf("compute %v s, memory %v s: the decode should be memory-bound, the prefill compute-bound", compute, memory)
		}
		for _, f := range []float64{0, 0.5, 1} {
			d.SerialFraction = f
			got := d.StepTime(b)
			want := base + time.Duration(math.Round(f*min(compute, memory)*1e9))
			if diff := got - want; diff < -time.Nanosecond || diff > time.Nanosecond {
				t.Errorf("%d prefill chunks, %d decodes, SerialFraction %g: %v, want %v", len(b.Prefill), len(b.Decode), f, got, want)
			}
			if b == decode {
				if ds, ok := d.DecodeStepTime(64, 64_000); !ok || ds != got {
					t.Errorf("SerialFraction %g: DecodeStepTime %v, StepTime %v", f, ds, got)
				}
			}
		}
		d.SerialFraction = 0
	}
}
