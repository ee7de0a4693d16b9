package replay

import (
	"strconv"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// A replay of Columns built from requests writes the same records as a
// replay of the requests themselves, in every loop, with sessions, prefix
// hash ids (some absent, some empty), stages, models, LoRAs and positions,
// and under both schedulers.
func TestColumnsSameResults(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(31, 400, 50)
	for i, r := range reqs {
		r.Session, r.Turn = "s"+strconv.Itoa(i%30), trace.Some(int64(i/30))
		r.ThinkSec = trace.Some(0.01 * float64(i%5))
		r.Stage = "stage-" + strconv.Itoa(i%2)
		r.Model, r.LoRA = "m", []string{"", "adapter"}[i%2]
		r.SetPos("in.jsonl", i+1)
		if i%9 == 4 {
			r.HashIDs = []int64{} // present and empty
		}
	}
	var cols Columns
	for _, r := range reqs {
		cols.Add(r)
	}
	if cols.Len() != len(reqs) || !cols.Arrivals() {
		t.Fatalf("Columns of %d requests: Len %d, Arrivals %v", len(reqs), cols.Len(), cols.Arrivals())
	}
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond, PerContext: 7}
	for i, cfg := range []Config{
		{Workers: 3},
		{Workers: 2, Workload: WorkloadConfig{Mode: ModeClosed, Clients: 9}},
		{Workers: 2, Workload: WorkloadConfig{Mode: ModeSessions, Sessions: 6}},
		{Workers: 2, Scheduler: SchedulerConfig{Engine: EngineSGLang, BlockSize: 1, KVCacheTokens: 6000}},
	} {
		replayOf := func(in Inputs) string {
			var all []*trace.Request
			if _, err := RunInputs(cfg, cost, 80, in, func(r *trace.Request) error {
				all = append(all, r)
				return nil
			}, Options{}); err != nil {
				t.Fatal(err)
			}
			return dump(all)
		}
		if a, b := replayOf(Requests(reqs)), replayOf(&cols); a != b {
			t.Errorf("config %d: records differ when the inputs are Columns", i)
		}
	}
	for i, r := range reqs {
		got := cols.Request(i)
		if got.RequestID != r.RequestID || got.Session != r.Session || got.LoRA != r.LoRA || got.Stage != r.Stage ||
			got.InputTokens != r.InputTokens || got.Turn != r.Turn || got.ThinkSec != r.ThinkSec ||
			(got.HashIDs == nil) != (r.HashIDs == nil) || len(got.HashIDs) != len(r.HashIDs) {
			t.Fatalf("request %d: Columns gives %s, was %s", i, got, r)
		}
		if f, l := got.Pos(); f != "in.jsonl" || l != i+1 {
			t.Fatalf("request %d: position %s:%d", i, f, l)
		}
	}
}
