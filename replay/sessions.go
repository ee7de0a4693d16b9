package replay

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// prepareSessions groups the requests into sessions for the sessions
// mode: the requests of one Session (a request without one is a session
// of its own), ordered by Turn (then position), each followed by the next;
// sessions start in the order of their first request's arrival (then
// position), or by position when they have no arrivals.
func (e *engine) prepareSessions() {
	n := e.n
	e.nextTurn = make([]int32, n)
	e.think = make([]time.Duration, n)
	ids := map[string]int{}
	var sessions [][]int32
	turn := make([]int64, n)
	arrival := make([]int64, n)
	var scratch trace.Request
	for i := range n {
		r := peek(e.reqs, i, &scratch)
		turn[i] = math.MaxInt64
		if r.Turn.OK {
			turn[i] = r.Turn.V
		}
		arrival[i] = math.MaxInt64
		if r.Arrival.OK {
			arrival[i] = int64(r.Arrival.V)
		}
		if t, ok := r.ThinkSec.Get(); ok && t > 0 {
			e.think[i] = trace.DurationSeconds(t)
		}
		s, ok := ids[r.Session]
		if !ok || r.Session == "" {
			s = len(sessions)
			ids[r.Session] = s
			sessions = append(sessions, nil)
		}
		sessions[s] = append(sessions[s], int32(i))
	}
	for _, s := range sessions {
		slices.SortStableFunc(s, func(a, b int32) int { return cmp.Compare(turn[a], turn[b]) })
		for k, i := range s {
			e.nextTurn[i] = -1
			if k+1 < len(s) {
				e.nextTurn[i] = s[k+1]
			}
		}
		e.starts = append(e.starts, s[0])
	}
	slices.SortStableFunc(e.starts, func(a, b int32) int {
		return cmp.Or(cmp.Compare(arrival[a], arrival[b]), cmp.Compare(a, b))
	})
}
