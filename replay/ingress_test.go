package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// Four requests sent at once pass an API server of 1.5 ms a request: the
// k-th (from 1) reaches the scheduler k·1.5 ms after it reaches the
// router, and each step (1 ms + 0.1 ms a token, 10-token prompts, one
// output token) prefills what has arrived by its start.
func TestAPIServerByHand(t *testing.T) {
	t.Parallel()
	var reqs []*trace.Request
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		reqs = append(reqs, req(id, 0, 10, 1))
	}
	cfg := Config{Workers: 1, Client: ClientConfig{LatencySec: 0.001, APIServerRequestSec: 0.0015}}
	byID, _, _ := replay(t, cfg, linearCost{Base: ms, PerToken: 100 * time.Microsecond}, 100, reqs)
	// Router arrivals at 1 ms; the scheduler gets r1..r4 at 2.5, 4, 5.5
	// and 7 ms. Steps: r1 2.5–4.5; r2 (there at 4) 4.5–6.5; r3 (5.5)
	// 6.5–8.5; r4 (7) 8.5–10.5. TTFT = first token + 1 ms back − 0 sent.
	// ScheduleSec is the wait at the scheduler only: step start −
	// hand-over. QueueSec, as the engine counts it from the pass that
	// took the request in, is 0: each is scheduled at the pass after its
	// hand-over.
	want := map[string]struct{ worker, ttft, queue time.Duration }{
		"r1": {2500 * time.Microsecond, 5500 * time.Microsecond, 0},
		"r2": {4000 * time.Microsecond, 7500 * time.Microsecond, 500 * time.Microsecond},
		"r3": {5500 * time.Microsecond, 9500 * time.Microsecond, 1000 * time.Microsecond},
		"r4": {7000 * time.Microsecond, 11500 * time.Microsecond, 1500 * time.Microsecond},
	}
	for id, w := range want {
		r := byID[id]
		if got := r.WorkerArrival.V; got != trace.Time(w.worker) {
			t.Errorf("%s reached the scheduler at %d ns, want %d", id, got, w.worker)
		}
		if got := time.Duration(r.TTFTSec.V * 1e9).Round(time.Nanosecond); got != w.ttft {
			t.Errorf("%s TTFT %v, want %v", id, got, w.ttft)
		}
		if r.E2ESec.V != r.TTFTSec.V {
			t.Errorf("%s E2E %v, want its TTFT %v", id, r.E2ESec.V, r.TTFTSec.V)
		}
		if got := time.Duration(r.ScheduleSec.V * 1e9).Round(time.Nanosecond); got != w.queue {
			t.Errorf("%s waited %v at the scheduler, want %v", id, got, w.queue)
		}
		if r.QueueSec.V != 0 {
			t.Errorf("%s queued %v s as the engine counts it, want 0", id, r.QueueSec.V)
		}
	}
}

// Requests spaced wider than the service time never wait: each reaches
// the scheduler one service time after the router.
func TestAPIServerNoQueue(t *testing.T) {
	t.Parallel()
	reqs := []*trace.Request{req("a", 0, 10, 1), req("b", 10*ms, 10, 1)}
	cfg := Config{Workers: 1, Client: ClientConfig{APIServerRequestSec: 0.002}}
	byID, _, _ := replay(t, cfg, linearCost{Base: ms, PerToken: 100 * time.Microsecond}, 100, reqs)
	for id, w := range map[string]trace.Time{"a": trace.Time(2 * ms), "b": trace.Time(12 * ms)} {
		if got := byID[id].WorkerArrival.V; got != w {
			t.Errorf("%s reached the scheduler at %d, want %d", id, got, w)
		}
		if got := byID[id].TTFTSec.V; got != 0.004 {
			t.Errorf("%s TTFT %v, want 0.004", id, got)
		}
	}
}

// A request whose client gives up while it waits at the API server leaves
// the line at its deadline; the others keep their hand-over times.
func TestAPIServerTimeout(t *testing.T) {
	t.Parallel()
	reqs := []*trace.Request{req("a", 0, 10, 1), req("b", 0, 10, 1), req("c", 0, 10, 1)}
	cfg := Config{Workers: 1, Client: ClientConfig{APIServerRequestSec: 0.002, TimeoutSec: 0.003}}
	byID, _, st := replay(t, cfg, linearCost{Base: ms, PerToken: 100 * time.Microsecond}, 100, reqs)
	// a: in 2 ms, done 4 ms (late: timed out at 3 ms, in its step, and
	// leaves when it ends); b: in line until 4 ms, gives up at 3 ms; c
	// likewise.
	if st.TimedOut != 3 {
		t.Errorf("%d timed out, want 3", st.TimedOut)
	}
	for _, id := range []string{"b", "c"} {
		r := byID[id]
		if r.Status != trace.StatusTimeout || r.DoneAtRouter.V != trace.Time(3*ms) || r.GPUStart.OK {
			t.Errorf("%s: status %s done %d GPU start %v, want a timeout at 3 ms before the GPU", id, r.Status, r.DoneAtRouter.V, r.GPUStart)
		}
	}
}

// The ranks of one server share its API server: with four workers two to
// a server, six requests sent at once (round-robin: w0 w1 w2 w3 w0 w1)
// pass one line per server, 1.5 ms each, so the second server's two
// reach their ranks at 2.5 and 4 ms and the first server's four at 2.5,
// 4, 5.5 and 7 ms; with a server per worker each line holds at most two.
func TestAPIServerSharedByRanks(t *testing.T) {
	t.Parallel()
	ids := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	for _, tc := range []struct {
		ranks int
		want  []time.Duration // hand-over of r1..r6, µs
	}{
		{2, []time.Duration{2500, 4000, 2500, 4000, 5500, 7000}},
		{0, []time.Duration{2500, 2500, 2500, 2500, 4000, 4000}},
		{1, []time.Duration{2500, 2500, 2500, 2500, 4000, 4000}},
		{4, []time.Duration{2500, 4000, 5500, 7000, 8500, 10000}},
	} {
		var reqs []*trace.Request
		for _, id := range ids {
			reqs = append(reqs, req(id, 0, 10, 1))
		}
		cfg := Config{Workers: 4, Client: ClientConfig{LatencySec: 0.001, APIServerRequestSec: 0.0015, APIServerRanks: tc.ranks}}
		byID, _, _ := replay(t, cfg, linearCost{Base: ms, PerToken: 100 * time.Microsecond}, 100, reqs)
		for k, id := range ids {
			want := trace.Time(tc.want[k] * time.Microsecond)
			if got := byID[id].WorkerArrival.V; got != want {
				t.Errorf("ranks %d: %s reached its rank at %d ns, want %d", tc.ranks, id, got, want)
			}
		}
	}
}

// A server cannot front more ranks than there are workers.
func TestAPIServerRanksValidated(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 5} {
		cfg := Config{Workers: 4, Client: ClientConfig{APIServerRanks: n}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "client.api_server_ranks") {
			t.Errorf("api_server_ranks %d: error %v, want one naming client.api_server_ranks", n, err)
		}
	}
}

// A prefill pool whose servers have ranks of their own (SGLang's DP
// attention with a prefill_tp of its own) groups its workers by
// PrefillAPIServerRanks and the decode workers, after its slots, by
// APIServerRanks: with three prefill ranks to a server six requests sent
// at once (round-robin over the prefill pool: w0 w1 w2 w0 w1 w2) pass one
// line, 1.5 ms each; grouped two to a server across the whole fleet, as
// without it, prefill worker 2 would have a line of its own (the one it
// shares with decode worker 3), and each line would hold fewer.
func TestAPIServerRanksPerPool(t *testing.T) {
	t.Parallel()
	ids := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	for _, tc := range []struct {
		prefillRanks int
		want         []time.Duration // hand-over of r1..r6 to their prefill rank, µs
	}{
		{3, []time.Duration{2500, 4000, 5500, 7000, 8500, 10000}},
		{0, []time.Duration{2500, 4000, 2500, 5500, 7000, 4000}},
	} {
		var reqs []*trace.Request
		for _, id := range ids {
			reqs = append(reqs, req(id, 0, 10, 1))
		}
		cfg := Config{Workers: 7, Client: ClientConfig{LatencySec: 0.001, APIServerRequestSec: 0.0015, APIServerRanks: 2, PrefillAPIServerRanks: tc.prefillRanks},
			Disaggregation: DisaggregationConfig{PrefillWorkers: 3, KVBytesPerToken: 1000, TransferGBps: 10}}
		byID, _, _ := replay(t, cfg, linearCost{Base: ms, PerToken: 100 * time.Microsecond}, 100, reqs)
		for k, id := range ids {
			want := trace.Time(tc.want[k] * time.Microsecond)
			if got := byID[id].WorkerArrival.V; got != want {
				t.Errorf("prefill ranks %d: %s reached its prefill rank at %d ns, want %d", tc.prefillRanks, id, got, want)
			}
		}
	}
	// The decode workers' servers follow the prefill pool's: slots 3, 4
	// share one, 5, 6 the next.
	e := &engine{apiRanks: 2, apiPrefillRanks: 3, apiPrefillSlots: 3, apiDecodeFirst: 1}
	for w, want := range []int{0, 0, 0, 1, 1, 2, 2} {
		if got := e.apiServerOf(w); got != want {
			t.Errorf("worker slot %d: API server %d, want %d", w, got, want)
		}
	}
	bad := Config{Workers: 4, Client: ClientConfig{PrefillAPIServerRanks: 2}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "client.prefill_api_server_ranks: 2 without disaggregation") {
		t.Errorf("prefill_api_server_ranks without disaggregation: error %v", err)
	}
	bad.Disaggregation = DisaggregationConfig{PrefillWorkers: 1, KVBytesPerToken: 1000, TransferGBps: 10}
	bad.Client.PrefillAPIServerRanks = 5
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "client.prefill_api_server_ranks: 5 is not a number of workers in [0, 4]") {
		t.Errorf("prefill_api_server_ranks past the fleet: error %v", err)
	}
}
