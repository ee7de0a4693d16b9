package replay

import (
	"reflect"
	"slices"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// waitingFrontCases returns the first 4,000 Mooncake requests, Llama-3.1-8B
// on an H100, and replays whose waiting requests are looked up again
// step after step: under autoscaling, and on a sixteenth of the KV cache,
// which preempts.
func waitingFrontCases(t *testing.T) ([]*trace.Request, model.StepModel, []sharingCase) {
	t.Helper()
	reqs := readMooncake(t, shareddata.Path(t, "traces/mooncake/conversation_trace.jsonl"))[:4000]
	cost, blocks := llama8BOnH100(t)
	return reqs, cost, []sharingCase{
		{"autoscale", RouterLeastRequests, blocks, true},
		{"session_affinity_small_kv", RouterSession, blocks / 16, false},
		{"sglang_cache_aware_small_kv", RouterSGLang, blocks / 16, false},
	}
}

// TestMatchResumeSameResults checks that vLLM's prefix match, resuming
// where it missed while the cache dropped no hash (vllm.match), gives
// the records and stats of looking every prefix up from its start, on
// Mooncake requests under autoscaling and on a small cache that
// preempts, whose waiting requests are looked up again step after step.
func TestMatchResumeSameResults(t *testing.T) {
	t.Parallel()
	reqs, cost, cases := waitingFrontCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run := func(sw testSwitches) (string, Stats, int64) {
				resumed := map[*vllm]bool{}
				sw.checkSteady = func(w *worker, _ bool) {
					if v, ok := w.s.(*vllm); ok {
						resumed[v] = true
					}
				}
				b, st := c.replay(t, cost, reqs, sw)
				var n int64
				for v := range resumed {
					n += v.resumed
				}
				return b, st, n
			}
			// Every match that resumes finds what starting over
			// finds, whether it keeps every hit it found last or
			// only those the cache did not evict since; keeping
			// every one after a drop would find something else,
			// some of the time.
			var resumes, afterDrop, partial, wrong, stale int
			check := func(dropped bool, kept int, resumed, all, full []int32) {
				if !slices.Equal(resumed, full) {
					wrong++
				}
				resumes++
				if dropped {
					afterDrop++
				}
				if kept < len(all) {
					partial++
				}
				if !slices.Equal(all, full) {
					stale++
				}
			}
			a, sa, n := run(testSwitches{checkMatchResume: check})
			b, sb, none := run(testSwitches{noMatchResume: true})
			if a != b || !reflect.DeepEqual(sa, sb) {
				t.Errorf("resuming the prefix match changed the results: %+v vs %+v", sa, sb)
			}
			if wrong > 0 {
				t.Errorf("%d of %d resumed matches found other blocks than starting over", wrong, resumes)
			}
			if n == 0 || afterDrop == partial || partial == 0 || stale == 0 || none != 0 {
				t.Fatalf("%d blocks in %d matches not looked up again, %d after a drop, %d of them after an eviction of a hit, %d that keeping every hit would get wrong (%d with resuming off): the case does not exercise resuming", n, resumes, afterDrop, partial, stale, none)
			}
			t.Logf("%d blocks in %d matches not looked up again; %d matches after a drop, %d of them resumed before the first hit evicted since; %d that keeping every hit would have got wrong; %d preemptions", n, resumes, afterDrop, partial, stale, sa.Preemptions)
		})
	}
}

// TestBlockedFrontSameResults checks that a waiting front found not to
// fit, and not looked up again while it still cannot (vllm.blockedFront),
// gives the records and stats of looking it up at every step: on the same
// cases as TestMatchResumeSameResults, the replay run both ways, and in
// the second every decision blockedFront would have skipped checked to
// end in the front not fitting.
func TestBlockedFrontSameResults(t *testing.T) {
	t.Parallel()
	reqs, cost, cases := waitingFrontCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a, sa := c.replay(t, cost, reqs, testSwitches{})
			var said, blocked, wrong int
			b, sb := c.replay(t, cost, reqs, testSwitches{checkBlockedFront: func(s, bl bool) {
				if bl {
					blocked++
				}
				if s {
					said++
					if !bl {
						wrong++
					}
				}
			}})
			if a != b || !reflect.DeepEqual(sa, sb) {
				t.Errorf("skipping a blocked front's lookups changed the results: %+v vs %+v", sa, sb)
			}
			if wrong > 0 {
				t.Errorf("%d of %d fronts said to be blocked still fitted", wrong, said)
			}
			if said == 0 || said == blocked {
				t.Fatalf("%d fronts said to be blocked of %d blocked: the case does not exercise blockedFront", said, blocked)
			}
			t.Logf("%d of %d blocked fronts not looked up again", said, blocked)
		})
	}
}
