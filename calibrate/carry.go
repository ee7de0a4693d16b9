package calibrate

import (
	"fmt"
	"strconv"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// Cache carry-over between the runs of a sweep.
//
// A benchmark sweep (vLLM's run script, a rate loop around SGLang's
// bench_serving) sends the same prompts at one rate after another to one
// server. With prefix caching on, each run after the first finds the
// prompts in the cache the run before it left, so its prefills are
// nearly free: replayed cold, surajssd's rate-inf run had its median
// TTFT 5× too high. A ReplayRun with After set is replayed after that
// run: the earlier run's requests go first, unmeasured, in the same
// replay, and the run starts once they are done, with the cache they
// left.
//
// Note: only the one run before is replayed, itself from a cold cache.
// That leaves the cache as the whole session would when the runs send
// the same prompts and the cache holds one run's prompts (the case
// SameSession recognises); with other prompts the older runs' leftovers
// are missing.

// sessionGap is the longest pause between two runs of one server
// session that SameSession accepts: a sweep script starts the next run
// within seconds (surajssd's runs start 13–15 s after the one before
// ends); a longer pause may hide a restarted server.
const sessionGap = 10 * time.Minute

// vllmDateLayout is the "date" vLLM's benchmark_serving saves: the
// client's local time when the run ended and the result was written.
const vllmDateLayout = "20060102-150405"

// SameSession says whether run b ran right after run a on the same server
// with the same prompts, as far as their metadata tell: the same model,
// engine, hardware, tensor parallelism, client backend, dataset (vLLM 0.8
// did not save its name) and number of prompts; the same prompt lengths in
// the same order (one dataset sampled with one seed); and b started after a ended and within
// sessionGap of it, by the dates the benchmark saved (vLLM's "date", the
// end of a run, less b's duration). When not, it says why. Summary-only
// runs are never recognised: their prompts cannot be compared.
func SameSession(a, b trace.Run, inA, inB replay.Inputs) (bool, string) {
	switch {
	case a.Model != b.Model || a.Engine != b.Engine || a.Hardware != b.Hardware || a.TP != b.TP || a.Backend != b.Backend:
		return false, "another deployment or client backend"
	case a.Workload == nil || b.Workload == nil || a.Workload.NumPrompts == 0 || a.Workload.Dataset != b.Workload.Dataset ||
		a.Workload.NumPrompts != b.Workload.NumPrompts:
		return false, "not the same dataset and number of prompts, or none recorded"
	case inA == nil || inB == nil || inA.Len() == 0 || inA.Len() != inB.Len():
		return false, "no per-request prompt lengths to compare, or not as many requests"
	}
	for i := range inA.Len() {
		if la, lb := inA.Request(i).InputTokens, inB.Request(i).InputTokens; la != lb {
			return false, fmt.Sprintf("request %d has another prompt length (%v, %v)", i, la.V, lb.V)
		}
	}
	endA, errA := time.Parse(vllmDateLayout, a.Extra["date"])
	endB, errB := time.Parse(vllmDateLayout, b.Extra["date"])
	if errA != nil || errB != nil || !b.DurationSec.OK {
		return false, "no dates and duration saved to order the runs"
	}
	startB := endB.Add(-time.Duration(b.DurationSec.V * float64(time.Second)))
	if gap := startB.Sub(endA); gap < 0 || gap > sessionGap {
		return false, fmt.Sprintf("it started %v after the run before ended (not within 0 to %v)", gap.Round(time.Second), sessionGap)
	}
	return true, ""
}

// prefixTokens is the trace block size of the prompt keys keyedInputs
// gives requests that have none.
const prefixTokens = 16

// warmRun labels the requests of the run replayed first, whose records
// are dropped.
const warmRun = "\x00carried"

// keyedInputs is Inputs whose requests are sent at offset plus their own
// arrival (0 when they have none: a run sent all at once) and carry
// prompt keys: request i's prompt is prompt i of the dataset, so request
// i of two runs of one session share their whole prompt (their own hash
// ids, when they have some, are kept).
type keyedInputs struct {
	in     replay.Inputs
	offset trace.Time
	run    string // when not "", the Run label of every request
}

func (k keyedInputs) Len() int { return k.in.Len() }

func (k keyedInputs) Request(i int) *trace.Request {
	r := k.in.Request(i).Clone()
	at := trace.Time(0)
	if r.Arrival.OK {
		at = r.Arrival.V
	}
	r.Arrival = trace.Some(k.offset + at)
	r.IntendedArrival = r.Arrival
	if len(r.HashIDs) == 0 && r.InputTokens.OK {
		n := (r.InputTokens.V + prefixTokens - 1) / prefixTokens
		r.HashIDs = make([]int64, n)
		for b := range r.HashIDs {
			r.HashIDs[b] = int64(i+1)<<24 | int64(b)
		}
		r.BlockSize = trace.Some(int64(prefixTokens))
	}
	if k.run != "" {
		r.Run = k.run
	} else if r.RequestID == "" {
		r.RequestID = r.Run + "/" + strconv.Itoa(i) // as a replay of the run alone names it
	}
	return r
}

// concatInputs is a's requests followed by b's.
type concatInputs struct{ a, b replay.Inputs }

func (c concatInputs) Len() int { return c.a.Len() + c.b.Len() }

func (c concatInputs) Request(i int) *trace.Request {
	if i < c.a.Len() {
		return c.a.Request(i)
	}
	return c.b.Request(i - c.a.Len())
}

// carriedConfig is cfg for a replay after another run: open, every
// request at its own send time. Runs sent by clients in a loop cannot
// be laid one after another.
func carriedConfig(cfg replay.Config, n int) (replay.Config, error) {
	w := &cfg.Workload
	switch {
	case w.TimeScale != 0 && w.TimeScale != 1:
		return cfg, fmt.Errorf("cache carry-over: a time scale of %g is not supported", w.TimeScale)
	case w.Mode == replay.ModeClosed && w.Clients >= n, w.Mode == replay.ModeOpen, w.Mode == "":
	default:
		return cfg, fmt.Errorf("cache carry-over: workload mode %s with %d clients is not a run sent at its own times or all at once", w.Mode, w.Clients)
	}
	w.Mode, w.Clients = replay.ModeOpen, 1
	return cfg, nil
}

// A Carried is the replay of a run after the run before it (see the note
// at the top of this file): the configuration and inputs to replay, and
// Keep to tell the run's own records from the other's.
type Carried struct {
	Config replay.Config
	Inputs replay.Inputs
	offset trace.Time
}

// CarryAfter prepares the replay of in after prev on workers of cfg
// priced by step with kvBlocks KV blocks each, and the KV tiers and
// prefill pool of opt (the options the replay of both will have): it
// replays prev alone to find when it ends, and returns both runs'
// requests in one input, in's a second after prev's end.
func CarryAfter(cfg replay.Config, step model.StepModel, kvBlocks int64, prev, in replay.Inputs, opt replay.Options) (*Carried, error) {
	cfg, err := carriedConfig(cfg, max(in.Len(), prev.Len()))
	if err != nil {
		return nil, err
	}
	var end trace.Time
	warm := keyedInputs{in: prev, run: warmRun}
	_, err = replay.RunInputs(cfg, step, kvBlocks, warm, func(r *trace.Request) error {
		if r.Arrival.OK && r.E2ESec.OK {
			end = max(end, r.Arrival.V+trace.TimeFromSeconds(r.E2ESec.V))
		}
		return nil
	}, replay.Options{Transient: true, Offload: opt.Offload, DecodeOffload: opt.DecodeOffload, Prefill: opt.Prefill})
	if err != nil {
		return nil, fmt.Errorf("replaying the run before: %w", err)
	}
	offset := end + trace.TimeFromSeconds(1)
	return &Carried{Config: cfg, Inputs: concatInputs{warm, keyedInputs{in: in, offset: offset}}, offset: offset}, nil
}

// Keep says whether r, a record of the replay, is the run's own (not the
// run before's) and, if so, moves its times back by the offset, so that
// the run starts at 0 as it would replayed alone.
func (c *Carried) Keep(r *trace.Request) bool {
	if r.Run == warmRun {
		return false
	}
	for _, t := range []*trace.Opt[trace.Time]{&r.IntendedArrival, &r.Arrival, &r.Created, &r.RouterArrival, &r.WorkerArrival,
		&r.StartProcessing, &r.Ready, &r.GPUStart, &r.PrefillDone, &r.DecodeDone, &r.DoneAtRouter} {
		if t.OK {
			t.V -= c.offset
		}
	}
	return true
}
