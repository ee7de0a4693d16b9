package model

import "time"

// A Batch is the work of one forward pass over a mixed batch: the prefill
// chunks scheduled in this step and the requests that decode one token.
type Batch struct {
	Prefill []PrefillChunk
	// Decode holds, for each decoding request, its context length: the
	// tokens already in its KV cache that the new token attends to.
	Decode []int64
}

// A PrefillChunk is part of one request's prompt computed in a step.
type PrefillChunk struct {
	Tokens  int64 // new tokens computed in this chunk
	Context int64 // tokens already in KV before the chunk: prefix-cache hit plus earlier chunks
}

// A StepModel prices one forward pass. Implementations must be pure
// functions of the batch, so that replays are deterministic.
type StepModel interface {
	StepTime(b *Batch) time.Duration
}

// A DecodeSumModel is a StepModel that can price a batch of decodes alone
// from their number and the sum of their contexts, without the batch:
// the replay's inner loop keeps that sum as the batch advances. ok is
// false when the model needs the contexts one by one; the caller then
// asks StepTime. When ok, the price is StepTime's for any such batch.
type DecodeSumModel interface {
	StepModel
	DecodeStepTime(n int, ctxSum int64) (d time.Duration, ok bool)
}
