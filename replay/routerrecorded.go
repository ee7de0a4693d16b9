package replay

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/trace"
)

// recorded sends each request to the worker its trace names
// (trace.Request.Worker): the placement that was measured — a production
// gateway's, read from a trace that records the serving instance, or a
// replay's own, read from its output — replayed on the simulated workers.
// The names take worker slots in natural order (w2 before w10), and the
// simulated workers take their names, so that a replay's records name the
// workers as the trace did. It scores nothing.
//
// Replaying a replay's requests with the workers its records name, under
// the deployment that made it, gives that replay's records again, request
// by request, whatever router placed them (TestRecordedReplaysRouter); so
// it also tells what a router's own decisions cost the engine from what
// the placement they make costs it (BenchmarkReplayMooncakeRouters's
// recorded_NAME). A replay's Parquet output holds its records in the order
// they completed, though: read back as a trace, requests that arrive at
// one instant come in that order, not the first trace's, and the engine
// takes them so (`opaltrace replay` of llm_d's output of the Mooncake
// conversation trace, where every request shares its arrival instant
// with another: mean TTFT 486.33 ms, llm_d's 486.65).
//
// Note: it places each request as it arrives, as the online routers do,
// though it could place them all before the replay (loadBlind): its
// engine then indexes a shared prefix block only once a request that
// shares it comes to its worker, not every such block when it fills,
// which on the Mooncake trace's placements is less engine work or as much
// (callgrind, `scripts/enginework`, instructions of one replay placed
// before / as they arrive: round_robin's placement 561.9 / 557.3 M,
// dynamo_kv's 610.1 / 604.6, max_prefix's 639.5 / 611.9,
// sglang_cache_aware's 733.1 / 675.4, llm_d's 728.7 / 678.8).
type recorded struct {
	slot []int32 // per request, its worker's slot (disaggregated: its prefill worker's)
	// decode holds, disaggregated, per request its decode worker's
	// place in the decode pool (nil: aggregated).
	decode []int32
	// names holds, per slot, the trace's name for it: aggregated, the
	// first slots'; disaggregated, every slot's, "" where the trace
	// names no worker of a pool's slot.
	names []string
}

func (r *recorded) Route(q *Routed, _ Cluster) int { return int(r.slot[q.Index]) }

// assign reads every request's worker, gives the names slots, and reports
// requests without one (FILE:LINE: worker: absent, at most ten) or more
// names than slots. Disaggregated (prefill > 0), a request's prefill
// worker (trace.Request.PrefillWorker) takes one of the prefill pool's
// slots 0 … prefill−1 and its worker one of the decode pool's, the
// others: the trace's placement is both the router's choice and the
// decode router's.
func (r *recorded) assign(reqs Inputs, slots, prefill int) error {
	if _, ok := reqs.(shaper); ok {
		return errors.New("router recorded: a generated workload names no workers (replay a trace whose requests have a worker field)")
	}
	if prefill == 0 {
		var err error
		r.slot, r.names, err = namedSlots(reqs, "worker", "workers", slots, func(n int) string { return "set workers to " + strconv.Itoa(n) }, func(q *trace.Request) string { return q.Worker })
		return err
	}
	var errs [2]error
	var pre, dec []string
	r.slot, pre, errs[0] = namedSlots(reqs, "prefill_worker", "prefill workers", prefill, func(n int) string {
		return "set disaggregation.prefill_workers to " + strconv.Itoa(n) + " and workers to " + strconv.Itoa(slots-prefill+n)
	}, func(q *trace.Request) string { return q.PrefillWorker })
	r.decode, dec, errs[1] = namedSlots(reqs, "worker", "decode workers", slots-prefill, func(n int) string {
		return "set workers to " + strconv.Itoa(prefill+n)
	}, func(q *trace.Request) string { return q.Worker })
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	for _, s := range pre {
		if slices.Contains(dec, s) {
			return fmt.Errorf("router recorded: the trace names %s as a prefill worker (prefill_worker) and as a decode worker (worker): a worker of a disaggregated deployment is in one pool", s)
		}
	}
	r.names = make([]string, slots)
	copy(r.names, pre)
	copy(r.names[prefill:], dec)
	return nil
}

// namedSlots gives each request the slot of the name that name reads off
// it (field, in errors), the names taking slots 0 … size−1 in natural
// order, and returns the slots by request and the names in slot order.
// It reports requests without a name (FILE:LINE: field: absent, at most
// ten) and more names (what, in errors) than slots, with fix(names) to
// say what to set.
func namedSlots(reqs Inputs, field, what string, size int, fix func(int) string, name func(*trace.Request) string) ([]int32, []string, error) {
	// Each request's slot is first its name's place in order of first
	// appearance (seen), renumbered once the names are sorted.
	n := reqs.Len()
	slot := make([]int32, n)
	seen := map[string]int32{}
	var firsts []string // the names, in order of first appearance
	var errs []error
	var scratch trace.Request
	for i := range n {
		q := peek(reqs, i, &scratch)
		s := name(q)
		if s == "" {
			if len(errs) == 10 {
				errs = append(errs, errors.New("too many errors"))
				break
			}
			errs = append(errs, fmt.Errorf("%s: %s: absent (router recorded sends each request to the worker its trace names)", requestPos(q, i), field))
			continue
		}
		k, ok := seen[s]
		if !ok {
			k = int32(len(firsts))
			seen[s] = k
			firsts = append(firsts, s)
		}
		slot[i] = k
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	names := slices.Clone(firsts)
	slices.SortFunc(names, human.NaturalCompare)
	if len(names) > size {
		return nil, nil, fmt.Errorf("router recorded: the trace names %d %s (%s), the deployment has %d: %s", len(names), what, human.FirstOf(names, 4), size, fix(len(names)))
	}
	for k, s := range names {
		seen[s] = int32(k)
	}
	for i, k := range slot {
		slot[i] = seen[firsts[k]]
	}
	return slot, names, nil
}
