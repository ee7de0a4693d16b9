package replay

import (
	"fmt"
	"math"
	"testing"

	"github.com/opaltrace/opaltrace/trace"
)

// A validator checks every step and every output of a replay against the
// engine's invariants, as trace/internal/testtrace/validation.go checks a
// Go execution trace.
type validator struct {
	t       *testing.T
	cfg     Config
	in      map[string]*trace.Request
	busyTil []trace.Time // per worker: end of its last step
	steps   int
}

func newValidator(t *testing.T, cfg Config, reqs []*trace.Request) *validator {
	cfg = cfg.withDefaults()
	slots := max(cfg.Workers, cfg.Autoscale.mostWorkers()) // autoscaling starts workers in more slots
	v := &validator{t: t, cfg: cfg, in: map[string]*trace.Request{}, busyTil: make([]trace.Time, slots)}
	for _, r := range reqs {
		v.in[r.RequestID] = r
	}
	return v
}

func (v *validator) step(s *Step) error {
	v.steps++
	// A worker's steps are observed in its own time order; fast-forward
	// runs one worker's steps ahead of the others', so the order across
	// workers is the order of windows, not of steps.
	if s.End <= s.Start {
		return fmt.Errorf("step [%v, %v] has no duration", s.Start, s.End)
	}
	if s.Start < v.busyTil[s.Worker] {
		return fmt.Errorf("worker %d starts a step at %v while busy until %v: time went back", s.Worker, s.Start, v.busyTil[s.Worker])
	}
	v.busyTil[s.Worker] = s.End
	if err := s.KV.Check(); err != nil {
		return err
	}
	if s.KV.NumFree()+s.KV.NumUsed() != s.KV.NumBlocks() {
		return fmt.Errorf("KV blocks not conserved: free %d + used %d != %d", s.KV.NumFree(), s.KV.NumUsed(), s.KV.NumBlocks())
	}
	tokens := int64(len(s.Batch.Decode))
	for _, p := range s.Batch.Prefill {
		if p.Tokens <= 0 || p.Context < 0 {
			return fmt.Errorf("bad prefill chunk %+v", p)
		}
		tokens += p.Tokens
	}
	if tokens > v.cfg.Scheduler.MaxNumBatchedTokens {
		return fmt.Errorf("step computes %d tokens, budget %d", tokens, v.cfg.Scheduler.MaxNumBatchedTokens)
	}
	if seqs := len(s.Batch.Decode) + len(s.Batch.Prefill); seqs > v.cfg.Scheduler.MaxNumSeqs || s.Running > v.cfg.Scheduler.MaxNumSeqs {
		return fmt.Errorf("step has %d sequences, %d running; max_num_seqs %d", seqs, s.Running, v.cfg.Scheduler.MaxNumSeqs)
	}
	if s.Preempted > 0 && s.Radix == nil && s.KV.NumUsed() == 0 && s.Running > 0 { // SGLang: checkRadix
		return fmt.Errorf("preempted while running requests hold no blocks")
	}
	return nil
}

func (v *validator) output(o *trace.Request) error {
	in := v.in[o.RequestID]
	if in == nil {
		return fmt.Errorf("output for unknown request %q", o.RequestID)
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%s: %w", o.RequestID, err)
	}
	if o.Source != SourceSimulated {
		return fmt.Errorf("%s: source %q", o.RequestID, o.Source)
	}
	if o.Status == trace.StatusRejected {
		return nil
	}
	if o.Status == trace.StatusTimeout {
		limit := v.cfg.Client.TimeoutSec + 2*v.cfg.Client.LatencySec
		if !o.DoneAtRouter.OK || o.DoneAtRouter.V < o.Arrival.V || o.OutputTokens.V >= in.OutputTokens.V+1 ||
			o.TTFTSec.OK && o.TTFTSec.V > v.cfg.Client.TimeoutSec+1e-9 || o.E2ESec.OK {
			return fmt.Errorf("%s: bad timeout record %v", o.RequestID, o)
		}
		// The server finishes a timed-out request when it learns the
		// client left (timeout + latency after sending), or earlier
		// when its last chunk would still arrive too late (after
		// timeout − latency).
		if v.cfg.Client.TimeoutSec == 0 || o.DoneAtRouter.V.Sub(o.Arrival.V).Seconds() <= v.cfg.Client.TimeoutSec-v.cfg.Client.LatencySec-1e-9 {
			return fmt.Errorf("%s: timed out %v after it was sent (limit %g s)", o.RequestID, o.DoneAtRouter.V.Sub(o.Arrival.V), limit)
		}
		return nil
	}
	if o.Status != trace.StatusOK {
		return fmt.Errorf("%s: status %s", o.RequestID, o.Status)
	}
	out := o.OutputTokens.V
	k := v.cfg.Scheduler.StreamInterval
	if out != in.OutputTokens.V || int64(len(o.ITLSec)) != numChunks(out, k)-1 {
		return fmt.Errorf("%s: %d output tokens, %d ITL gaps at stream interval %d; requested %d", o.RequestID, out, len(o.ITLSec), k, in.OutputTokens.V)
	}
	if k > 1 {
		var sum int64
		for _, c := range o.ChunkTokens {
			sum += int64(c)
		}
		if sum != out || len(o.ChunkTokens) != len(o.ITLSec)+1 || o.ITLUnit != trace.ITLChunk {
			return fmt.Errorf("%s: chunks %v (unit %s) for %d tokens and %d gaps", o.RequestID, o.ChunkTokens, o.ITLUnit, out, len(o.ITLSec))
		}
	}
	life := []trace.Opt[trace.Time]{o.Created, o.RouterArrival, o.WorkerArrival, o.StartProcessing, o.Ready, o.GPUStart, o.PrefillDone, o.DecodeDone, o.DoneAtRouter}
	for i, x := range life {
		if !x.OK {
			return fmt.Errorf("%s: lifecycle timestamp %d absent", o.RequestID, i)
		}
		if i > 0 && x.V < life[i-1].V {
			return fmt.Errorf("%s: lifecycle timestamp %d (%v) before the previous one (%v)", o.RequestID, i, x.V, life[i-1].V)
		}
	}
	if to := v.cfg.Client.TimeoutSec; to > 0 && o.E2ESec.V > to+1e-9 {
		return fmt.Errorf("%s: completed in %g s, after its client gave up at %g s", o.RequestID, o.E2ESec.V, to)
	}
	if o.PrefillDone.V <= o.Arrival.V {
		return fmt.Errorf("%s: first token at %v, not after arrival %v", o.RequestID, o.PrefillDone.V, o.Arrival.V)
	}
	var sum float64
	for _, g := range o.ITLSec {
		sum += g
	}
	if d := o.TTFTSec.V + sum - o.E2ESec.V; math.Abs(d) > 1e-9*float64(out+1) {
		return fmt.Errorf("%s: TTFT + ΣITL − E2E = %g", o.RequestID, d)
	}
	if o.CachedTokens.V >= in.InputTokens.V+0 && o.CachedTokens.V > 0 {
		return fmt.Errorf("%s: %d cached tokens of a %d-token prompt", o.RequestID, o.CachedTokens.V, in.InputTokens.V)
	}
	if o.CachedTokens.V%v.cfg.Scheduler.BlockSize != 0 {
		return fmt.Errorf("%s: %d cached tokens is not whole blocks", o.RequestID, o.CachedTokens.V)
	}
	return nil
}

func (v *validator) finish(all []*trace.Request) {
	v.t.Helper()
	if len(all) != len(v.in) {
		v.t.Errorf("%d outputs for %d inputs", len(all), len(v.in))
	}
	seen := map[string]bool{}
	for _, o := range all {
		if seen[o.RequestID] {
			v.t.Errorf("%s emitted twice", o.RequestID)
		}
		seen[o.RequestID] = true
	}
	// Completion order: emitted DoneAtRouter never decreases.
	for i := 1; i < len(all); i++ {
		if all[i].DoneAtRouter.V < all[i-1].DoneAtRouter.V {
			v.t.Errorf("%s emitted after %s but done earlier", all[i].RequestID, all[i-1].RequestID)
		}
	}
}
