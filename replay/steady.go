package replay

import (
	"fmt"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// steadySteps runs, from now, the steps of a steady vLLM worker (every
// running request decodes one token a step; see worker.steady) up to the
// first that completes a request: the inner loop of fast-forward, where a
// replay at moderate load spends most of its steps. It allocates the
// blocks and commits the hashes each step needs, as decodeStep does, and
// stops before a step whose allocation fails (which build must handle by
// preemption). It returns the time the steps reached. When a step ends at
// or after bound, that step is left in flight, exactly as schedule leaves
// it, its end is queued, and inFlight is true.
//
// Note: the steps are those schedule would run one at a time, with the
// same allocations in the same order, priced by the same step model, so
// the results are identical (TestFastForwardSameResults runs both). What
// it saves is the general path's per-step bookkeeping: a step costs its
// price (mostly an index into the page of a price table the last step
// used: priceCursor, decodePrice) and one ITL entry per
// request.
func (e *engine) steadySteps(w *worker, now, bound trace.Time) (end trace.Time, inFlight bool, err error) {
	limit := int64(1) << 62 // steps before the first that completes a request
	var ctx int64           // sum of the contexts of the first step's decodes
	for _, r := range w.running {
		limit = min(limit, r.maxOut-r.out-1)
		ctx += r.computed
	}
	if limit <= 0 {
		return now, false, nil
	}
	start := now
	n := int64(len(w.running))
	var busy time.Duration
	var j int64 // steps run
	s := w.s
	grow := s.steadyStart(w) // the next step that allocates
	pr := e.pricingOf(w)
	if n == 1 && w.stream == 1 && !e.test.noLoneMemo {
		// The commonest case at moderate load: one request alone.
		r := w.running[0]
		prices := priceCursor{pricing: pr, n: 1}
		for j < limit {
			if j >= grow {
				var ok bool
				if grow, ok = s.steadyAlloc(w, j); !ok {
					break // build must evict or preempt
				}
			}
			p, ok := prices.hit(ctx + j)
			if !ok {
				p = prices.ask(ctx + j)
			}
			j++
			if p.d <= 0 {
				return now, false, fmt.Errorf("replay: step model returned a non-positive step time %v", p.d)
			}
			busy += p.d
			end := now.Add(p.d)
			if end >= bound {
				return e.inFlight(w, start, now, end, busy, j)
			}
			r.itl = append(r.itl, p.s)
			now = end
		}
		e.ran(w, start, now, busy, j)
		if e.test.checkSteady != nil {
			e.test.checkSteady(w, false)
		}
		return now, false, nil
	}
	durs, secs := w.durs[:0], w.secs[:0]
	defer func() { w.durs, w.secs = durs[:0], secs[:0] }()
	grownAhead := false
	prices := priceCursor{pricing: pr, n: int(n)}
	for j < limit {
		if j >= grow {
			var ok bool
			if grow, ok = s.steadyAlloc(w, j); !ok {
				grownAhead = true
				break // build must evict, preempt or retract
			}
		}
		var p stepPrice
		if pr.sum != nil {
			var ok bool
			if p, ok = prices.hit(ctx + n*j); !ok {
				p = prices.ask(ctx + n*j)
			}
		} else {
			for i, r := range w.running {
				w.batch.Decode[i] = r.computed + j
			}
			d := pr.price(&w.batch)
			p = stepPrice{d, stepSeconds(d)}
		}
		d := p.d
		j++
		if d <= 0 {
			return now, false, fmt.Errorf("replay: step model returned a non-positive step time %v", d)
		}
		busy += d
		end := now.Add(d)
		if end >= bound {
			e.emitSteps(w, start, durs, secs)
			return e.inFlight(w, start, now, end, busy, j)
		}
		durs = append(durs, d)
		if w.stream == 1 {
			secs = append(secs, p.s)
		}
		now = end
	}
	e.emitSteps(w, start, durs, secs)
	e.ran(w, start, now, busy, j)
	if e.test.checkSteady != nil {
		e.test.checkSteady(w, grownAhead)
	}
	return now, false, nil
}

// ran records k steps run by steadySteps from start to now, each giving
// every running request a token, and whose ITL entries are already
// appended.
func (e *engine) ran(w *worker, start, now trace.Time, busy time.Duration, k int64) {
	e.stats.Steps += k
	e.stats.BusyTime += busy
	if now != start {
		for _, r := range w.running {
			r.computed += k
			r.out += k
			r.lastTok = now
			if w.stream == 1 {
				r.lastChunk = now
			}
		}
	}
}

// inFlight records the steps of steadySteps, the last of which (the kth,
// from now to end) runs past the window: it is left in flight as schedule
// leaves a step, with its end queued.
func (e *engine) inFlight(w *worker, start, now, end trace.Time, busy time.Duration, k int64) (trace.Time, bool, error) {
	e.ran(w, start, now, busy, k-1)
	e.stats.Steps++
	for i, r := range w.running {
		w.batch.Decode[i] = r.computed
		r.computed++
	}
	w.stepStart = now
	w.busy, w.eventAt = true, end
	e.q.push(end, evStepEnd, int32(w.id))
	if e.test.checkSteady != nil {
		e.test.checkSteady(w, false)
	}
	return end, true, nil
}

// emitSteps appends the ITL entries of the steps of steadySteps, which
// began at start and took durs (secs: the same in seconds, at stream
// interval 1).
func (e *engine) emitSteps(w *worker, start trace.Time, durs []time.Duration, secs []float64) {
	for _, r := range w.running {
		if w.stream == 1 {
			// Every token is a chunk, and the gap before it is the
			// step that made it.
			r.itl = append(r.itl, secs...)
			continue
		}
		// A chunk closes every stream tokens (the last one, which
		// completes the request, is never among these steps).
		end := start
		for j, d := range durs {
			end = end.Add(d)
			if (r.out+int64(j))%w.stream == 0 {
				r.itl = append(r.itl, end.Sub(r.lastChunk).Seconds())
				r.lastChunk = end
			}
		}
	}
}
