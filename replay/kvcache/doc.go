// Package kvcache holds the GPU KV cache of one simulated worker: a pool of
// fixed-size blocks with reference counts, a full-block prefix cache keyed
// by chained block hashes, and least-recently-used eviction of unreferenced
// blocks, as vLLM v1's KVCacheManager and BlockPool keep them.
//
// It also derives engine block hashes from a trace's hash_ids (BlockHasher):
// a trace's blocks cover many tokens (Mooncake: 512), an engine's few (vLLM:
// 16), so engine block k is hashed from the trace blocks it lies in and from
// the hash of block k−1. Equal trace prefixes therefore give equal engine
// prefixes, a partial block is never hashed, and a request without hash_ids
// gets hashes of its own, so nothing is falsely shared.
//
// Blocks whose content no other request can have (BlockHasher reports
// them private) are held without being indexed (Cache.CommitPrivate), and
// while their owner runs unpreempted without ids at all: released, they
// return to the free queue as one run per request (Cache.AllocateNamed);
// the results are the same as indexing them block by block. Blocks that
// may be shared can be held so too, and promoted when a sharer comes:
// named and indexed, out of a run at their place in the queue
// (Cache.Promote).
//
// Radix is SGLang's cache instead: a token-granular radix tree over a
// pool of token slots, with lock counts from running requests and
// leaf-first LRU eviction of unlocked nodes; TokenKeys derives token-level
// keys from a trace's hash_ids.
//
// Below the GPU, a Tier is one level of KV storage (host DRAM, NVMe, a
// remote store): blocks by chained hash, a capacity, LRU eviction, entries
// pending while stored and pinned while loaded. A Fabric carries the
// transfers between tiers and GPUs over a node's shared links (PCIe per
// GPU and direction, host memory, NVMe, NIC) with max-min fair rates.
// PageKeys keys a token sequence's
// pages for SGLang's HiCache tiers.
//
// It does not own scheduling (which request gets blocks when, what is
// stored and loaded when: package replay).
package kvcache
