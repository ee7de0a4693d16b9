package calibrate

import (
	"slices"
	"time"

	"github.com/opaltrace/opaltrace/replay"
)

// burstGap is the spacing under which two requests sent one after the
// other are a burst for the API server: closer than a plausible time per
// request, so the second waits for the first. The surajssd Llama-3.3-70B
// qps inf run's 200 requests reached vLLM's engine core over some 250 ms
// (1.25 ms a request, README's cache carry-over note), and its sends are
// 0.4 ms apart; at qps 1 and 4 requests are 250–1,000 ms apart.
const burstGap = time.Millisecond

// burstRuns reports whether some training run measured at the client
// (a TTFT target: engine timestamps start after the API server) sends
// bursts that would queue at the API server (CoefAPIServer): a closed loop of several
// clients (they all send at once when the run starts), or an open loop
// in which at least a tenth of the requests, and two, arrive within
// burstGap of the request before them. Elsewhere the API server's time
// per request only delays each request, which the per-request overhead
// already fits, and the two cannot be told apart.
func burstRuns(runs []*ReplayRun) bool {
	for _, r := range runs {
		if r.Train && bursty(r) {
			return true
		}
	}
	return false
}

func bursty(r *ReplayRun) bool {
	if !slices.ContainsFunc(r.Targets, func(t Target) bool { return t.Metric == MetricTTFT }) {
		return false
	}
	w := r.Config.Workload
	if w.Mode == replay.ModeClosed {
		return w.Clients >= 2
	}
	if w.Mode != replay.ModeOpen && w.Mode != "" {
		return false // sessions: spread by think times
	}
	n := r.Inputs.Len()
	at := make([]int64, 0, n)
	for i := range n {
		q := r.Inputs.Request(i)
		if !q.Arrival.OK {
			return false
		}
		at = append(at, int64(q.Arrival.V))
	}
	slices.Sort(at)
	close := 0
	for i := 1; i < len(at); i++ {
		if at[i]-at[i-1] < int64(burstGap) {
			close++
		}
	}
	return close >= 2 && 10*close >= n
}
