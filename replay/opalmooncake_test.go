package replay

import (
	"math"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// opalDefault4 is the deployment of opal-notes.md's reference runs: Opal's
// defaults (granite-3.3-8b-instruct on H100, a = 4, b = 24, MaxPrefix) on
// 4 workers with a CPU tier of 8 GiB and an NVMe tier of 1 TiB each.
func opalDefault4() OpalCompat {
	c := opalGranite(4)
	c.Tiers = append(c.Tiers, OpalTier{Name: "LocalNVMe", BandwidthGBps: 10, LatencyNsec: 10000, CapacityGB: 1024})
	return c
}

// opalFigures are Opal's printed TTFT and TPOT statistics, in ms: mean,
// median and p99 of the TTFTs and of each request's mean decode gap.
type opalFigures struct{ ttft, tpot [3]float64 }

func opalFiguresOf(recs []*trace.Request) opalFigures {
	var ttft, tpot []float64
	for _, r := range recs {
		ttft = append(ttft, r.TTFTSec.V*1000)
		if len(r.ITLSec) > 0 {
			var s float64
			for _, g := range r.ITLSec {
				s += g
			}
			tpot = append(tpot, s/float64(len(r.ITLSec))*1000)
		}
	}
	return opalFigures{stats3(ttft), stats3(tpot)}
}

// stats3 is the mean, median and p99 (numpy's linear interpolation).
func stats3(v []float64) [3]float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	pct := func(p float64) float64 {
		h := p / 100 * float64(len(s)-1)
		lo := math.Floor(h)
		i := int(lo)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (h-lo)*(s[i+1]-s[i])
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	return [3]float64{sum / float64(len(s)), pct(50), pct(99)}
}

// Opal's own figures for the first 1,000 and 10,000 Mooncake conversation
// requests on its default deployment with 4 workers (opal-notes.md): the
// issue asks for each TTFT figure within 5 %. An Opal-compatible replay
// gives every figure to the precision Opal printed (TTFT to the ms, TPOT
// to 0.1 ms), and the same whole-second duration: run against Opal
// (opal-sim@bc1e67e, SimPy 3.0.8) request by request, every TTFT agrees
// to 1 µs, so a change that moves any of them is a regression.
func TestOpalCompatMooncake(t *testing.T) {
	all := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	for _, c := range []struct {
		n    int
		opal opalFigures
		end  float64 // Opal's duration, s
	}{
		{1000, opalFigures{[3]float64{10397, 8906, 27441}, [3]float64{45.6, 31.2, 192.2}}, 363},
		{10000, opalFigures{[3]float64{8394, 5879, 40771}, [3]float64{25.5, 14.9, 142.1}}, 3016},
	} {
		out, err := RunOpalCompat(opalDefault4(), Requests(all[:c.n]), "mooncake")
		if err != nil {
			t.Fatal(err)
		}
		got := opalFiguresOf(out.Records)
		t.Logf("%d requests: TTFT mean/median/p99 %.0f / %.0f / %.0f ms (Opal %v), TPOT %.1f / %.1f / %.1f ms (Opal %v); %d steps, %d preemptions, %d hit tokens, end %.0f s",
			c.n, got.ttft[0], got.ttft[1], got.ttft[2], c.opal.ttft, got.tpot[0], got.tpot[1], got.tpot[2], c.opal.tpot,
			out.Steps, out.Preemptions, out.HitTokens, out.End)
		for i, name := range []string{"mean", "median", "p99"} {
			if d := math.Abs(got.ttft[i]/c.opal.ttft[i] - 1); d > 0.05 {
				t.Errorf("%d requests: TTFT %s %.0f ms, Opal %.0f ms: %.1f %% off", c.n, name, got.ttft[i], c.opal.ttft[i], 100*d)
			}
			if math.Round(got.ttft[i]) != c.opal.ttft[i] {
				t.Errorf("%d requests: TTFT %s %.3f ms, Opal printed %.0f ms", c.n, name, got.ttft[i], c.opal.ttft[i])
			}
			if math.Round(got.tpot[i]*10) != math.Round(c.opal.tpot[i]*10) {
				t.Errorf("%d requests: TPOT %s %.3f ms, Opal printed %.1f ms", c.n, name, got.tpot[i], c.opal.tpot[i])
			}
		}
		if out.End != c.end {
			t.Errorf("%d requests: duration %v s, Opal %v s", c.n, out.End, c.end)
		}
	}
}

// TestOpalCompatStagesMooncake replays an Opal config of two trace stages,
// each the first 300 Mooncake conversation requests, on the reference
// deployment, and checks each stage against what Opal (opal-sim@bc1e67e,
// SimPy 3.0.8, collision-free token ids) printed and wrote for it. Opal
// runs the stages in one simulation: the second starts when the first's
// last response is back (158.40 s), its rows' timestamps already past
// (Q5), and it finds the KV tiers the first filled; its TTFTs are no
// independent run's.
func TestOpalCompatStagesMooncake(t *testing.T) {
	all := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))
	outs, err := RunOpalCompatStages(opalDefault4(), []OpalCompatStage{
		{Requests: Requests(all[:300]), Run: "stage_0"}, {Requests: Requests(all[:300]), Run: "stage_1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ttft          [3]float64 // ms, to Opal's printed 0.01
		start, end    float64
		samples, done int // per_unit_throughput's length and sum
	}{
		{[3]float64{10313.35, 8346.98, 25818.85}, 0, 158.403815943502, 158, 299},
		{[3]float64{35637.79, 34988.23, 90945.91}, 158.403815943502, 269, 112, 301},
	}
	for k, w := range want {
		o := outs[k]
		got := opalFiguresOf(o.Records)
		var done int
		for _, n := range o.PerSecondFinished {
			done += n
		}
		t.Logf("stage %d: TTFT %.2f / %.2f / %.2f ms, %v to %v s, %d samples", k, got.ttft[0], got.ttft[1], got.ttft[2], o.Start, o.End, len(o.PerSecondFinished))
		for i := range 3 {
			if math.Round(got.ttft[i]*100) != math.Round(w.ttft[i]*100) {
				t.Errorf("stage %d: TTFT %v, Opal %v", k, got.ttft, w.ttft)
				break
			}
		}
		if o.Start != w.start || o.End != w.end || len(o.PerSecondFinished) != w.samples || done != w.done || o.Queued != 300 {
			t.Errorf("stage %d: %v to %v s, %d samples of %d finished, %d queued; Opal: %v to %v s, %d samples of %d, 300",
				k, o.Start, o.End, len(o.PerSecondFinished), done, o.Queued, w.start, w.end, w.samples, w.done)
		}
	}
	// The same rows replayed alone, on an idle cluster from time 0, are
	// another run.
	alone, err := RunOpalCompat(opalDefault4(), Requests(all[:300]), "alone")
	if err != nil {
		t.Fatal(err)
	}
	if a := opalFiguresOf(alone.Records); math.Round(a.ttft[0]*100) == math.Round(want[1].ttft[0]*100) {
		t.Errorf("stage 1 alone gives the mean TTFT of stage 1 after stage 0 (%.2f ms)", a.ttft[0])
	}
}
