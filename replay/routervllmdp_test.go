package replay

import (
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// TestVLLMDPByHand follows vLLM's DPLBAsyncMPClient by hand: the least
// waiting·4 + running of the front end's estimate, ties to the lowest
// index, one waiting request added to the chosen engine until the
// coordinator's next publication (every 100 ms) replaces the estimate.
func TestVLLMDPByHand(t *testing.T) {
	f := newFake(3)
	r := build(t, RouterVLLMDP, 3, RouterConfig{})
	at := func(ms int64) *Routed { return &Routed{At: trace.Time(ms * int64(time.Millisecond))} }
	route := func(q *Routed) (int, float64) { w := r.Route(q, f); return w, q.Score }

	// All idle: 0, 1, 2 in turn by the local increments, then 0 again.
	for k, want := range []int{0, 1, 2, 0} {
		if w, s := route(at(10 * int64(k))); w != want {
			t.Fatalf("idle request %d: worker %d (score %v), want %d", k, w, s, want)
		}
	}
	// The engines' counts change, but the estimate holds until the tick
	// at 100 ms: worker 1 has a lower local count (1 waiting) than 0 (2).
	f.loads[0] = WorkerLoad{Running: 1}
	f.loads[1] = WorkerLoad{Running: 9}
	f.loads[2] = WorkerLoad{Running: 6}
	if w, s := route(at(99)); w != 1 || s != 4 {
		t.Fatalf("before the publication: worker %d score %v, want 1 and 4", w, s)
	}
	// At 100 ms the published counts replace the estimate: 1, 9, 6.
	if w, s := route(at(100)); w != 0 || s != 1 {
		t.Fatalf("after the publication: worker %d score %v, want 0 and 1", w, s)
	}
	// Worker 0 is now at 1 + 4 = 5 and worker 2 at 6.
	if w, s := route(at(150)); w != 0 || s != 5 {
		t.Fatalf("second after the publication: worker %d score %v, want 0 and 5", w, s)
	}
	if w, s := route(at(160)); w != 2 || s != 6 {
		t.Fatalf("third after the publication: worker %d score %v, want 2 and 6", w, s)
	}
	// A waiting request weighs four running ones.
	f.loads[0] = WorkerLoad{Waiting: 2, Running: 0}
	f.loads[1] = WorkerLoad{Waiting: 0, Running: 7}
	f.loads[2] = WorkerLoad{Waiting: 1, Running: 4}
	if w, s := route(at(250)); w != 1 || s != 7 {
		t.Fatalf("weights: worker %d score %v, want 1 and 7 (8, 7, 8)", w, s)
	}

	// With a zero interval every decision reads the live counts.
	live := 0
	r = build(t, RouterVLLMDP, 3, RouterConfig{StatsUpdateIntervalMs: &live})
	f.loads[0], f.loads[1], f.loads[2] = WorkerLoad{Running: 3}, WorkerLoad{Running: 3}, WorkerLoad{Running: 3}
	for k := range 3 {
		if w, _ := route(at(int64(k))); w != 0 {
			t.Fatalf("live view, request %d: worker %d, want 0 (the counts did not change)", k, w)
		}
	}
}
