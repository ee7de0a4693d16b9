package replay

import (
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// SourceSimulated is the Source of every Request a replay emits.
const SourceSimulated = "simulated"

// base returns the output record's identity and shape fields, shared by
// completed and rejected requests. in is the input record (nil for a
// shaper's request, whose identity the shaper sets); prompt and out are
// its lengths; sent is when the client sent it, arrival when it reached
// the router.
func (e *engine) base(in *trace.Request, i int32, prompt, out int64, sent, arrival trace.Time) *trace.Request {
	o := e.record(i)
	*o = trace.Request{
		Source:        SourceSimulated,
		InputTokens:   trace.Some(prompt),
		OutputTokens:  trace.Some(out),
		Arrival:       trace.Some(sent),
		Created:       trace.Some(sent),
		RouterArrival: trace.Some(arrival),

		ITLUnit:            trace.ITLToken,
		E2EBasis:           trace.E2ELastToken,
		TTFTBasis:          trace.TTFTFirstChunk,
		OutputTokensSource: trace.OutputRequested,
	}
	if in != nil {
		o.RequestID, o.Run, o.Stage = in.RequestID, in.Run, in.Stage
		o.Model, o.LoRA, o.Session = in.Model, in.LoRA, in.Session
		o.InputTokens, o.OutputTokens = in.InputTokens, in.OutputTokens
		o.BlockSize, o.HashIDs = in.BlockSize, slices.Clone(in.HashIDs)
		o.SetPos(in.Pos())
	} else {
		e.sh.ident(int(i), o)
	}
	if o.RequestID == "" {
		o.RequestID = o.Run + "/" + strconv.Itoa(int(i))
	}
	if e.cfg.Workload.Mode == ModeOpen {
		o.IntendedArrival = o.Arrival
	}
	return o
}

// result builds the simulated record of a completed request.
//
// Note: there is no tokenizer or KV-transfer time yet, so the router,
// worker arrival, start of processing and readiness all equal the arrival
// at the router. The client measures as vLLM's benchmark does: TTFT to the
// first chunk (first_chunk), one ITL gap per chunk (per token at stream
// interval 1), E2E to the last chunk (last_token); every chunk reaches it
// one client latency after the server sent it, at the end of the step that
// produced its last token.
func (e *engine) result(r *reqState, now trace.Time) *trace.Request {
	o := e.base(r.in, r.idx, r.prompt, r.maxOut, r.sent, r.arrival)
	o.Status = trace.StatusOK
	o.FinishReason = "length"
	o.Worker = e.workers[r.worker].name
	if r.scored {
		o.RouterScore = trace.Some(r.score)
	}
	o.OutputTokens = trace.Some(r.out)
	o.CachedTokens = trace.Some(r.cached)
	o.DeviceHitTokens = trace.Some(r.cached)
	o.TTFTSec = trace.Some(r.firstTok.Add(e.lat).Sub(r.sent).Seconds())
	o.E2ESec = trace.Some(r.lastTok.Add(e.lat).Sub(r.sent).Seconds())
	o.ITLSec = r.itl
	if e.part != nil && e.part.transient {
		// r keeps its list for its next request (release), as in the
		// one loop; the record, emitted later, gets a copy in its own
		// memory.
		o.ITLSec = append(e.part.spare, r.itl...)
	}
	if o.ITLSec == nil {
		o.ITLSec = []float64{}
	}
	if k := e.cfg.Scheduler.StreamInterval; k > 1 {
		o.ITLUnit = trace.ITLChunk
		o.ChunkTokens = chunkTokens(r.out, k)
	}
	// Queue time as the engines count it, from the scheduling pass that
	// took r in (worker.unseen); ScheduleSec keeps the whole wait since
	// r reached the scheduler.
	o.QueueSec = trace.Some(r.gpuStart.Sub(r.engineQueued).Seconds())
	o.ScheduleSec = trace.Some(r.gpuStart.Sub(r.workerArrival).Seconds())
	o.PrefillSec = trace.Some(r.firstTok.Sub(r.gpuStart).Seconds())
	prefillDone := r.firstTok
	if r.prefilledPD {
		// Disaggregated: its prefill worker's, to its token there;
		// the hand-over (kv_fetch_s) and the decode worker's first
		// step come after.
		o.PrefillSec = trace.Some(r.pdPrefilled.Sub(r.gpuStart).Seconds())
		prefillDone = r.pdPrefilled
		o.PrefillWorker = e.workers[r.pdFrom].name
	}
	o.DecodeSec = trace.Some(r.lastTok.Sub(r.firstTok).Seconds())
	o.Preemptions = trace.Some(r.preemptions)
	o.WorkerArrival = trace.Some(r.workerArrival)
	o.StartProcessing = trace.Some(r.workerArrival)
	o.Ready = trace.Some(r.workerArrival)
	o.GPUStart = trace.Some(r.gpuStart)
	o.PrefillDone = trace.Some(prefillDone)
	o.DecodeDone = trace.Some(r.lastTok)
	o.DoneAtRouter = trace.Some(now)
	if e.off != nil {
		e.off.result(r, o)
	}
	if e.pd != nil {
		// From the load's request (the prefill's end, or under vLLM
		// the decode API server's hand-over) to the decode worker's
		// having the KV, the wait for the link included
		// (engine.startTransfer); with KV tiers, after the wait for
		// the prefill worker's tier loads.
		o.KVFetchSec = trace.Some((r.kvWait + r.pdKV).Seconds())
	}
	return o
}
