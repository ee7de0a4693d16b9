package replay

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// An Inputs is the replay's input, by index. Request must return the same
// content each time it is asked for i: the engine reads every request once
// before the replay (arrivals, lengths, prefixes) and again when it
// arrives, and keeps it only while it is in flight. A generator that
// builds requests on demand thus replays a million requests without
// holding them (see Requests for a slice). A replay split among
// goroutines (parallel.go) asks for different requests from several
// goroutines at once, each request from one.
type Inputs interface {
	Len() int
	Request(i int) *trace.Request
}

// A shaper is Inputs built valid (lengths and arrivals present and not
// negative, no hash ids) that can tell a request's shape without building
// it, so that the engine's pass over all requests before the replay
// allocates nothing.
type shaper interface {
	shape(i int) (prompt, out int64, arrival trace.Time)
	// ident sets on o what base copies from Request(i) besides the
	// lengths: so a replay of a generated workload builds one record per
	// request, not two.
	ident(i int, o *trace.Request)
}

// A peeker is Inputs that can set a Request the caller reuses to its i-th
// request, so that the engine's passes over all requests before the
// replay (checks, arrival order, shared prefixes, sessions) do not build
// one request each (Columns).
type peeker interface {
	peek(i int, r *trace.Request)
}

// peek returns request i of reqs: scratch, set to it, when reqs is a
// peeker (valid until the next peek), else reqs.Request(i).
func peek(reqs Inputs, i int, scratch *trace.Request) *trace.Request {
	if p, ok := reqs.(peeker); ok {
		p.peek(i, scratch)
		return scratch
	}
	return reqs.Request(i)
}

// Requests is a slice of requests as Inputs.
type Requests []*trace.Request

// Len implements Inputs.
func (r Requests) Len() int { return len(r) }

// Request implements Inputs.
func (r Requests) Request(i int) *trace.Request { return r[i] }

// checkInputs rejects inputs the replay cannot interpret, before any
// simulation, with FILE:LINE: field: what is wrong.
func checkInputs(reqs Inputs, open bool) error {
	if _, ok := reqs.(shaper); ok {
		return nil // valid by construction
	}
	var errs []error
	var scratch trace.Request
	for i := range reqs.Len() {
		r := peek(reqs, i, &scratch)
		bad := func(field, msg string) {
			errs = append(errs, fmt.Errorf("%s: %s: %s", requestPos(r, i), field, msg))
		}
		switch {
		case r == nil:
			errs = append(errs, fmt.Errorf("request %d: nil", i))
			continue
		case !r.InputTokens.OK:
			bad("input_tokens", "absent (replay needs the prompt length)")
		case r.InputTokens.V < 0:
			bad("input_tokens", "negative")
		}
		switch {
		case !r.OutputTokens.OK:
			bad("output_tokens", "absent (replay needs the output length)")
		case r.OutputTokens.V < 0:
			bad("output_tokens", "negative")
		}
		if open {
			switch {
			case !r.Arrival.OK:
				bad("arrival_s", "absent (the open loop replays arrival times; use the closed loop)")
			case r.Arrival.V < 0:
				bad("arrival_s", "negative")
			}
		}
		if len(errs) >= 10 {
			errs = append(errs, errors.New("too many errors"))
			break
		}
	}
	return errors.Join(errs...)
}

// arrivalTime is the open-loop arrival of a request sent at a in the
// trace: a scaled.
func (e *engine) arrivalTime(a trace.Time) trace.Time {
	if e.cfg.Workload.TimeScale == 1 {
		return a
	}
	return trace.Time(float64(a)*e.cfg.Workload.TimeScale + 0.5)
}

// prepare computes what the replay knows before it starts: the open
// loop's arrival order, every request's worker when the router is
// load-blind (with each worker's arrival times, for fast-forward), and
// which prefix blocks the cache must index.
func (e *engine) prepare() {
	n := e.reqs.Len()
	e.n = n
	e.nextArrival = never
	open := e.cfg.Workload.Mode == ModeOpen
	prefix := *e.cfg.Scheduler.EnablePrefixCaching && !e.test.indexAll
	_, blind := e.router.(loadBlind)
	// In the sessions mode arrivals follow completions, so their order
	// is only known as the replay runs.
	blind = blind && !e.test.noPreRoute && e.cfg.Workload.Mode != ModeSessions && e.scale == nil && e.pd == nil
	if e.cfg.Workload.Mode == ModeSessions {
		e.prepareSessions()
	}
	if open {
		e.at = make([]trace.Time, n)
	}
	var ok []bool // request can be served
	if blind {
		ok = make([]bool, n)
	}
	var ids [][]int64 // hash ids, when prefixes matter
	var bs []int64    // trace block size (0: none)
	var scratch trace.Request
	sh := e.sh
	for i := range n {
		if sh != nil {
			prompt, out, at := sh.shape(i)
			if open {
				e.at[i] = e.arrivalTime(at)
			}
			if blind {
				ok[i] = e.rejectReason(prompt, out) == ""
			}
			continue
		}
		r := peek(e.reqs, i, &scratch)
		if open {
			e.at[i] = e.arrivalTime(r.Arrival.V)
		}
		if blind {
			ok[i] = e.rejectReason(r.InputTokens.V, r.OutputTokens.V) == ""
		}
		if prefix && len(r.HashIDs) > 0 {
			if ids == nil {
				ids, bs = make([][]int64, n), make([]int64, n)
			}
			ids[i] = r.HashIDs
			bs[i] = r.BlockSize.V
			if !r.BlockSize.OK {
				bs[i] = 0
			}
		}
	}
	var order []int32 // arrival order; nil: index order
	if open {
		e.order = make([]int32, n)
		for i := range e.order {
			e.order[i] = int32(i)
		}
		slices.SortStableFunc(e.order, func(a, b int32) int { return cmp.Compare(e.at[a], e.at[b]) })
		order = e.order
	}
	if blind {
		e.route = make([]int32, n)
		each := func(i int32) {
			e.route[i] = -1
			if ok[i] {
				e.routed = Routed{Index: int(i)}
				wi := e.router.Route(&e.routed, &e.view)
				e.route[i] = int32(wi)
				if open && wi >= 0 && wi < len(e.workers) {
					w := e.workers[wi]
					w.arrivals = append(w.arrivals, e.at[i].Add(e.lat))
				}
			}
		}
		if order != nil {
			for _, i := range order {
				each(i)
			}
		} else {
			for i := range int32(n) {
				each(i)
			}
		}
	}
	if ids != nil {
		// A block of a request routed elsewhere can hit in the shared
		// remote tier.
		switch {
		case e.off != nil && e.off.remote != nil, e.pd != nil:
			// (Disaggregated: a request's blocks are on two workers.)
			e.shared = sharedPrefixes(ids)
		case e.route != nil:
			e.shared = sharedOnWorkers(ids, bs, e.route, len(e.workers))
		default:
			e.online = newOnlineSharing(ids, bs)
		}
	}
}

// requestPos is where request i, q, came from (FILE:LINE), or "request
// i" when it was not read from a file.
func requestPos(q *trace.Request, i int) string {
	if file, line := q.Pos(); line > 0 {
		return file + ":" + strconv.Itoa(line)
	}
	return "request " + strconv.Itoa(i)
}
