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
