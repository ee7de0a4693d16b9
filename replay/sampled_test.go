package replay

import (
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A sampled workload replays exactly like the same requests built and
// passed as a slice, with either scheduler: the engine's shortcut for
// generated inputs (no input record per request, see shaper) changes
// nothing in the output.
func TestSampledEqualsItsRequests(t *testing.T) {
	t.Parallel()
	lengths := [][2]int64{{100, 20}, {2000, 5}, {37, 300}, {700, 64}, {5000, 1}, {0, 10}, {16, 0}}
	in, err := NewSampled("s", 400, 30, lengths, 7)
	if err != nil {
		t.Fatal(err)
	}
	built := make([]*trace.Request, in.Len())
	for i := range built {
		built[i] = in.Request(i)
	}
	for _, engine := range []string{EngineVLLM, EngineSGLang} {
		cfg := Config{Workers: 3, Scheduler: SchedulerConfig{Engine: engine, MaxNumSeqs: 8}}
		var a, b []*trace.Request
		if _, err := RunInputs(cfg, linearCost{Base: 2 * ms, PerToken: 20e3, PerContext: 7}, 300, in, func(r *trace.Request) error {
			a = append(a, r)
			return nil
		}, Options{}); err != nil {
			t.Fatal(err)
		}
		if _, err := RunInputs(cfg, linearCost{Base: 2 * ms, PerToken: 20e3, PerContext: 7}, 300, Requests(built), func(r *trace.Request) error {
			b = append(b, r)
			return nil
		}, Options{}); err != nil {
			t.Fatal(err)
		}
		if len(a) != in.Len() {
			t.Fatalf("%s: %d records for %d requests", engine, len(a), in.Len())
		}
		if da, db := dump(a), dump(b); da != db {
			t.Errorf("%s: the sampled workload and its requests replay differently", engine)
		}
		rejected := 0
		for _, r := range a {
			if r.Status == trace.StatusRejected {
				rejected++
			}
		}
		if rejected == 0 {
			t.Errorf("%s: no request rejected; the lengths table has empty prompts and outputs", engine)
		}
	}
}

// With Options.Transient the engine reuses each record's memory after
// emit returns; a consumer that copies what it needs sees the same
// records as without it, whatever the scheduler, stream interval or
// timeouts.
func TestTransientRecords(t *testing.T) {
	t.Parallel()
	reqs := randomTrace(5, 300, 60)
	cost := linearCost{Base: 2 * ms, PerToken: 20e3, PerContext: 7}
	for i, cfg := range []Config{
		{Workers: 2},
		{Workers: 2, Scheduler: SchedulerConfig{StreamInterval: 4}},
		{Workers: 3, Scheduler: SchedulerConfig{Engine: EngineSGLang, MaxNumSeqs: 8}},
		{Workers: 2, Scheduler: SchedulerConfig{MaxNumSeqs: 4}, Client: ClientConfig{TimeoutSec: 0.1, LatencySec: 0.002}},
	} {
		var kept, copied []*trace.Request
		if _, err := RunInputs(cfg, cost, 100, Requests(reqs), func(r *trace.Request) error {
			kept = append(kept, r)
			return nil
		}, Options{}); err != nil {
			t.Fatal(err)
		}
		seen := map[*trace.Request]bool{}
		if _, err := RunInputs(cfg, cost, 100, Requests(reqs), func(r *trace.Request) error {
			seen[r] = true
			c := *r
			c.ITLSec = append([]float64(nil), r.ITLSec...)
			if r.ITLSec != nil && c.ITLSec == nil {
				c.ITLSec = []float64{}
			}
			copied = append(copied, &c)
			return nil
		}, Options{Transient: true, test: testSwitches{parts: 1}}); err != nil { // a split replay cycles a few (TestPartsSameResults)
			t.Fatal(err)
		}
		if dump(kept) != dump(copied) {
			t.Errorf("config %d: transient records differ", i)
		}
		if len(seen) != 1 {
			t.Errorf("config %d: %d distinct records emitted; transient records reuse one", i, len(seen))
		}
	}
}
