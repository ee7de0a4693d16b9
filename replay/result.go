package replay

import (
	"slices"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// SourceSimulated is the Source of every Request a replay emits.
const SourceSimulated = "simulated"

// base returns the output record's identity and shape fields, shared by
// completed and rejected requests.
func (e *engine) base(in *trace.Request, i int32, arrival trace.Time) *trace.Request {
	o := &trace.Request{
		RequestID:     in.RequestID,
		Run:           in.Run,
		Stage:         in.Stage,
		Source:        SourceSimulated,
		Model:         in.Model,
		LoRA:          in.LoRA,
		Session:       in.Session,
		InputTokens:   in.InputTokens,
		OutputTokens:  in.OutputTokens,
		BlockSize:     in.BlockSize,
		HashIDs:       slices.Clone(in.HashIDs),
		Arrival:       trace.Some(arrival),
		Created:       trace.Some(arrival),
		RouterArrival: trace.Some(arrival),

		ITLUnit:            trace.ITLToken,
		E2EBasis:           trace.E2ELastToken,
		TTFTBasis:          trace.TTFTFirstChunk,
		OutputTokensSource: trace.OutputRequested,
	}
	if o.RequestID == "" {
		o.RequestID = in.Run + "/" + strconv.Itoa(int(i))
	}
	if e.cfg.Workload.Mode == ModeOpen {
		o.IntendedArrival = o.Arrival
	}
	o.SetPos(in.Pos())
	return o
}

// result builds the simulated record of a completed request.
//
// Note: there is no network, tokenizer or KV-transfer time yet, so the
// router, worker arrival, start of processing and readiness all equal the
// arrival, and the stream has no client overhead: the first token reaches
// the client when its step ends (first_chunk semantics), and each token is
// its own chunk (stream interval 1).
func (e *engine) result(r *reqState, now trace.Time) *trace.Request {
	o := e.base(r.in, r.idx, r.arrival)
	o.Status = trace.StatusOK
	o.FinishReason = "length"
	o.Worker = e.workers[r.worker].name
	o.OutputTokens = trace.Some(r.out)
	o.CachedTokens = trace.Some(r.cached)
	o.DeviceHitTokens = trace.Some(r.cached)
	o.TTFTSec = trace.Some(r.firstTok.Sub(r.arrival).Seconds())
	o.E2ESec = trace.Some(r.lastTok.Sub(r.arrival).Seconds())
	o.ITLSec = r.itl
	if o.ITLSec == nil {
		o.ITLSec = []float64{}
	}
	wait := r.gpuStart.Sub(r.workerArrival).Seconds()
	o.QueueSec = trace.Some(wait)
	o.ScheduleSec = trace.Some(wait)
	o.PrefillSec = trace.Some(r.firstTok.Sub(r.gpuStart).Seconds())
	o.DecodeSec = trace.Some(r.lastTok.Sub(r.firstTok).Seconds())
	o.Preemptions = trace.Some(r.preemptions)
	o.WorkerArrival = trace.Some(r.workerArrival)
	o.StartProcessing = trace.Some(r.workerArrival)
	o.Ready = trace.Some(r.workerArrival)
	o.GPUStart = trace.Some(r.gpuStart)
	o.PrefillDone = trace.Some(r.firstTok)
	o.DecodeDone = trace.Some(r.lastTok)
	o.DoneAtRouter = trace.Some(now)
	return o
}
