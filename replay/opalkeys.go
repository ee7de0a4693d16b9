package replay

import (
	"fmt"

	"github.com/opaltrace/opaltrace/trace"
)

// opalChunkKeys returns the keys and token counts of the KV chunks of
// chunk tokens that Opal's LMCache-style token database makes of in's
// prompt (kvc_manager.py process_tokens: a chain of hashes over the
// tokens, the last chunk possibly partial, save_unfull_chunk being
// always on). Two prompts get the same key for chunk j exactly when their
// first tokens up to the end of chunk j are the same.
//
// The tokens are Opal's: a trace request's hash id h of a block of B
// tokens (B its chunk_size) stands for B tokens of its own, the last
// block for the tokens left, and a block of fewer tokens is another
// content ("h:size", workload.py _expand_prompt); a synthetic request's
// prompt is the token ids 0…n−1, so every prompt is a prefix of every
// longer one (opal-notes.md). Opal derives a block's tokens from
// Python's salted str hash, 22 bits of it, so two blocks may rarely share
// tokens there; here they never do.
func opalChunkKeys(in *trace.Request, chunk int64) (keys []uint64, sizes []int64, err error) {
	n := in.InputTokens.V
	c := opalChunker{chunk: chunk, acc: opalKeyRoot}
	if in.Source == "opal-synthetic" {
		c.add(opalSyntheticBase, 0, n)
		return c.finish()
	}
	bs, ok := in.BlockSize.Get()
	if !ok || bs < 1 || int64(len(in.HashIDs))*bs < n {
		return nil, nil, fmt.Errorf("opal compat: Opal expands a trace request's hash_ids into its prompt: want hash_ids of chunk_size tokens covering its %d tokens, have %d ids of %d",
			n, len(in.HashIDs), bs)
	}
	left := n
	for _, h := range in.HashIDs {
		size := min(bs, left)
		c.add(opalMix(opalMix(opalKeyRoot, uint64(h)), uint64(size)), 0, size)
		left -= size
		if left <= 0 {
			break
		}
	}
	return c.finish()
}

// opalSyntheticBase stands for the token ids 0…n−1 of synthetic prompts.
const opalSyntheticBase = 0x5eed0f0a1

// opalKeyRoot starts every chain (Opal's NONE_HASH).
const opalKeyRoot = 0x6f70616c6b657973

// An opalChunker cuts runs of tokens into chunks and chains their keys.
type opalChunker struct {
	chunk  int64
	acc    uint64 // the chain so far, with the current chunk's runs mixed in
	filled int64  // tokens in the current chunk
	keys   []uint64
	sizes  []int64
}

// add appends the tokens off…off+count−1 of the run base.
func (c *opalChunker) add(base uint64, off, count int64) {
	for count > 0 {
		take := min(count, c.chunk-c.filled)
		c.acc = opalMix(opalMix(opalMix(c.acc, base), uint64(off)), uint64(take))
		c.filled += take
		off += take
		count -= take
		if c.filled == c.chunk {
			c.close()
		}
	}
}

func (c *opalChunker) close() {
	c.acc = opalMix(c.acc, uint64(c.filled))
	c.keys = append(c.keys, c.acc)
	c.sizes = append(c.sizes, c.filled)
	c.filled = 0
}

func (c *opalChunker) finish() ([]uint64, []int64, error) {
	if c.filled > 0 {
		c.close()
	}
	return c.keys, c.sizes, nil
}

// opalMix folds v into the hash h (splitmix64's finaliser).
func opalMix(h, v uint64) uint64 {
	x := h ^ v + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
