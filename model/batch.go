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
