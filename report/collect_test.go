package report

import (
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

func TestBins(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{{0, 0}, {1, 1}, {2, 2}, {5, 5}, {7, 5}, {8, 6}, {10, 6}, {11, 7}, {1 << 30, lengthBins - 1}} {
		if got := lengthBin(tc.n); got != tc.want {
			t.Errorf("lengthBin(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	for k := 0; k < lengthBins; k++ {
		if lengthEdge(k+1) <= lengthEdge(k) {
			t.Errorf("length edges %d, %d not increasing", lengthEdge(k), lengthEdge(k+1))
		}
	}
	for i := int64(1); i < 5000; i++ {
		k := positionBin(i)
		if i < positionEdge(k) || (k < positionBins-1 && i >= positionEdge(k+1)) {
			t.Fatalf("positionBin(%d) = %d: [%d, %d)", i, k, positionEdge(k), positionEdge(k+1))
		}
	}
}

// The collector's per-second counts equal analyze's (PerSecond) on the
// same requests, and its ITL position means are the gaps' means.
func TestCollector(t *testing.T) {
	ds := replayLike("r", 200, 5)
	c := NewCollector()
	for _, r := range ds.Requests {
		c.Add(r)
	}
	x := c.Extras()
	if x.Requests != 200 || x.Seconds == nil {
		t.Fatalf("extras: %+v", x)
	}
	var arrivals, completions int64
	for i := range x.Seconds.Arrivals {
		arrivals += x.Seconds.Arrivals[i]
		completions += x.Seconds.Completions[i]
	}
	if arrivals != 200 || completions != 200 {
		t.Errorf("%d arrivals, %d completions, want 200 each", arrivals, completions)
	}
	// Every request runs in the second of its arrival.
	for i, r := range x.Seconds.Running {
		if r < x.Seconds.Arrivals[i] {
			t.Errorf("second %d: %d running < %d arrivals", i, r, x.Seconds.Arrivals[i])
		}
	}
	var gaps int64
	for _, b := range x.ITLByPosition {
		gaps += b.N
	}
	want := 0
	for _, r := range ds.Requests {
		want += len(r.ITLSec)
	}
	if gaps != int64(want) {
		t.Errorf("%d gaps binned, want %d", gaps, want)
	}
	var out int64
	for _, n := range x.OutputHist {
		out += n
	}
	if out != 200 {
		t.Errorf("output histogram counts %d, want 200", out)
	}
}

func TestImbalance(t *testing.T) {
	ws := []WorkerLoad{{Worker: "a", Requests: 30, InputTokens: 100}, {Worker: "b", Requests: 10, InputTokens: 100}}
	r, tok := Imbalance(ws)
	if r != 1.5 || tok != 1 {
		t.Errorf("Imbalance = %v, %v, want 1.5, 1", r, tok)
	}
	c := NewCollector()
	for i, w := range []string{"w1", "w2", "w10", "w2"} {
		c.Add(&trace.Request{Worker: w, Status: trace.StatusOK, InputTokens: trace.Some(int64(10 * (i + 1)))})
	}
	x := c.Extras()
	if len(x.Workers) != 3 || x.Workers[1].Worker != "w2" || x.Workers[1].Requests != 2 || x.Workers[1].InputTokens != 60 {
		t.Errorf("workers: %+v", x.Workers)
	}
}

// A disaggregated dataset's requests count toward their decode worker
// (worker) and their prefill worker (prefill_worker), the prefix hits
// toward the prefill worker alone: the report's load tables give the
// prefill workers' hit rates and leave the decode workers' out.
func TestPrefillWorkerLoads(t *testing.T) {
	c := NewCollector()
	for i, pw := range []string{"w0", "w1", "w0", "w0"} {
		c.Add(&trace.Request{Worker: []string{"w2", "w3"}[i%2], PrefillWorker: pw, Status: trace.StatusOK,
			InputTokens: trace.Some(int64(100)), CachedTokens: trace.Some(int64(10 * i))})
	}
	x := c.Extras()
	if len(x.PrefillWorkers) != 2 || x.PrefillWorkers[0].Worker != "w0" || x.PrefillWorkers[0].Requests != 3 || x.PrefillWorkers[0].HitTokens != 50 ||
		x.PrefillWorkers[1].HitTokens != 10 {
		t.Errorf("prefill workers: %+v", x.PrefillWorkers)
	}
	if len(x.Workers) != 2 || x.Workers[0].Requests != 2 || x.Workers[0].HitTokens != 0 || x.Workers[1].HitTokens != 0 {
		t.Errorf("decode workers: %+v", x.Workers)
	}
	var sec sectionView
	if err := workerCharts(&sec, []reportSet{{name: "pd", extras: x}}); err != nil {
		t.Fatal(err)
	}
	if len(sec.Tables) != 2 || len(sec.Charts) != 2 {
		t.Fatalf("%d tables, %d charts; want the workers' and the prefill workers'", len(sec.Tables), len(sec.Charts))
	}
	if hit := sec.Tables[0].Rows[0][5].V; hit != missing {
		t.Errorf("decode workers' hit rate %q, want %q", hit, missing)
	}
	if hit := sec.Tables[1].Rows[0][5].V; hit != "10.0 % – 16.7 %" {
		t.Errorf("prefill workers' hit rate %q, want 10.0 %% – 16.7 %%", hit)
	}
}
