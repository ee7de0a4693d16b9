package analyze

import (
	"reflect"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

func sweep(rates ...float64) []trace.Run {
	var runs []trace.Run
	for i, r := range rates {
		runs = append(runs, trace.Run{Name: "dc#" + string(rune('1'+i)), Workload: &trace.Workload{RequestRate: trace.Rate(r)}})
	}
	return runs
}

// replayOf returns replays of the runs at idx, in that order.
func replayOf(runs []trace.Run, idx ...int) []trace.Run {
	var out []trace.Run
	for _, i := range idx {
		out = append(out, trace.Run{Name: "sim/" + runs[i].Name, Extra: map[string]string{"replay_of": runs[i].Name}})
	}
	return out
}

func sels(t *testing.T, texts ...string) []trace.RunSelector {
	s, err := trace.ParseRunSelectors(texts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPairRunsByReplay(t *testing.T) {
	obs := sweep(1, 2, 4, 8)
	sim := replayOf(obs, 3, 0, 2) // rate 2 not replayed; order differs
	p, err := PairRuns(obs, sim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []RunPair{{0, 1}, {2, 2}, {3, 0}}; p.By != PairedByReplay || !reflect.DeepEqual(p.Pairs, want) {
		t.Errorf("pairs %v by %s, want %v by replay", p.Pairs, p.By, want)
	}
	if !reflect.DeepEqual(p.Unpaired, []string{"#2 rate=2"}) {
		t.Errorf("unpaired %q", p.Unpaired)
	}
	// Swapped sides; the selector applies to the replayed side, by its
	// own index and fields.
	p, err = PairRuns(sim, obs, sels(t, "rate=8"))
	if err != nil || !reflect.DeepEqual(p.Pairs, []RunPair{{0, 3}}) || len(p.Unpaired) != 0 {
		t.Errorf("swapped, rate=8: %+v, %v", p, err)
	}
	if _, err := PairRuns(obs, sim, sels(t, "2")); err == nil || !strings.Contains(err.Error(), "no selected run has a replay") {
		t.Errorf("only an unreplayed run selected: %v", err)
	}
}

func TestPairRunsByOrder(t *testing.T) {
	a, b := sweep(1, 2, 4), sweep(1, 2, 4)
	p, err := PairRuns(a, b, nil)
	if err != nil || p.By != PairedByOrder || !reflect.DeepEqual(p.Pairs, []RunPair{{0, 0}, {1, 1}, {2, 2}}) {
		t.Errorf("%+v, %v", p, err)
	}
	p, err = PairRuns(a, sweep(4, 2), sels(t, "rate=4"))
	if err != nil || !reflect.DeepEqual(p.Pairs, []RunPair{{2, 0}}) {
		t.Errorf("rate=4: %+v, %v", p, err)
	}
	_, err = PairRuns(a, sweep(1, 2), nil)
	if err == nil || !strings.Contains(err.Error(), "A has 3 (#1 rate=1; #2 rate=2; #3 rate=4) while B has 2 (#1 rate=1; #2 rate=2)") {
		t.Errorf("3 runs against 2: %v", err)
	}
}

func TestReportedStats(t *testing.T) {
	run := trace.Run{Reported: []byte(`{"median_ttft_ms": 85.5, "mean_e2e_latency_ms": 7840, "p99.9_itl_ms": 30, "p50.0_tpot_ms": 12,
		"std_ttft_ms": 3, "median_itl_ms": "x", "mean_latency_ms": 7000, "p99_ttft_ms": -1, "output_throughput": 537}`)}
	got := ReportedStats(run)
	want := map[string]map[string]float64{
		"ttft": {"p50": 0.0855},
		"e2el": {"mean": 7.84},
		"itl":  {"p99.9": 0.03},
		"tpot": {"p50": 0.012},
	}
	// mean_latency_ms (LambdaLabs' E2E) and mean_e2e_latency_ms are one
	// statistic; either may win, both are the source's E2E mean.
	if e := got["e2el"]["mean"]; e != 7.84 && e != 7 {
		t.Errorf("e2el mean %v", e)
	}
	got["e2el"]["mean"] = 7.84
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if ReportedStats(trace.Run{}) != nil {
		t.Error("no summary: not nil")
	}
}

// A summary-only side is compared on the statistics it reported: its
// value is fixed, the other side resampled; two reported sides give the
// point as the interval.
func TestCompareReported(t *testing.T) {
	sim := summaryOf([]float64{0.09, 0.1, 0.1, 0.11, 0.1})
	obs := &Summary{Run: trace.Run{Reported: []byte(`{"median_ttft_ms": 100, "p99_ttft_ms": 200}`)}}
	c := Compare("obs", obs, "sim", sim, CompareOptions{Seed: 1})
	m := c.Metrics[0]
	if !m.AReported || m.BReported || m.NB != 5 || len(m.Stats) != 2 || m.Stats[0].Stat != "p50" || m.Stats[1].Stat != "p99" {
		t.Fatalf("%+v", m)
	}
	if s := m.Stats[0]; s.A != 0.1 || s.RelDiff != 0 || s.Verdict == VerdictOutside || s.CILo > 0 || s.CIHi < 0 {
		t.Errorf("p50: %+v", s)
	}
	if s := m.Stats[1]; s.Verdict != VerdictOutside || s.CIHi > -0.4 {
		t.Errorf("p99 (half the reported): %+v", s)
	}
	if c.Metrics[1].Verdict != VerdictNoData {
		t.Errorf("TPOT, reported by neither: %+v", c.Metrics[1])
	}
	both := Compare("obs", obs, "obs2", &Summary{Run: trace.Run{Reported: []byte(`{"median_ttft_ms": 110}`)}}, CompareOptions{})
	if s := both.Metrics[0].Stats; len(s) != 1 || s[0].CILo != s[0].RelDiff || s[0].Verdict != VerdictOutside || both.Metrics[0].Resamples != 0 {
		t.Errorf("two reported sides: %+v", both.Metrics[0])
	}
}
